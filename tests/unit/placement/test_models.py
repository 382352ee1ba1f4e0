"""Placement of predict operators: a model over a site's budget is refused there; its cost per record counts."""

from __future__ import annotations

import pytest

from placement import solve
from placement.latency import LatencyMatrix
from placement.problem import build_problem
from spanedge import App, sinks
from spanedge.errors import InfeasiblePlacement, InvalidSites
from spanedge.models.spec import ModelSpec

from .test_placement import hub, make_sites, spoke


def _app(scope: str | None, trees: int = 100, depth: int = 10) -> tuple[App, ModelSpec]:
    app = App("plant")
    records = app.source("r")
    wear = app.model(
        "wear",
        algorithm="random_forest",
        features=["rms", "peak"],
        label="failed",
        train_on=records,
        trees=trees,
        depth=depth,
    )
    records.predict(wear, output="p", name="score", scope=scope).sink(sinks.memory("o"), name="out")
    return app, wear


def _sites(budget: int | None) -> object:
    gateway = spoke(cpu=1.0, rate=100)
    if budget is not None:
        gateway["model_budget_bytes"] = budget
    return make_sites({"cloud": hub(), "a": gateway})


def test_a_model_over_the_sites_budget_is_refused_with_model_size_and_budget() -> None:
    app, wear = _app("local")
    assert wear.size_bytes > 1_000_000
    with pytest.raises(InfeasiblePlacement) as err:
        solve(app, _sites(1_000_000))  # type: ignore[arg-type]
    message = str(err.value)
    assert f"model 'wear' ({wear.location}) takes an estimated {wear.size_bytes} bytes" in message
    assert "a has 1000000 bytes" in message
    assert "raise model_budget_bytes in sites.yaml" in message


def test_a_model_within_budget_runs_at_the_gateway() -> None:
    app, wear = _app("local", trees=5, depth=3)
    plan = solve(app, _sites(wear.size_bytes))  # type: ignore[arg-type]
    assert {a.operator: a.site for a in plan.assignments}["score"] == "a"


def test_a_model_too_large_for_the_gateway_runs_at_the_hub_when_it_may() -> None:
    app, _ = _app(None)
    plan = solve(app, _sites(2048))  # type: ignore[arg-type]
    assert {a.operator: a.site for a in plan.assignments}["score"] == "cloud"


def test_the_models_cost_per_record_is_the_predicts_load() -> None:
    app, wear = _app("local", trees=5, depth=3)
    sites = _sites(None)
    problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))  # type: ignore[arg-type]
    score = next(r for r in problem.replicas.values() if r.op.name == "score")
    assert score.load == pytest.approx(100 * wear.cost_per_record)


def test_only_a_positive_budget_is_a_budget() -> None:
    with pytest.raises(InvalidSites):
        make_sites({"cloud": hub(), "a": {**spoke(), "model_budget_bytes": 0}})
