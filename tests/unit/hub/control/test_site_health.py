"""The analyse step for sites: sustained overload versus a noisy sample, the grace period, rejoining."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.heartbeat import CpuBudget
from hub.control.coordinator import Coordinator
from hub.control.registry import SiteRegistry
from hub.control.site_health import HealthPolicy, SiteHealth, planned_load
from hub.control.state import StateStore
from hub.handover.switches import DEFAULT_KEEP_S
from spanedge.sites import Sites, load_sites
from tests.conftest import EXAMPLES

FARM = EXAMPLES / "smart_farm"
POLICY = HealthPolicy(overload_for_s=30, overload_beats=3, recover_for_s=60, site_grace_s=120)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 10_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sites() -> Sites:
    return load_sites(FARM / "sites.yaml")


def beat(site: str, cpu_percent: float, **extra: Any) -> dict[str, Any]:
    return {"site": site, "cpu_percent": cpu_percent, **extra}


def test_one_noisy_sample_over_budget_moves_nothing(sites: Sites) -> None:
    health = SiteHealth(sites, POLICY)
    for t in range(0, 100, 5):
        health.observe("barn", beat("barn", 400.0 if t == 40 else 20.0), t)
        assert health.review(t, {"barn": 0.05}) == []
    # over budget for 30 s but one heartbeat within it in between: the count starts again
    for t, cpu in zip(range(100, 140, 5), [180, 180, 180, 90, 180, 180, 180, 180], strict=True):
        health.observe("barn", beat("barn", cpu), t)
        assert health.review(t, {"barn": 0.05}) == []
    assert health.capacities() == {}


def test_sustained_overload_caps_the_site_at_what_it_can_carry(sites: Sites) -> None:
    health = SiteHealth(sites, POLICY)
    changes = []
    for t in range(0, 35, 5):
        health.observe("barn", beat("barn", 180.0), t)
        changes += health.review(t, {"barn": 0.05})
    assert len(changes) == 1
    assert changes[0].site == "barn"
    assert changes[0].reason.startswith("site barn over its CPU budget: 180% of 100% for 30 s")
    assert not changes[0].everywhere
    # 1.8 cores measured for 0.05 planned: one core carries 0.05 / 1.8 of the planner's cores
    assert health.capacities()["barn"] == pytest.approx(0.05 / 1.8)


def test_a_reported_budget_replaces_the_declared_one(sites: Sites) -> None:
    health = SiteHealth(sites, POLICY)
    for t in range(0, 35, 5):
        health.observe("barn", beat("barn", 12.0, cpu_budget=0.03), t)
        health.review(t, {"barn": 0.04})
    assert health.capacities()["barn"] == pytest.approx(0.03 * 0.04 / 0.12)


def test_the_cap_is_lifted_only_once_the_site_can_carry_its_old_load_again(sites: Sites) -> None:
    health = SiteHealth(sites, POLICY)
    for t in range(0, 35, 5):
        health.observe("barn", beat("barn", 12.0, cpu_budget=0.03), t)
        health.review(t, {"barn": 0.04})
    # the load moved away: the barn is within its shrunken budget, but the old load would not fit in it
    for t in range(35, 200, 5):
        health.observe("barn", beat("barn", 2.0, cpu_budget=0.03), t)
        assert health.review(t, {"barn": 0.0}) == []
    # the budget is back: after 60 s within it, the capacity comes back and every app is re-planned
    changes = []
    for t in range(200, 265, 5):
        health.observe("barn", beat("barn", 2.0), t)
        changes += health.review(t, {"barn": 0.0})
    assert [c.everywhere for c in changes] == [True]
    assert "site barn back within its CPU budget for 60 s" in changes[0].reason
    assert health.capacities() == {}


def test_a_site_silent_past_the_grace_period_is_gone_until_heard_again(sites: Sites) -> None:
    health = SiteHealth(sites, POLICY)
    health.observe("barn", beat("barn", 5.0), 0)
    assert health.review(100, {}) == []  # silent, not yet gone
    assert not health.gone("barn")
    (change,) = health.review(121, {})
    assert change.reason == "site barn silent for 2 min 1 s (grace 2 min): re-planned without it"
    assert health.gone("barn")
    assert health.capacities() == {"barn": 0.0}
    assert health.review(300, {}) == []  # said once
    health.observe("barn", beat("barn", 5.0), 400)
    (back,) = health.review(401, {})
    assert back.everywhere
    assert back.reason == "site barn heard from again after 6 min 40 s silent: it rejoins"
    assert not health.gone("barn")
    assert health.capacities() == {}


def test_planned_load_is_cost_times_the_planned_input_rate(sites: Sites, tmp_path: Path) -> None:
    coordinator, _ = _farm(sites, Clock())
    record = coordinator.records()[0]
    load = planned_load([(record.plan, coordinator.deployments[record.name].app)])
    # field-east's parse (4e-4 s a record), filter and window run at the barn at about 80 records/s
    assert load["barn"] == pytest.approx(80 * (4e-4 + 5e-5) + 0.97 * 80 * 1e-4, rel=0.2)
    assert "field-east" not in load or load["field-east"] < 0.02


def _farm(sites: Sites, clock: Clock) -> tuple[Coordinator, SiteRegistry]:
    registry = SiteRegistry(sites, clock=clock)
    coordinator = Coordinator(registry, health=POLICY, clock=clock, min_replan_interval_s=600)
    coordinator.deploy((FARM / "app.py").read_text(), "app.py")
    return coordinator, registry


def _site_of(coordinator: Coordinator, replica: str) -> str:
    return coordinator.records()[0].plan.site_of(replica)


def _beat(coordinator: Coordinator, site: str, cpu: float = 5.0) -> None:
    assert coordinator.heartbeat(site, orjson.dumps(beat(site, cpu)))


def test_an_overloaded_spoke_hands_its_guests_to_a_neighbour_and_the_history_says_why(sites: Sites) -> None:
    clock = Clock()
    coordinator, _ = _farm(sites, clock)
    assert _site_of(coordinator, "probe_means@field-east") == "barn"
    for _ in range(7):
        for site in ("barn", "shed", "field-east", "field-west"):
            _beat(coordinator, site, 180.0 if site == "barn" else 5.0)
        coordinator.check()
        clock.now += 5
    record = coordinator.records()[0]
    assert _site_of(coordinator, "probe_means@field-east") not in ("barn", "cloud")
    last = record.history[-1]
    assert last.reason.startswith("site barn over its CPU budget: 180% of 100% for 30 s")
    assert {m["replica"] for m in last.moved} >= {"probe_means@field-east"}
    assert {h.replica for h in record.plan.handovers} >= {"probe_means@field-east"}


@pytest.mark.parametrize("sinks_behind", [None, 12.5, -1.0], ids=["frontier-only", "sinks-behind", "no-frontier"])
def test_a_spoke_gone_past_the_grace_period_is_replanned_around_and_rejoins(
    sites: Sites, caplog: pytest.LogCaptureFixture, sinks_behind: float | None
) -> None:
    clock = Clock()
    coordinator, registry = _farm(sites, clock)
    everyone = ("barn", "shed", "field-east", "field-west")
    for site in everyone:
        _beat(coordinator, site)
    app = coordinator.records()[0].name
    sent_before = clock.now - 7.5  # the barn's last frontier: it had sent the hub every result before it
    announced: dict[str, Any] = {"complete": {app: sent_before}}
    if sinks_behind == -1.0:  # an agent that announces nothing: what it held is unknown, only its return finishes it
        announced = {}
    elif sinks_behind is not None:  # its local sinks still lacked values from further back: those are at risk too
        sent_before -= sinks_behind
        announced["delivered"] = {app: sent_before}
    assert coordinator.heartbeat("barn", orjson.dumps(beat("barn", 5.0, **announced)))
    versions = [coordinator.records()[0].plan.version]
    # the barn falls silent: first re-plans wait for it (SilenceWatch), nothing moves
    for _ in range(10):
        clock.now += 5
        for site in everyone[1:]:
            _beat(coordinator, site)
        coordinator.check()
    assert registry.silent("barn")
    assert not coordinator.gone("barn")
    assert coordinator.records()[0].plan.version == versions[0]
    # past the grace period it is gone: field-east's windows leave it with a handover from it
    for _ in range(16):
        clock.now += 5
        for site in everyone[1:]:
            _beat(coordinator, site)
        coordinator.check()
    assert coordinator.gone("barn")
    record = coordinator.records()[0]
    assert record.history[-1].reason.startswith("site barn silent for ")
    assert _site_of(coordinator, "probe_means@field-east") not in ("barn", "cloud")
    assert any(h.source == "barn" for h in record.plan.handovers)
    (move,) = [m for m in record.history[-1].moved if m["replica"] == "probe_means@field-east"]
    if announced:
        # field-east, which spooled the input of its windows, recomputes the barn's part from what it announced
        assert move["at_risk_from"] == sent_before
        assert move["recovered_by"] == "field-east"
        assert "recover_by" not in move
        (h,) = [h for h in record.plan.handovers if h.replica == "probe_means@field-east"]
        assert (h.source, h.recover_from, h.recoverer) == ("barn", sent_before, "field-east")
        assert record.plan.recoveries("field-east")
        assert "barn is gone: field-east recomputes its results of " in caplog.text
        assert "lost unless" not in caplog.text
        # the hub's windows wait for field-east's recomputed results from there on
        assert coordinator.window_holds(lambda _app: lambda *_key: None)[app] == sent_before
        return
    # the move says what the dead barn may have lost and until when its return recovers it
    assert "at_risk_from" not in move
    assert move["recover_by"] == move["switch_at"] + DEFAULT_KEEP_S
    assert all("recover_by" in m for m in record.history[-1].moved if m["from"] == "barn")
    assert "barn is gone: the results of " in caplog.text
    assert "lost unless barn's agent comes back with its state directory by" in caplog.text
    # it comes back: once the handover from it is over, the re-plan that follows says so (and may move replicas back)
    clock.now += 5
    for site in everyone:
        _beat(coordinator, site)
    coordinator.check()
    assert not coordinator.gone("barn")
    assert coordinator.records()[0].history[-1].reason.startswith("site barn silent for ")
    # the move away from it says when it came back, in time to finish its windows before the switch
    (move,) = [m for m in coordinator.records()[0].history[-1].moved if m["replica"] == "probe_means@field-east"]
    assert move["back_at"] == clock.now
    assert move["back_at"] <= move["recover_by"]
    assert "barn is back at " in caplog.text
    assert "its checkpoint and persistent session finish the results of " in caplog.text
    for _ in range(6):
        clock.now += 5
        for site in everyone:
            _beat(coordinator, site)
        coordinator.check()
    assert "site barn heard from again" in coordinator.records()[0].history[-1].reason


def test_a_hub_restarted_while_a_site_was_gone_still_notices_its_return(sites: Sites, tmp_path: Path) -> None:
    clock = Clock()
    registry = SiteRegistry(sites, clock=clock)
    coordinator = Coordinator(
        registry, health=POLICY, clock=clock, min_replan_interval_s=600, store=StateStore(tmp_path)
    )
    coordinator.deploy((FARM / "app.py").read_text(), "app.py")
    everyone = ("barn", "shed", "field-east", "field-west")
    for _ in range(30):  # the barn is heard from once, then gone past the grace period and re-planned around
        for site in everyone if clock.now == 10_000.0 else everyone[1:]:
            _beat(coordinator, site)
        coordinator.check()
        clock.now += 5
    assert coordinator.gone("barn")
    # the hub restarts: its site analysis starts afresh, the plan history is on disk
    restarted = Coordinator(
        SiteRegistry(sites, clock=clock),
        health=POLICY,
        clock=clock,
        min_replan_interval_s=600,
        store=StateStore(tmp_path),
    )
    assert restarted.resume() == ["smart-farm"]
    _beat(restarted, "shed")
    restarted.check()
    assert all("back_at" not in m for entry in restarted.records()[0].history for m in entry.moved)
    back = clock.now
    _beat(restarted, "barn")
    clock.now += 5
    _beat(restarted, "barn")
    restarted.check()
    marked = [m for entry in restarted.records()[0].history for m in entry.moved if "recover_by" in m]
    assert marked
    assert {m["back_at"] for m in marked} == {back}  # its first heartbeat
    # and the mark is kept with the history
    again = Coordinator(SiteRegistry(sites, clock=clock), health=POLICY, clock=clock, store=StateStore(tmp_path))
    again.resume()
    assert [m for entry in again.records()[0].history for m in entry.moved if "recover_by" in m] == marked


def test_the_agent_reads_its_budget_file_and_ignores_a_bad_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    budget = CpuBudget(tmp_path / "cpu-budget")
    assert budget.read() is None
    (tmp_path / "cpu-budget").write_text("0.25\n")
    assert budget.read() == 0.25
    (tmp_path / "cpu-budget").write_text("lots")
    assert budget.read() is None
    assert "ignoring CPU budget file" in caplog.text
    (tmp_path / "cpu-budget").unlink()
    assert budget.read() is None


def test_an_old_owner_gone_before_it_delivered_its_part_has_its_source_site_recompute_it(
    sites: Sites, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    coordinator, _ = _farm(sites, clock)
    app = coordinator.records()[0].name
    everyone = ("barn", "shed", "field-east", "field-west")
    for _ in range(7):  # the barn is over its budget: field-east's windows go to the shed, with a handover
        for site in everyone:
            extra = {"delivered": {app: clock.now - 4.0}} if site == "barn" else {}
            assert coordinator.heartbeat(site, orjson.dumps(beat(site, 180.0 if site == "barn" else 5.0, **extra)))
        coordinator.check()
        clock.now += 5
    record = coordinator.records()[0]
    (handover,) = [h for h in record.plan.handovers if h.replica == "probe_means@field-east"]
    assert handover.source == "barn"
    assert handover.recoverer is None
    last_said = clock.now - 5 - 4.0
    # the barn dies before it has delivered its part: once gone, field-east recomputes it
    for _ in range(30):
        for site in everyone[1:]:
            _beat(coordinator, site)
        coordinator.check()
        clock.now += 5
    assert coordinator.gone("barn")
    record = coordinator.records()[0]
    (handover,) = [h for h in record.plan.handovers if h.replica == "probe_means@field-east"]
    assert (handover.recoverer, handover.recover_from) == ("field-east", last_said)
    (move,) = [
        m for e in record.history for m in e.moved if m["replica"] == "probe_means@field-east" and m["from"] == "barn"
    ]
    assert (move["recovered_by"], move["at_risk_from"]) == ("field-east", last_said)
    assert "barn is gone before it had delivered its part of a handover: field-east recomputes" in caplog.text
    assert coordinator.window_holds(lambda _app: lambda *_key: None)[app] == last_said
