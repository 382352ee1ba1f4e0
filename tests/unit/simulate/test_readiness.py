"""Waiting on what the brokers showed: agents running the app, subscriptions, and the drain after the sensors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from simulate.drain import drain_problems, settled, wait_drained
from simulate.errors import SimulationError
from simulate.readiness import (
    dataplane_ready,
    plan_sites,
    runs_app,
    subscription_baseline,
    wait_dataplane,
    wait_heartbeats,
    wait_subscribed,
)
from simulate.results import Collector

pytestmark = pytest.mark.timeout(20)

SPOKES = ["truck-7", "truck-9"]


def _beat(collector: Collector, site: str, body: bytes) -> None:
    collector.on_message("cloud", f"spanedge/v1/control/{site}/heartbeat", body)


def _alive() -> None:
    pass


def test_an_agent_runs_the_app_once_its_heartbeat_lists_it() -> None:
    c = Collector("cold-chain", {})
    assert not runs_app(c, "truck-7", "cold-chain")
    _beat(c, "truck-7", b'{"apps": []}')
    assert not runs_app(c, "truck-7", "cold-chain")
    _beat(c, "truck-7", b'{"apps": ["cold-chain"]}')
    assert runs_app(c, "truck-7", "cold-chain")
    _beat(c, "truck-9", b'{"outbox": {}}')  # an agent that does not list its apps
    assert runs_app(c, "truck-9", "cold-chain")


async def test_heartbeats_are_awaited_and_a_silent_agent_is_named(tmp_path: Path) -> None:
    c = Collector("cold-chain", {})
    _beat(c, "truck-7", b'{"apps": ["cold-chain"]}')
    with pytest.raises(SimulationError, match=r"no heartbeat running app 'cold-chain' from truck-9 within 0s"):
        await wait_heartbeats(c, SPOKES, "cold-chain", 0.3, _alive, tmp_path)
    _beat(c, "truck-9", b'{"apps": ["cold-chain"]}')
    await wait_heartbeats(c, SPOKES, "cold-chain", 5, _alive, tmp_path)


def test_the_app_is_expected_only_where_the_plan_puts_replicas() -> None:
    spokes = ["barn", "shed", "field-east", "field-west"]
    plan = {
        "assignments": [
            {"replica": "probes@field-east", "site": "field-east"},
            {"replica": "parse@field-east", "site": "barn"},
            {"replica": "parse@field-west", "site": "field-west"},
            {"replica": "dry_spots", "site": "cloud"},
        ]
    }
    assert plan_sites(plan, spokes) == ["barn", "field-east", "field-west"]
    assert plan_sites({"app": "smart-farm", "plan": plan}, spokes) == [
        "barn",
        "field-east",
        "field-west",
    ]  # deploy answer
    assert plan_sites(None, spokes) == spokes  # no plan to read: expect it everywhere
    assert plan_sites({"plan": {"version": 1}}, spokes) == spokes


async def test_a_spoke_without_replicas_needs_a_heartbeat_but_not_the_app(tmp_path: Path) -> None:
    c = Collector("smart-farm", {})
    spokes, running = ["barn", "shed"], ["barn"]
    _beat(c, "barn", b'{"apps": ["smart-farm"]}')
    with pytest.raises(SimulationError, match=r"no heartbeat from shed \(it runs no part of 'smart-farm'\) within 0s"):
        await wait_heartbeats(c, spokes, "smart-farm", 0.3, _alive, tmp_path, running)
    _beat(c, "shed", b'{"apps": []}')  # alive, runs nothing of the app: ready
    await wait_heartbeats(c, spokes, "smart-farm", 5, _alive, tmp_path, running)
    with pytest.raises(SimulationError, match=r"no heartbeat running app 'smart-farm' from shed within 0s"):
        await wait_heartbeats(c, spokes, "smart-farm", 0.3, _alive, tmp_path)  # every spoke expected to run it


async def test_a_dead_process_stops_the_wait_at_once(tmp_path: Path) -> None:
    def dead() -> None:
        raise SimulationError("agent-truck-9 exited with code 1")

    started = time.monotonic()
    with pytest.raises(SimulationError, match="exited with code 1"):
        await wait_heartbeats(Collector("cold-chain", {}), SPOKES, "cold-chain", 10, dead, tmp_path)
    assert time.monotonic() - started < 5


async def test_subscriptions_are_counted_against_the_baseline() -> None:
    c = Collector("cold-chain", {})
    assert await subscription_baseline(c, "amqtt", 3) == {}
    await wait_subscribed(c, "amqtt", ["cloud"], {}, 0.1, _alive, "the hub ingest")  # no count: a short pause
    for site in ("cloud", "truck-7"):
        c.on_message(site, "$SYS/broker/subscriptions/count", b"1")
    baseline = {"cloud": 1, "truck-7": 1}
    c.on_message("cloud", "$SYS/broker/subscriptions/count", b"2")
    await wait_subscribed(c, "mosquitto", ["cloud"], baseline, 5, _alive, "the hub ingest")
    with pytest.raises(SimulationError, match="the agents did not subscribe on the broker of truck-7 within 0s"):
        await wait_subscribed(c, "mosquitto", ["truck-7"], baseline, 0.3, _alive, "the agents")


async def test_the_drain_waits_for_fresh_empty_outboxes_and_every_result() -> None:
    c = Collector("cold-chain", {"out": ["s"]})
    sensors_done = time.time()
    assert not settled(c, SPOKES, sensors_done, quiet=0.0, now=time.time())
    for site in SPOKES:
        _beat(c, site, b'{"outbox": {"records": 0}}')
    assert settled(c, SPOKES, sensors_done, quiet=0.0, now=time.time())
    c.on_message("cloud", "out", b'{"x": 1}')
    assert not settled(c, SPOKES, sensors_done, quiet=60.0, now=time.time())  # results still arriving
    phases: list[str] = []
    assert not await wait_drained(c, SPOKES, lambda: 1, sensors_done, timeout=0.6, quiet=0.0, on_phase=phases.append)
    assert phases[0] == "draining"
    assert phases[-1] == "draining: 1 results to come"
    assert await wait_drained(c, SPOKES, lambda: 0, sensors_done, timeout=5, quiet=0.0)


def test_an_undrained_run_says_why() -> None:
    c = Collector("cold-chain", {})
    sensors_done = time.time()
    _beat(c, "truck-7", b'{"outbox": {"records": 12}}')
    problems = drain_problems(c, SPOKES, sensors_done, timeout=90, began=sensors_done - 30)
    assert problems[0].startswith("agent truck-9: no heartbeat for 30s")
    assert problems[1] == "agent truck-7: outbox backlog 12 at the end"
    assert problems[2].startswith("not drained within 90s")


def test_the_standalone_hub_is_ready_once_its_data_plane_says_so_since_its_latest_start(tmp_path: Path) -> None:
    import asyncio

    log = tmp_path / "hub.log"
    assert not dataplane_ready(log)
    log.write_bytes(b"\n=== start 10:00:00: python -m hub.dataplane\nspark starting\n")
    assert not dataplane_ready(log)
    with log.open("ab") as out:
        out.write(b"dataplane ready\n")
    assert dataplane_ready(log)
    with log.open("ab") as out:  # restarted: the earlier start's line no longer counts
        out.write(b"\n=== start 10:01:00: python -m hub.dataplane\n")
    assert not dataplane_ready(log)
    with pytest.raises(SimulationError, match="did not start the app's queries within 0s"):
        asyncio.run(wait_dataplane(log, 0.0, _alive))
    with log.open("ab") as out:
        out.write(b"dataplane ready\n")
    asyncio.run(wait_dataplane(log, 5.0, _alive, poll=0.01))
