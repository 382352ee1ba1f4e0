"""Re-plans wait while a handover is not over, so a replica moved again never drops the old side's part."""

from __future__ import annotations

import dataclasses
import itertools
import logging

import pytest

from hub.control.coordinator import Coordinator
from hub.handover.settling import settles_at, unsettled, window_span
from spanedge import agg, sinks
from spanedge.app import App
from spanedge.plan import Handover, Plan
from spanedge.sites import Sites, load_sites, parse_sites
from tests.plans import chain_plan
from tests.unit.hub.control.test_coordinator import SITES, Clock, FakeEngine, heartbeat, make
from tests.unit.hub.control.test_site_health import FARM, _beat, _farm, _site_of
from tests.unit.hub.control.test_site_health import Clock as FarmClock

WINDOWED = """
from spanedge import App, agg, sinks
def double(r):
    return {"k": r["k"], "v": r["v"] * 2}
app = App("demo")
(
    app.source("readings").map(double, name="double")
    .window(name="per_minute", key="k", size="60s", aggs={"n": agg.count()}, allowed_lateness="5s")
    .sink(sinks.console(), name="out")
)
"""

COUNT = {"n": agg.count()}
PROBES = itertools.count(1)


@pytest.fixture
def sites() -> Sites:
    return parse_sites(SITES)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _slow(coordinator: Coordinator, ms: float) -> None:
    """Three heartbeats of ``a``, each with a new probe measuring ``ms`` to the hub: a lasting level, not a blip."""
    for _ in range(3):
        probe = {"rtt_ms": 2 * ms, "samples": next(PROBES)}
        coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": probe}))


def _moved_to_a(sites: Sites, clock: Clock) -> tuple[Coordinator, FakeEngine, float]:
    """Deploy the windowed app, then let a's link to the hub slow down: the window moves from the hub to a."""
    coordinator, _, engine = make(sites, clock)
    coordinator.deploy(WINDOWED, "app.py")
    clock.now += 31
    _slow(coordinator, 200)
    assert coordinator.check_drift() == ["demo"]
    (switch,) = {h.switch_at for h in coordinator.record("demo").plan.handovers}
    return coordinator, engine, switch


def test_a_window_moved_to_a_spoke_does_not_move_again_before_its_last_window_at_the_hub_is_over(
    sites: Sites, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator, _, switch = _moved_to_a(sites, clock)
    over = switch + 60 + 5 + coordinator.handover_delay_s  # its last window, lateness, and the margin

    caplog.set_level(logging.INFO, logger="hub")
    clock.now += 31  # the link is fast again, the interval passed, but the hub's windows before T are not done
    _slow(coordinator, 20)
    assert coordinator.drift("demo")
    assert clock.now < over
    assert coordinator.check_drift() == []
    assert coordinator.record("demo").plan.version == 2
    waits = [r.getMessage() for r in caplog.records if "wait until its handovers are over" in r.getMessage()]
    assert len(waits) == 1
    assert "per_minute cloud→a" in waits[0]

    clock.now = over + 1
    _slow(coordinator, 20)
    assert coordinator.check_drift() == ["demo"]
    assert coordinator.record("demo").plan.site_of("per_minute") == "cloud"


def test_a_switch_the_hubs_own_slow_deploy_brought_too_close_moves_later_before_the_sites_get_the_plan(
    sites: Sites, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Starting the hub's queries for a move took 8.5 s on a saturated machine, past the switch stamped before it."""
    coordinator, publisher, engine = make(sites, clock)
    coordinator.deploy(WINDOWED, "app.py")
    deployed = engine.deploy

    def slow(app: App, plan: Plan) -> None:
        if plan.version == 2 and "deploy demo v2" not in engine.calls:
            clock.now = max(h.switch_at for h in plan.handovers) - 1.0  # the deploy ends 1 s before the switch
        deployed(app, plan)

    engine.deploy = slow  # type: ignore[method-assign]
    clock.now += 31
    _slow(coordinator, 200)
    sent = len(publisher.messages)
    caplog.set_level(logging.WARNING, logger="hub")
    assert coordinator.check_drift() == ["demo"]
    record = coordinator.record("demo")
    (switch,) = {h.switch_at for h in record.plan.handovers}
    assert switch >= clock.now + coordinator.handover_delay_s  # the sites get the plan in time
    assert "the switch moves" in caplog.text
    assert engine.calls[-2:] == ["deploy demo v2", "deploy demo v2"]
    assert engine.deployed["demo"] == record.plan  # the engine writes its shares at the new switch
    assert {m["switch_at"] for m in record.history[-1].moved} == {switch}
    assert len(publisher.messages) > sent


def test_a_replan_that_keeps_the_handover_is_not_held_back(sites: Sites, clock: Clock) -> None:
    coordinator, _, _ = _moved_to_a(sites, clock)
    handovers = coordinator.record("demo").plan.handovers
    clock.now += 31  # the link gets slower still: drift, but the window stays at a and its handover goes on
    _slow(coordinator, 2000)
    assert coordinator.drift("demo")
    assert coordinator.check_drift() == ["demo"]
    record = coordinator.record("demo")
    assert (record.history[-1].changed, record.plan.handovers) == (False, handovers)


def test_replans_wait_while_a_hub_query_still_writes_its_share(sites: Sites, clock: Clock) -> None:
    coordinator, engine, switch = _moved_to_a(sites, clock)

    clock.now = switch + 200  # long over by event time, but a slow hub query has not written its windows yet
    engine.writing["demo"] = ["hub query out (before handover) (watermark 100, done at 160)"]
    _slow(coordinator, 20)
    assert coordinator.check_drift() == []
    engine.writing["demo"] = []
    assert coordinator.check_drift() == ["demo"]


def test_a_handover_a_plan_would_no_longer_list_holds_nothing_back(sites: Sites, clock: Clock) -> None:
    coordinator, engine, switch = _moved_to_a(sites, clock)
    engine.writing["demo"] = ["hub query out (before handover) (failing)"]  # a query that never finishes
    clock.now = switch + 601
    _slow(coordinator, 20)
    assert coordinator.check_drift() == ["demo"]


def test_the_span_of_a_move_covers_the_windows_it_concerns() -> None:
    app = App("w")
    readings = app.source("readings")
    short = readings.window(name="short", key="k", size="10s", aggs=COUNT, allowed_lateness="2s")
    short.window(name="long", key="k", size="30s", aggs=COUNT).sink(sinks.console(), name="out")
    assert window_span(app, {"short"}, downstream=False) == 12
    assert window_span(app, {"short"}, downstream=True) == 30  # at the hub, the windows downstream change query too
    assert window_span(app, {"readings"}, downstream=False) == 0
    sessions = App("s")
    sessions.source("readings").window(name="visits", key="k", gap="30s", aggs=COUNT).sink(sinks.console(), name="o")
    assert window_span(sessions, {"visits"}, downstream=False) == 30
    assert window_span(sessions, {"visits"}, downstream=False, session_hold=300) == 330  # between spokes: the cut


def test_a_move_is_over_once_its_longest_window_after_the_switch_has_passed() -> None:
    app = App("w")
    app.source("readings").window(name="short", key="k", size="10s", aggs=COUNT, allowed_lateness="2s").sink(
        sinks.console(), name="out"
    )
    plan = chain_plan("w", 2, {"a": [("short", "b", 2)]}, handovers=(Handover("short@a", "a", "b", 100.0),))
    assert settles_at(plan, app, plan.handovers[0], margin=5) == 117
    assert unsettled(plan, app, 116.9, 5) == [plan.handovers[0]]
    assert unsettled(plan, app, 117, 5) == []
    assert unsettled(plan, app, 701, 5) == []  # a plan would no longer list it


def _hold(coordinator: Coordinator, replica: str, source: str, target: str, switch_at: float) -> None:
    """Give the farm's plan in force a handover of ``replica`` that is far from over."""
    record = coordinator.records()[0]
    plan = dataclasses.replace(record.plan, handovers=(Handover(replica, source, target, switch_at),))
    coordinator.deployments.update(dataclasses.replace(record, plan=plan))


def test_an_overload_replan_waits_for_a_handover_and_a_dead_site_does_not() -> None:
    farm = load_sites(FARM / "sites.yaml")
    now = FarmClock()
    coordinator, _ = _farm(farm, now)
    assert _site_of(coordinator, "probe_means@field-east") == "barn"
    _hold(coordinator, "probe_means@field-west", "shed", "barn", now.now + 1_000)
    everyone = ("barn", "shed", "field-east", "field-west")
    for _ in range(8):  # the barn is over its budget for 35 s: the change waits for the handover
        for site in everyone:
            _beat(coordinator, site, 180.0 if site == "barn" else 5.0)
        coordinator.check()
        now.now += 5
    assert coordinator.records()[0].history[-1].version == 1
    assert _site_of(coordinator, "probe_means@field-east") == "barn"

    for _ in range(30):  # the barn falls silent past the grace period: gone, re-planned around at once
        now.now += 5
        for site in everyone[1:]:
            _beat(coordinator, site)
        coordinator.check()
    assert coordinator.gone("barn")
    assert "site barn silent for " in coordinator.records()[0].history[-1].reason
    assert _site_of(coordinator, "probe_means@field-east") not in ("barn", "cloud")
