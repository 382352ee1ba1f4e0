"""Faults against real Mosquitto: a hub outage and a SIGKILLed agent lose and duplicate nothing."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.polling import wait_for

from .agentkit import AgentProcess, HubObserver, Sensor, readings, reference, results, same, write_setup


def _t0() -> float:
    return (time.time() - 7200) // 10 * 10


def _outbox_records(state: Path) -> int:
    with sqlite3.connect(state / "agent.db") as db:
        return int(db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])


def _close_and_check(sensor: Sensor, observer: HubObserver, closing_ts: float, what: str) -> None:
    """Send a reading at ``closing_ts`` to close every window before it; all of them must reach the hub once."""
    sensor.send([{"unit": "u0", "ts": closing_ts, "temp_f": 40.0}])
    want = reference(sensor.published[:-1], closing_ts - 1.0)
    wait_for(lambda: same(results(observer.deduped()), want), 40, what)
    records = observer.deduped()
    assert sorted(records) == list(range(1, len(records) + 1)), "seqs must be contiguous from 1 (no loss)"
    assert same(results(records), want)


@pytest.mark.timeout(90)
def test_hub_outage_then_restart(mosquitto_factory: Any, tmp_path: Path) -> None:
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    sites, plan = write_setup(tmp_path, hub.url, site.url)[:2]
    observer = HubObserver(hub.port)
    agent = AgentProcess(tmp_path, sites, plan)
    agent.start()
    sensor = Sensor(site.port)
    try:
        start = _t0()
        sensor.send(readings(start, 600))
        wait_for(lambda: len(observer.deduped()) >= 3, 20, "results before the outage")
        hub.stop()
        sensor.send(readings(start, 600, start=600))
        wait_for(lambda: _outbox_records(tmp_path / "state") > 0, 20, "a backlog in the outbox")
        time.sleep(3)  # keep the hub down a few seconds while the agent keeps processing
        sensor.send(readings(start, 300, start=1200))
        hub.start()
        _close_and_check(sensor, observer, start + 300.0, "every window at the hub after the outage")
        assert "lost connection to hub broker" in agent.log.read_text()
        assert agent.terminate() == 0
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.kill()
        sensor.close()
        observer.close()


@pytest.mark.timeout(90)
def test_sigkill_mid_stream_then_restart(mosquitto_factory: Any, tmp_path: Path) -> None:
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    sites, plan = write_setup(tmp_path, hub.url, site.url)[:2]
    observer = HubObserver(hub.port)
    agent = AgentProcess(tmp_path, sites, plan)
    agent.start()
    sensor = Sensor(site.port)
    try:
        start = _t0()
        sensor.send(readings(start, 300))
        wait_for(lambda: len(observer.deduped()) >= 3, 20, "results before the kill")

        def stream() -> None:
            for chunk in range(30):
                sensor.send(readings(start, 100, start=300 + chunk * 100))
                time.sleep(0.03)  # pace the stream so the kill lands in its middle

        streaming = threading.Thread(target=stream)
        streaming.start()
        seen = len(observer.deduped())
        wait_for(lambda: len(observer.deduped()) > seen + 6, 20, "the agent to be mid-stream")
        agent.kill()
        streaming.join(30)
        sensor.send(readings(start, 300, start=3300))  # queued by the site broker while the agent is down
        agent.start()
        _close_and_check(sensor, observer, start + 400.0, "every window at the hub after the restart")
        assert "restored window state" in agent.log.read_text()
        assert agent.terminate() == 0
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.kill()
        sensor.close()
        observer.close()
