"""Which changes of an app can run beside the deployed version while sites change, and which cannot."""

from __future__ import annotations

from hub.control.planning import load_app
from hub.control.rollout.mixing import mixing_problems
from spanedge.app import App
from spanedge.plan import Assignment, Flow, Plan, SolverInfo, Totals

APP = """
from spanedge import App, agg, sinks

def keep(r):
    return r["temp"] > {floor}

app = App("demo")
readings = app.source("readings", time_field="ts")
readings.filter(keep, name="plausible").window(
    name="unit_peaks", key="unit", size="{size}", aggs={{"peak": agg.max("temp")}}
).sink(sinks.console(), name="{sink}")
"""


def app_of(floor: int = 0, size: str = "10s", sink: str = "out") -> App:
    return load_app(APP.format(floor=floor, size=size, sink=sink), "app.py")


def plan_of(app: App, at_hub: set[str]) -> Plan:
    """One replica per operator at the spoke ``a``, those named in ``at_hub`` at the hub, a chain of flows."""
    names = app.graph().order
    site = {n: "cloud" if n in at_hub else "a" for n in names}
    replica = {n: n if n in at_hub else f"{n}@a" for n in names}
    assignments = tuple(Assignment(replica[n], n, None if n in at_hub else "a", site[n], "test") for n in names)
    flows = tuple(Flow(replica[u], replica[v], 1.0, 100.0) for u, v in app.graph().edges)
    return Plan("demo", 1, "cloud", assignments, flows, Totals(0, 0, 0, 0), SolverInfo("test", "ok", 0.0))


def test_a_change_confined_to_the_spokes_mixes() -> None:
    old, new = app_of(), app_of(floor=-40)
    assert mixing_problems(old, plan_of(old, {"out"}), new, plan_of(new, {"out"})) == []


def test_a_changed_window_whose_stream_crosses_to_the_hub_cannot_mix() -> None:
    old, new = app_of(), app_of(size="20s")
    problems = mixing_problems(old, plan_of(old, {"out"}), new, plan_of(new, {"out"}))
    assert problems == [
        "stream unit_peaks@a crosses to the hub from a changed window (key, size, kind or aggregations)"
    ]


def test_a_changed_window_whose_results_stay_at_the_spoke_mixes() -> None:
    old, new = app_of(), app_of(size="20s")
    assert mixing_problems(old, plan_of(old, set()), new, plan_of(new, set())) == []


def test_a_replica_that_moves_to_the_hub_or_a_changed_hub_part_cannot_mix() -> None:
    old = app_of()
    problems = mixing_problems(old, plan_of(old, {"out"}), old, plan_of(old, {"out", "unit_peaks"}))
    assert any("stream plausible@a crosses to the hub in the new version only" in p for p in problems)
    assert any("hub replica unit_peaks is new" in p for p in problems)
    renamed = app_of(sink="out2")
    problems = mixing_problems(old, plan_of(old, {"out"}), renamed, plan_of(renamed, {"out2"}))
    assert "hub replica out2 is new in the new version" in problems
    assert "hub replica out is gone in the new version" in problems
