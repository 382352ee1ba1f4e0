"""Sites new to an app: one switch for the plan version, and the hub's old query kept for the windows before it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.engine.compile import Compiler
from hub.engine.replicas import Replicas
from hub.engine.wanted import before_slot, split
from hub.handover.settling import SettleWatch
from hub.handover.switches import before_placement, postpone, stamp_handovers
from spanedge import App, agg, sinks
from spanedge.plan import Assignment, Flow, Handover, Join, Plan, SolverInfo, Totals

T0 = 1_700_000_000.0
SPOKES = ("a", "b", "c", "d", "e")


def make_app() -> App:
    app = App("fleet")
    readings = app.source("readings", time_field="ts").map(lambda r: {**r, "x2": r["x"] * 2}, name="double")
    totals = readings.window(name="win", key="k", size=10.0, aggs={"n": agg.count(), "s": agg.sum("x2")})
    totals.sink(sinks.console(), name="out")
    return app


def plan_of(sites: list[str], version: int, since: dict[str, int] | None = None) -> Plan:
    """Per site ``readings@site`` and ``double@site`` there; ``win`` and ``out`` at the hub."""
    since = since or {}
    assignments: list[Assignment] = []
    flows: list[Flow] = []
    for site in sites:
        v = since.get(site, 0)
        assignments += [
            Assignment(f"readings@{site}", "readings", site, site, "source", v),
            Assignment(f"double@{site}", "double", site, site, "@local", v),
        ]
        flows += [Flow(f"readings@{site}", f"double@{site}", 10.0, 1000.0), Flow(f"double@{site}", "win", 10.0, 1000.0)]
    assignments += [
        Assignment("win", "win", None, "cloud", "@global_"),
        Assignment("out", "out", None, "cloud", "sink"),
    ]
    flows.append(Flow("win", "out", 1.0, 100.0))
    return Plan(
        app="fleet",
        version=version,
        hub="cloud",
        assignments=tuple(assignments),
        flows=tuple(flows),
        totals=Totals(100.0, 5.0, 5.0, 1.0),
        solver=SolverInfo("test", "optimal", 0.0),
    )


def fingerprint(app: App, plan: Plan) -> str:
    return Compiler(cast(Any, None), Replicas(app, plan, app.graph())).fingerprint("out")


def test_a_site_new_to_the_app_joins_at_the_switch_of_the_hub_windows_after_the_delay() -> None:
    app = make_app()
    previous = plan_of(["a", "b"], 1)
    plan = stamp_handovers(plan_of(["a", "b", "c"], 2, {"c": 2}), previous, app, T0 + 23.0, delay=5.0)
    assert plan.joins == (Join("c", T0 + 30.0),)
    assert plan.handovers == ()
    # the next versions keep listing it while it is fresh, and only while the site is read
    kept = stamp_handovers(plan_of(["a", "b", "c"], 3, {"c": 2}), plan, app, T0 + 100.0)
    assert kept.joins == plan.joins
    old = stamp_handovers(plan_of(["a", "b", "c"], 3, {"c": 2}), plan, app, T0 + 30.0 + 601.0)
    assert old.joins == ()
    left = stamp_handovers(plan_of(["a", "b"], 3), plan, app, T0 + 100.0)
    assert left.joins == ()
    assert stamp_handovers(plan_of(["a"], 1), None, app, T0).joins == ()  # a first deploy: nothing joins


def test_a_join_and_a_move_of_one_version_switch_together() -> None:
    app = make_app()
    previous = plan_of(["a", "b"], 1)
    moved = plan_of(["a", "b", "c"], 2, {"c": 2, "b": 2})
    moved = dataclasses.replace(
        moved,
        assignments=tuple(
            dataclasses.replace(a, site="cloud") if a.replica == "double@b" else a for a in moved.assignments
        ),
    )
    plan = stamp_handovers(moved, previous, app, T0 + 13.0, delay=5.0)
    assert plan.handovers == (Handover("double@b", "b", "cloud", T0 + 20.0, 0),)
    assert plan.joins == (Join("c", T0 + 20.0),)
    split_at = before_placement(plan)
    assert split_at is not None
    old, at = split_at
    assert at == T0 + 20.0
    assert old.site_of("double@b") == "b"
    assert old.source_sites() == {"a", "b"}
    assert fingerprint(app, old) == fingerprint(app, previous)


@settings(max_examples=60, deadline=None)
@given(
    before=st.sets(st.sampled_from(SPOKES), min_size=1),
    after=st.sets(st.sampled_from(SPOKES), min_size=1),
    now=st.floats(min_value=T0, max_value=T0 + 1e5),
)
def test_the_sites_a_version_adds_join_at_one_switch_and_the_hubs_old_query_is_the_previous_one(
    before: set[str], after: set[str], now: float
) -> None:
    app = make_app()
    previous = plan_of(sorted(before), 1)
    plan = stamp_handovers(plan_of(sorted(after), 2, dict.fromkeys(after - before, 2)), previous, app, now)
    assert {j.site for j in plan.joins} == after - before
    assert len({j.switch_at for j in plan.joins}) <= 1
    for j in plan.joins:
        assert now + 5.0 <= j.switch_at < now + 15.0
        assert j.switch_at % 10.0 == 0  # on the hub window's grid: no window straddles it
    split_at = before_placement(plan)
    if not plan.joins:
        assert split_at is None
        return
    old, at = split_at
    assert at == plan.joins[0].switch_at
    kept = plan_of(sorted(after & before), 1)
    # the placement without the new sites: the hub's running query, its window state, writes before the switch
    assert set(old.assignments) == set(kept.assignments)
    assert set(old.flows) == set(kept.flows)
    assert old.joins == old.handovers == ()
    assert fingerprint(app, old) == fingerprint(app, kept)
    assert fingerprint(app, old) != fingerprint(app, plan)


def test_the_hub_keeps_its_running_query_for_the_windows_before_the_join_and_starts_one_for_after(
    tmp_path: Path,
) -> None:
    app = make_app()
    graph = app.graph()
    previous = plan_of(["a", "b"], 1)
    plan = stamp_handovers(plan_of(["a", "b", "c"], 2, {"c": 2}), previous, app, T0 + 23.0)
    fp = fingerprint(app, plan)
    wanted: dict[str, Any] = {"out": (plan.assignment("out"), None, fp)}
    sides = split(cast(Any, None), app, plan, graph, wanted, tmp_path)
    assert sides == {"out": ("after", T0 + 30.0), before_slot("out"): ("before", T0 + 30.0)}
    assert wanted[before_slot("out")][2] == fingerprint(app, previous)  # the query that runs: it keeps its state
    assert wanted["out"][2] == fp


def test_a_join_switch_too_close_after_deploying_moves_later_with_the_moves() -> None:
    app = make_app()
    previous = plan_of(["a"], 1)
    plan = stamp_handovers(plan_of(["a", "b"], 2, {"b": 2}), previous, app, T0 + 3.0)
    assert plan.joins == (Join("b", T0 + 10.0),)
    assert postpone(plan, previous, app, T0 + 4.0) is plan  # still 6 s away
    later = postpone(plan, previous, app, T0 + 8.0)
    assert later.joins == (Join("b", T0 + 20.0),)
    assert postpone(later, later, app, T0 + 19.0) is later  # a join already listed before is no new one


def test_a_replan_waits_for_the_hubs_old_query_of_a_join_to_write_its_share() -> None:
    app = make_app()
    previous = plan_of(["a"], 1)
    current = stamp_handovers(plan_of(["a", "b"], 2, {"b": 2}), previous, app, T0)
    writing = ["hub query out (before handover) (watermark 1700000005, done at 1700000020)"]
    watch = SettleWatch(lambda: T0 + 30.0, 5.0, lambda _name, _plan: writing)
    proposed = dataclasses.replace(current, version=3)
    assert watch.blocks("fleet", current, proposed, app)
    writing.clear()
    assert not watch.blocks("fleet", current, proposed, app)
    watch.clock = lambda: T0 + 10.0 + 601.0  # a join no plan lists any more holds nothing back
    writing.append("a query")
    assert not watch.blocks("fleet", current, proposed, app)


@pytest.mark.parametrize("joins", [(), (Join("b", T0 + 10.0),)], ids=["none", "one"])
def test_a_plan_keeps_its_joins_through_json_and_leaves_the_field_out_without_any(joins: tuple[Join, ...]) -> None:
    plan = dataclasses.replace(plan_of(["a", "b"], 2), joins=joins)
    data = plan.to_dict()
    assert ("joins" in data) == bool(joins)
    assert Plan.from_json(plan.to_json()) == plan
