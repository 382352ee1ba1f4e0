"""Trained at the hub on Spark, sent signed over Mosquitto, scored at a gateway: Spark's answers, swapped mid-window."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from hub.control.distribution import MqttControl
from hub.models.distribution import ModelDistributor
from hub.models.registry import ModelRegistry
from spanedge import topics
from spanedge.models.envelope import model_topic, seal_model
from spanedge.models.installed import INSTALLED
from tests.keys import KEY, ROGUE, TRUSTED
from tests.polling import poll

from .agentkit import HubObserver, client, signed_plan
from .modelkit import APP_SOURCE, fit, records_between, scored, setup, spark_p, windows

pytestmark = pytest.mark.timeout(600)

SWITCH = 25.0  # seconds into the run: in the middle of the window [20, 30)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


async def test_versions_reach_the_gateway_signed_score_as_spark_and_swap_mid_window(
    spark: Any, mosquitto_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    INSTALLED.remove("plant")
    hub_broker, site_broker = mosquitto_factory("hub"), mosquitto_factory("site")
    sites, (app, plan) = setup(tmp_path, hub_broker.url, site_broker.url)
    spec = app.models["wear"]
    registry = ModelRegistry(tmp_path / "hub" / "models", KEY)
    control = MqttControl(sites.site("cloud").mqtt(), client_id="test-hub-control").start()
    distributor = ModelDistributor(registry, control.publish_all)
    first, second = fit(spark, spec, 1, shift=0.0), fit(spark, spec, 2, shift=1.0)
    registry.save(first.version)
    t0 = (time.time() - 3600) // 10 * 10
    distributor.release(first.version, ["truck-7"], switch_at=t0)
    raw = client(hub_broker.port)
    topic = model_topic("truck-7", "plant", "wear")
    raw.publish(
        topics.control("truck-7", "plan"), signed_plan(plan, APP_SOURCE, 1), qos=1, retain=True
    ).wait_for_publish(5)
    observer = HubObserver(hub_broker.port)
    config = AgentConfig("truck-7", sites, tmp_path / "state", heartbeat_interval=0.5, trusted_keys=TRUSTED)
    agent = Agent(config, connect=PahoTransport)
    task = asyncio.create_task(agent.run())
    sensor = client(site_broker.port)

    def send(records: list[dict[str, Any]]) -> None:
        infos = [sensor.publish("plant/7/features", msgspec.json.encode(r), qos=1) for r in records]
        for info in infos:
            info.wait_for_publish(10)

    try:
        await poll(lambda: INSTALLED.held("plant", "wear") == 1, 30, "version 1 installed at the gateway")
        await poll(
            lambda: "plant" in agent.pipelines and agent.intake.transports["truck-7"].subscribed.is_set(),
            30,
            "the plan",
        )
        # a forged version (a key nobody trusts) is refused, and version 1 stays
        forged = msgspec.structs.replace(second.version, switch_at=t0)
        raw.publish(topic, seal_model(forged, ROGUE), qos=1, retain=True).wait_for_publish(5)
        await poll(lambda: "are trusted; refusing it" in caplog.text, 30, "the forged version refused")
        before = records_between(t0, 0.0, 15.0, seed=11)
        await asyncio.to_thread(send, before)
        await poll(lambda: len(scored(observer)) == len(before), 60, "the first records scored at the gateway")
        # the swap: version 2 switches in at t0 + 25, in the middle of the window [t0 + 20, t0 + 30)
        distributor.release(second.version, ["truck-7"], switch_at=t0 + SWITCH)
        await poll(lambda: INSTALLED.held("plant", "wear") == 2, 30, "version 2 installed at the gateway")
        # an older version, validly signed, is refused
        older = msgspec.structs.replace(first.version, switch_at=t0 + 1.0)
        raw.publish(topic, seal_model(older, KEY), qos=1, retain=True).wait_for_publish(5)
        await poll(lambda: "version 1 is not newer than version 2" in caplog.text, 30, "the older version refused")
        after = records_between(t0, 15.0, 40.0, seed=12)
        closer = {"unit": "m0", "t": t0 + 60.0, "rms": 0.0, "peak": 0.0, "temp_c": 40.0}
        await asyncio.to_thread(send, [*after, closer])
        records = before + after
        await poll(lambda: len(scored(observer)) == len(records) + 1, 60, "every record scored")
        p1, p2 = spark_p(spark, first.fitted, records), spark_p(spark, second.fitted, records)
        want = {r["t"]: (p1 if r["t"] < t0 + SWITCH else p2)[r["t"]] for r in records}
        got = scored(observer)
        assert all(_close(got[t]["p_fail"], p) for t, p in want.items()), "a record scored otherwise than Spark"
        assert sum(1 for t in want if t >= t0 + SWITCH) > 40  # both versions scored a good share
        expected: dict[tuple[str, float], dict[str, float]] = {}
        for r in records:
            key = (r["unit"], (r["t"] - t0) // 10 * 10 + t0)
            w = expected.setdefault(key, {"n": 0, "p_sum": 0.0})
            w["n"] += 1
            w["p_sum"] += want[r["t"]]
        await poll(lambda: windows(observer).keys() >= expected.keys(), 60, "every window closed")
        got_windows = windows(observer)
        for key, w in expected.items():
            assert got_windows[key]["n"] == w["n"], key
            assert _close(got_windows[key]["p_sum"], w["p_sum"]), (key, got_windows[key], w)
        assert agent.dlq_count == 0
    finally:
        agent.stop()
        await asyncio.wait_for(task, 30)
        sensor.loop_stop()
        raw.loop_stop()
        observer.close()
        control.stop()
    # a restarted agent scores with the versions it kept, verified again, before the hub sends anything
    INSTALLED.remove("plant")
    again = Agent(config, connect=PahoTransport)
    assert INSTALLED.held("plant", "wear") == 2
    assert again.models is not None
    assert again.models.held() == {"plant": {"wear": 2}}
    INSTALLED.remove("plant")
