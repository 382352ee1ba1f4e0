"""The ``hub_errors`` gate: the hub's own counts of operator errors by origin site, sampled over a hold."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import pytest

from hub.control.coordinator import Coordinator
from hub.control.distribution import PlanDistributor
from hub.control.registry import SiteRegistry
from hub.control.rollout.gates import GateResult, evaluate, parse_gates
from hub.control.rollout.metrics import Beat, Context
from hub.control.rollout.model import Status
from hub.control.state import StateStore
from hub.engine.dead_letters import UNKNOWN_SITE, OperatorErrors
from spanedge.sites import parse_sites
from spanedge.wire.heartbeat import Heartbeat
from tests.keys import KEY
from tests.unit.hub.control.rollout.test_runner import SITES, SPOKES, V1, V2, Fleet, local_planner, status

CONTEXT = Context("cold-chain", frozenset({"readings"}))


def heard(*sites: str, at: tuple[float, ...] = (0.0, 60.0)) -> list[Beat]:
    """Heartbeats of ``sites`` at ``at``: the stage's sites were heard (``hub_errors`` reads none of them)."""
    return [Beat(site, t, Heartbeat(site=site)) for site in sites for t in at]


def sampled(**series: list[tuple[float, float]]) -> Context:
    return dataclasses.replace(CONTEXT, hub_errors=series)


def only(gate: str, context: Context, sites: tuple[str, ...] = ("truck-1",), end: float = 60.0) -> GateResult:
    return evaluate(parse_gates(gate), heard(*sites), sites, 0.0, end, context).gates[0]


def test_hub_errors_are_the_increase_per_minute_of_the_hub_s_count_for_the_site() -> None:
    # 30 more errors in 30 s at truck-1: 60 a minute; truck-2's count does not move
    context = sampled(**{"truck-1": [(0.0, 100.0), (10.0, 110.0), (30.0, 130.0)], "truck-2": [(0.0, 7.0), (30.0, 7.0)]})
    result = only("hub_errors<1", context, ("truck-1", "truck-2"))
    assert (result.passed, result.site, result.failed) == (False, "truck-1", ("truck-1",))
    assert result.value == pytest.approx(60.0)
    assert result.describe() == "hub_errors 60/min at truck-1 (limit < 1/min)"
    quiet = only("hub_errors<1", context, ("truck-2",))
    assert (quiet.value, quiet.passed) == (0.0, True)


def test_only_the_samples_of_the_hold_window_count() -> None:
    # the errors of v1's time (before 0) and after the hold (past 60) are left out
    series = [(-30.0, 0.0), (-1.0, 500.0), (0.0, 500.0), (30.0, 503.0), (60.0, 506.0), (61.0, 900.0)]
    result = only("hub_errors<10", sampled(**{"truck-1": series}))
    assert result.value == pytest.approx(6.0)
    assert result.passed


def test_a_count_that_went_down_counts_from_zero_again() -> None:
    # the hub restarted between 20 s and 40 s: 10 before, then 4 since it started again
    series = [(0.0, 40.0), (20.0, 50.0), (40.0, 1.0), (60.0, 4.0)]
    assert only("hub_errors<100", sampled(**{"truck-1": series})).value == pytest.approx(10 + 1 + 3)


def test_hub_errors_need_two_samples_at_two_times_in_the_window() -> None:
    one = only("hub_errors<5", sampled(**{"truck-1": [(10.0, 3.0)]}))
    assert (one.value, one.passed) == (None, False)
    assert one.note == "one sample of the hub's counts in the window: no increase per minute"
    none = only("hub_errors<5", sampled(**{"truck-1": [(100.0, 3.0)]}))
    assert none.note == "no sample of the hub's counts in the window: no increase per minute"
    same = only("hub_errors<5", sampled(**{"truck-1": [(10.0, 3.0), (10.0, 4.0)]}))
    assert same.note.startswith("samples at one time only")


def test_without_the_hub_s_counts_the_gate_fails_and_says_why() -> None:
    result = only("hub_errors<5", CONTEXT)
    assert (result.value, result.passed) == (None, False)
    assert "runs without Spark" in result.note
    assert "drop the gate" in result.note


def test_the_hub_s_counter_counts_each_record_under_its_origin_site() -> None:
    errors = OperatorErrors()
    errors.add("cold-chain", ["truck-1", "truck-1", "truck-2", None])
    errors.add("other", ["truck-1"])
    assert errors.counts("cold-chain") == {"truck-1": 2, "truck-2": 1, UNKNOWN_SITE: 1}
    assert errors.counts("nothing") == {}
    assert errors.snapshot()["other", "truck-1"] == 1


class FakeHubErrors:
    """The hub's counts as a test sets them."""

    def __init__(self) -> None:
        self.by_site: dict[str, int] = {}

    def counts(self, app: str) -> Mapping[str, int]:
        return dict(self.by_site) if app == "demo" else {}


class HubFleet(Fleet):
    """The runner's fleet with a hub that counts its operators' errors."""

    def __init__(self, state: Path) -> None:
        self.hub_errors = FakeHubErrors()
        super().__init__(state)

    def open(self) -> Coordinator:
        store = StateStore(self.state)
        return Coordinator(
            SiteRegistry(parse_sites(SITES)),
            planner=local_planner,
            distributor=PlanDistributor(self.publisher, KEY, store),
            store=store,
            hub_errors=self.hub_errors,
            clock=self.clock,
        )


@pytest.fixture
def hub_fleet(tmp_path: Path) -> HubFleet:
    f = HubFleet(tmp_path)
    f.coordinator.deploy(V1, "app.py")
    f.deliver()
    return f


def test_a_canary_whose_records_the_hub_raises_on_is_rolled_back_and_its_value_recorded(hub_fleet: HubFleet) -> None:
    record = hub_fleet.coordinator.rollouts.deploy(
        V2, "app_v2.py", stages="kind=truck:1, *", gates="hub_errors<1", hold_s=30
    )
    (canary,) = record.rollout.stages[0].sites
    hub_fleet.hub_errors.by_site = {"v1": 500}  # another site's errors before and during the hold count for none
    hub_fleet.deliver()
    hub_fleet.advance(5)
    assert status(hub_fleet) is Status.HOLDING
    for _ in range(6):  # 5 more errors on the canary's records every 5 s: 60 a minute
        hub_fleet.hub_errors.by_site[canary] = hub_fleet.hub_errors.by_site.get(canary, 0) + 5
        hub_fleet.advance(5)
    assert status(hub_fleet) in (Status.FAILED, Status.ROLLED_BACK)
    rollout = hub_fleet.coordinator.rollouts.record("demo").rollout  # type: ignore[union-attr]
    (failed,) = [s for s in rollout.steps if s.status is Status.FAILED]
    (gate,) = failed.gates
    assert (gate.gate, gate.passed, gate.site) == ("hub_errors<1", False, canary)
    assert gate.value == pytest.approx(60.0)
    assert f"hub_errors 60/min at {canary} (limit < 1/min)" in failed.reason
    assert gate.to_dict()["value"] == pytest.approx(60.0)  # what GET /apps/{name}/rollout shows


def test_a_canary_the_hub_has_no_error_for_passes_the_gate(hub_fleet: HubFleet) -> None:
    hub_fleet.hub_errors.by_site = {s: 3 for s in SPOKES}  # errors from before the rollout
    hub_fleet.coordinator.rollouts.deploy(V2, "app_v2.py", stages="kind=truck:1, *", gates="hub_errors<1", hold_s=30)
    hub_fleet.deliver()
    hub_fleet.advance(40)
    rollout = hub_fleet.coordinator.rollouts.record("demo").rollout  # type: ignore[union-attr]
    (passed,) = [s for s in rollout.steps if s.status is Status.PASSED]
    assert passed.gates[0].value == 0.0
    assert passed.gates[0].passed
