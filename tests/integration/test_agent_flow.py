"""The agent against real Mosquitto brokers: windows reach the hub, bad input ends in the DLQ."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from edge_agent.mqtt.select import transport_factory
from edge_agent.mqtt.transport import TransportFactory
from spanedge.plan import Plan
from tests.polling import poll

from .agentkit import HubObserver, Sensor, client, readings, reference, results, same, write_setup


async def start_agent(
    tmp_path: Path, hub: Any, site: Any, connect: TransportFactory = PahoTransport, **options: Any
) -> tuple[Agent, asyncio.Task[None]]:
    _, plan_path, sites = write_setup(tmp_path, hub.url, site.url)
    config = AgentConfig(
        "truck-7", sites, tmp_path / "state", heartbeat_interval=0.5, checkpoint_interval=0.2, **options
    )
    agent = Agent(config, [Plan.from_json(plan_path.read_text())], connect=connect)
    task = asyncio.create_task(agent.run())
    await poll(
        lambda: "truck-7" in agent.intake.transports and agent.intake.transports["truck-7"].subscribed.is_set(),
        10,
        "subscription",
    )
    return agent, task


async def stop_agent(agent: Agent, task: asyncio.Task[None]) -> None:
    agent.stop()
    await asyncio.wait_for(task, 20)


def t0() -> float:
    return (time.time() - 3600) // 10 * 10


def listen(port: int, topic: str) -> tuple[Any, list[dict[str, Any]]]:
    """A client collecting the JSON payloads of ``topic`` on the broker at ``port``."""
    local = client(port)
    received: list[dict[str, Any]] = []
    local.on_message = lambda _c, _u, m: received.append(orjson.loads(m.payload))
    local.subscribe(topic, 1)
    return local, received


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["asyncio", "paho"])
async def test_windows_reach_the_hub_and_bad_messages_the_dlq(
    mosquitto_factory: Any, tmp_path: Path, transport: str
) -> None:
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    observer = HubObserver(hub.port)
    local, local_stats = listen(site.port, "cold-chain/unit-stats")
    agent, task = await start_agent(tmp_path, hub, site, transport_factory(transport))
    sensor = Sensor(site.port)
    try:
        start = t0()
        good = readings(start, 400, step=0.1)
        bad: list[Any] = [
            b"{not json",
            {"unit": "u1", "temp_f": 40.0},
            {"unit": "u2", "ts": start + 5, "temp_f": "hot"},
        ]
        closing = {"unit": "u0", "ts": start + 100.0, "temp_f": 40.0}
        late = {"unit": "u1", "ts": start + 1.0, "temp_f": 40.0}  # its window fired at the closing reading
        await asyncio.to_thread(sensor.send, [*good[:200], *bad, *good[200:], closing, late])
        want = reference(good, start + 99.0)
        await poll(lambda: same(results(observer.deduped()), want), 20, "the window results at the hub")
        await poll(lambda: len(observer.dlq()) == 3, 10, "three dead letters")
        letters = observer.dlq()
        assert [d["operator"] for d in letters] == ["readings", "readings", "to_celsius"]
        assert letters[0]["payload"] == "{not json"
        assert letters[0]["reason"].startswith("not valid JSON")
        assert "'ts' is missing" in letters[1]["reason"]
        assert "ValueError" in letters[2]["reason"]
        assert '"hot"' in letters[2]["payload"]
        assert all(d["site"] == "truck-7" and d["ts"] > 0 for d in letters)
        await poll(lambda: len(local_stats) == len(want), 10, "the local MQTT sink")

        def counted(h: dict[str, Any]) -> bool:  # a heartbeat after the last result's PUBACKs, hub's and local sink's
            sent = h["dlq"] == 3 and h["late"] == 1 and h["outbox"]["sent"] == len(want)
            return bool(sent and h.get("delivered", {}).get("cold-chain", 0) > start + 90.0)

        await poll(lambda: any(counted(h) for h in observer.heartbeats()), 20, "DLQ, late, sent and delivered")
        beat = next(h for h in observer.heartbeats() if counted(h))
        assert beat["apps"] == ["cold-chain"]
        assert beat["operators"]["readings@truck-7"]["in"] == 405
        side = (tmp_path / "state" / "late-cold-chain.jsonl").read_text().splitlines()
        assert len(side) == 1
        assert '"ts":' in orjson.loads(side[0])["payload"]
        assert beat["outbox"]["dropped"] == 0
        assert beat["outbox"]["sent"] == len(want)
        # every result below the watermark (the closing reading's, less 1 s) went out, to the hub and the local sink
        # (the local sink's PUBACKs may reach the agent a heartbeat after the hub's: ``counted`` waits for both)
        assert beat["delivered"]["cold-chain"] <= start + 99.0
        await poll(lambda: observer.heartbeats()[-1]["latency"]["cloud"]["samples"] >= 1, 10, "an RTT sample")
        assert observer.heartbeats()[-1]["latency"]["cloud"]["rtt_ms"] > 0
        assert beat["rss_bytes"] > 0
        assert beat["watermark_lag_s"] > 0
    finally:
        await stop_agent(agent, task)
        sensor.close()
        observer.close()
        local.loop_stop()


@pytest.mark.timeout(60)
async def test_far_future_event_does_not_close_windows(mosquitto_factory: Any, tmp_path: Path) -> None:
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    observer = HubObserver(hub.port)
    agent, task = await start_agent(tmp_path, hub, site, max_future_skew=60.0)
    sensor = Sensor(site.port)
    try:
        start = t0()
        first = readings(start, 150, step=0.1)  # event time start .. start + 14.9
        future = {"unit": "u0", "ts": time.time() + 86400, "temp_f": 40.0}
        marker = {"unit": "u1", "ts": start + 16.0, "temp_f": 40.0}
        await asyncio.to_thread(sensor.send, [*first, future, marker])
        pipeline = agent.pipelines["cold-chain"]
        await poll(lambda: pipeline.metrics()["readings@truck-7"]["in"] == 152, 10, "all readings processed")
        await poll(lambda: len(observer.dlq()) == 1, 10, "the far-future dead letter")
        assert "ahead of the agent clock" in observer.dlq()[0]["reason"]
        assert pipeline.watermark == pytest.approx(start + 15.0)  # the marker, minus 1 s out-of-orderness
        await poll(lambda: len(observer.deduped()) == 3, 10, "the first window of each unit")
        assert {r.value["window_start"] for r in observer.deduped().values()} == {start}
        assert pipeline.windows[0].window is not None
        assert pipeline.windows[0].window.pending() == 3
    finally:
        await stop_agent(agent, task)
        sensor.close()
        observer.close()


@pytest.mark.timeout(60)
async def test_idle_timeout_closes_the_last_windows(mosquitto_factory: Any, tmp_path: Path) -> None:
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    observer = HubObserver(hub.port)
    local, local_stats = listen(site.port, "cold-chain/unit-stats")
    agent, task = await start_agent(tmp_path, hub, site, idle_timeout=2.0)
    sensor = Sensor(site.port)
    try:
        start = t0()
        sent = readings(start, 150, step=0.1)  # event time start .. start + 14.9, then nothing
        await asyncio.to_thread(sensor.send, sent)
        want = reference(sent, math.inf)  # every window, the last ones included
        assert len(want) == 6
        await poll(lambda: same(results(observer.deduped()), want), 30, "every window at the hub, the last ones too")
        await poll(lambda: len(local_stats) == len(want), 10, "the local MQTT sink")
        pipeline = agent.pipelines["cold-chain"]
        assert pipeline.metrics()["readings@truck-7"]["in"] == 150
        assert pipeline.windows[0].window is not None
        assert pipeline.windows[0].window.pending() == 0
        assert pipeline.watermark > start + 20.0
        assert agent.late_count == 0
        assert agent.dlq_count == 0
    finally:
        await stop_agent(agent, task)
        sensor.close()
        observer.close()
        local.loop_stop()
