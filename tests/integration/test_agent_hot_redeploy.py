"""Hot redeploy at the edge: an unchanged window keeps its open windows, a changed one restarts empty."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from spanedge import topics
from spanedge.loader import load_app
from spanedge.testing import local_plan
from tests.keys import TRUSTED
from tests.polling import poll

from .agentkit import HubObserver, Sensor, client, readings, signed_plan, write_setup

# Two windows over the same readings; version 2 changes only the second one's aggregations.
APP = """
from spanedge import App, agg, global_, sinks

@global_
def keep(stats: dict) -> bool:
    return True

app = App("cold-chain")
readings = app.source("readings", time_field="ts")
readings.window(
    name="unit_stats", key="unit", size="10s", scope="local", aggs={{"n": agg.count(), "max_f": agg.max("temp_f")}}
).filter(keep, name="keep_stats").sink(sinks.memory("stats"), name="stats_out")
readings.window(
    name="unit_peaks", key="unit", size="10s", scope="local", aggs={{"n": agg.count(), {peak}}}
).filter(keep, name="keep_peaks").sink(sinks.memory("peaks"), name="peaks_out")
"""
V1 = APP.format(peak='"peak": agg.max("temp_f")')
V2 = APP.format(peak='"peak": agg.min("temp_f")')


def _plan(tmp: Path, source: str, version: int, sites: Any) -> bytes:
    """The hub's signed plan for truck-7 that runs ``source``'s local windows there."""
    path = tmp / f"app_v{version}.py"
    path.write_text(source)
    return signed_plan(local_plan(load_app(path), sites), source, version)


def _windows(observer: HubObserver, stream: str) -> dict[tuple[str, float], dict[str, Any]]:
    """The window results of ``stream`` at the hub, by (unit, window start); a window sent twice fails."""
    out: dict[tuple[str, float], dict[str, Any]] = {}
    for record in observer.deduped(stream).values():
        v = record.value
        key = (v["unit"], v["window_start"])
        assert key not in out, f"{stream}: window {key} emitted twice"
        out[key] = {k: x for k, x in v.items() if k not in ("unit", "window_start", "window_end")}
    return out


def _expected(data: list[dict[str, Any]], peak: Any, closed_before: float) -> dict[tuple[str, float], dict[str, Any]]:
    groups: dict[tuple[str, float], list[float]] = {}
    for r in data:
        groups.setdefault((r["unit"], (r["ts"] // 10) * 10.0), []).append(r["temp_f"])
    return {k: {"n": len(v), "peak": peak(v)} for k, v in groups.items() if k[1] + 10.0 <= closed_before}


@pytest.mark.timeout(90)
async def test_a_redeploy_keeps_unchanged_windows_and_restarts_changed_ones_empty(
    mosquitto_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    _, _, sites = write_setup(tmp_path, hub.url, site.url)
    control = client(hub.port)
    plan_topic = topics.control("truck-7", "plan")
    observer = HubObserver(hub.port)
    config = AgentConfig("truck-7", sites, tmp_path / "state", heartbeat_interval=0.5, trusted_keys=TRUSTED)
    agent = Agent(config, connect=PahoTransport)
    task = asyncio.create_task(agent.run())
    sensor = Sensor(site.port)
    start = (time.time() - 3600) // 10 * 10
    before = readings(start, 150)  # [start, start + 15): the second window is half full at the redeploy
    after = readings(start, 150, start=150)  # [start + 15, start + 30)
    end = start + 60.0
    try:
        control.publish(plan_topic, _plan(tmp_path, V1, 1, sites), qos=1, retain=True).wait_for_publish(5)
        await poll(lambda: agent.plan_intake is not None and agent.plan_intake.version == 1, 15, "plan v1")
        await poll(lambda: agent.intake.transports["truck-7"].subscribed.is_set(), 15, "the site subscription")
        await asyncio.to_thread(sensor.send, before)
        await poll(lambda: agent.pipelines["cold-chain"].metrics()["readings@truck-7"]["in"] == 150, 20, "v1 input")

        control.publish(plan_topic, _plan(tmp_path, V2, 2, sites), qos=1, retain=True).wait_for_publish(5)
        await poll(lambda: agent.plan_intake is not None and agent.plan_intake.version == 2, 15, "plan v2")
        await asyncio.to_thread(sensor.send, [*after, {"unit": "u0", "ts": end, "temp_f": 40.0}])

        data = before + after
        want_stats = {k: {"n": v["n"], "max_f": v["peak"]} for k, v in _expected(data, max, end - 1).items()}
        await poll(lambda: _windows(observer, "unit_stats") == want_stats, 30, "every unit_stats window")
        # unit_peaks: the first window fired under v1 (max); v2 restarted the open one empty at the
        # redeploy, so the second window holds only the records after it, and the third is whole (min).
        first = _expected(before, max, start + 10)
        second = {k: v for k, v in _expected(after, min, end - 1).items() if k[1] == start + 10}
        third = {k: v for k, v in _expected(after, min, end - 1).items() if k[1] == start + 20}
        want_peaks = first | second | third
        await poll(lambda: _windows(observer, "unit_peaks") == want_peaks, 30, "every unit_peaks window")
        changed = [r for r in caplog.records if "unit_peaks" in r.getMessage() and "changed since" in r.getMessage()]
        assert changed
        assert {r.levelno for r in changed} == {logging.WARNING}
        assert not any("unit_stats" in r.getMessage() and "changed since" in r.getMessage() for r in caplog.records)
    finally:
        agent.stop()
        await asyncio.wait_for(task, 20)
        sensor.close()
        observer.close()
        control.loop_stop()
        control.disconnect()
