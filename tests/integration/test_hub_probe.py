"""The hub answers agents' probes with its clock, so agents can estimate their offset."""

from __future__ import annotations

import queue
import time
from typing import Any

import orjson
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from edge_agent.probes import ClockOffset
from hub.control.distribution import MqttControl
from spanedge import topics
from spanedge.sites import parse_sites


def test_probe_is_echoed_with_the_hub_clock(mosquitto: Any) -> None:
    sites = parse_sites(f'sites:\n  cloud: {{tier: hub, broker: "{mosquitto.url}"}}\n')
    control = MqttControl(sites.hubs[0].mqtt(), on_heartbeat=lambda site, payload: None).start()
    echoes: queue.Queue[dict[str, float]] = queue.Queue()
    agent = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="probe-test")
    agent.on_message = lambda c, u, m: echoes.put(orjson.loads(m.payload))
    try:
        agent.connect("127.0.0.1", mosquitto.port)
        agent.loop_start()
        agent.subscribe(topics.control("truck-7", "probe"), qos=0)
        offset = ClockOffset()
        deadline = time.monotonic() + 20
        while offset.offset_ms is None and time.monotonic() < deadline:
            sent = time.time()
            agent.publish(topics.control("truck-7", "probe"), orjson.dumps({"site": "truck-7", "ts": sent}), qos=1)
            try:
                while True:
                    msg = echoes.get(timeout=1.0)
                    if "hub_ts" in msg:
                        assert msg["echo_ts"] == sent
                        offset.observe(msg["echo_ts"], msg["hub_ts"], time.time())
                        break
            except queue.Empty:
                continue
        assert offset.offset_ms is not None
        assert abs(offset.offset_ms) < 1000.0  # same machine, same clock
    finally:
        agent.loop_stop()
        agent.disconnect()
        control.stop()
