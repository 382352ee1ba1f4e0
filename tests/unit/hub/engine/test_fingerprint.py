"""Fingerprints and checkpoint names of hub queries stay what earlier hubs wrote, so checkpoints stay valid."""

from __future__ import annotations

from typing import Any

from hub.engine.checkpoints import checkpoint_name, is_checkpoint_of
from hub.engine.fingerprint import fingerprint
from hub.engine.replicas import Replicas
from spanedge import App, agg, sinks
from spanedge.plan import Assignment, Plan, SolverInfo, Totals


def to_celsius(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "temp_c": (r["temp_f"] - 32) / 1.8}


def hot(r: dict[str, Any]) -> bool:
    return bool(r["temp_c"] > 8)


def app_and_plan(at_hub: set[str]) -> tuple[App, Plan]:
    app = App("fp")
    (
        app.source("readings")
        .map(to_celsius, name="celsius")
        .window(key="unit", size=10.0, aggs={"peak": agg.max("temp_c"), "n": agg.count()}, name="per_unit")
        .filter(hot, name="hot")
        .sink(sinks.memory("alerts"), name="alerts out")
    )
    assignments = []
    for op in app.operators.values():
        if op.name == "readings":
            assignments += [Assignment(f"readings@{s}", "readings", s, s) for s in ("a", "b")]
        elif op.name in at_hub:
            assignments.append(Assignment(op.name, op.name, None, "cloud"))
        else:
            assignments += [Assignment(f"{op.name}@{s}", op.name, s, s) for s in ("a", "b")]
    plan = Plan(
        app="fp",
        version=1,
        hub="cloud",
        assignments=tuple(assignments),
        flows=(),
        totals=Totals(wan_bytes_per_s=1, worst_latency_ms=1, mean_latency_ms=1, objective=1.0),
        solver=SolverInfo("fake", "optimal", 0.01),
    )
    return app, plan


def test_the_fingerprint_of_a_sink_query_is_stable() -> None:
    app, plan = app_and_plan({"per_unit", "hot", "alerts out"})
    replicas = Replicas(app, plan, app.graph())
    assert fingerprint(replicas, "alerts out") == EXPECTED["all at hub"]
    app, plan = app_and_plan({"hot", "alerts out"})
    assert fingerprint(Replicas(app, plan, app.graph()), "alerts out") == EXPECTED["window at edge"]


def test_checkpoint_names_keep_their_form() -> None:
    assert checkpoint_name("alerts out", "0123456789ab") == "alerts_out-0123456789ab"
    assert checkpoint_name("sum@site-a", "0123456789ab") == "sum@site-a-0123456789ab"
    assert is_checkpoint_of("sum@site-a-0123456789ab", "sum@site-a")
    assert not is_checkpoint_of("alerts_out-0123456789ab", "sum@site-a")


#: The fingerprints existing checkpoints of these queries carry: a different value would orphan them.
EXPECTED = {"all at hub": "6acbd6aca4e8", "window at edge": "0e380050f588"}


def test_a_query_whose_sink_closes_its_window_is_another_query() -> None:
    app, plan = app_and_plan({"per_unit", "hot", "alerts out"})
    replicas = Replicas(app, plan, app.graph())
    assert fingerprint(replicas, "alerts out", closing=True) != fingerprint(replicas, "alerts out")
