"""The integer program solved once per hub finds the optimum of the one program with a hub choice."""

from __future__ import annotations

import math

import pytest

from placement import LatencyMatrix, Previous, Weights, solve
from placement.cost import migration, objective
from placement.ilp import solve_ilp
from placement.latency import LinkInfo
from placement.problem import Problem, build_problem
from placement.synthetic import hinted as fn
from placement.synthetic import synthetic
from spanedge import App, sinks
from spanedge.sites import Sites


def optimum(problem: Problem, placement: dict[str, str] | None, previous: Previous | None = None) -> float:
    """The objective of ``placement``, migration included in a re-plan."""
    assert placement is not None
    weights = Weights()
    extra = migration(problem, weights, previous, placement) if previous is not None else 0.0
    return objective(problem, weights, placement) + extra


@pytest.mark.parametrize("seed", range(4))
def test_per_hub_parts_find_the_optimum_of_the_one_program(seed: int) -> None:
    app, sites = synthetic(30, 14, seed=seed, hubs=3)
    problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))
    parts = solve_ilp(problem, Weights())
    one = solve_ilp(problem, Weights(), per_hub=False)
    assert parts.optimal
    assert one.optimal
    assert parts.gap is not None
    assert parts.gap <= 1e-4
    assert optimum(problem, parts.placement) == pytest.approx(optimum(problem, one.placement), rel=1e-4)
    assert parts.hub in problem.hubs


def test_a_re_plan_per_hub_matches_the_one_program_and_keeps_an_unchanged_plan() -> None:
    app, sites = synthetic(10, 40, seed=5)
    assert len(sites.hubs) > 1
    matrix = LatencyMatrix.from_sites(sites)
    first = solve(app, sites, latency=matrix)
    previous = Previous.of(first)
    problem = build_problem(app, sites, matrix, previous.placement)
    parts = solve_ilp(problem, Weights(), previous=previous)
    one = solve_ilp(problem, Weights(), previous=previous, per_hub=False)
    assert optimum(problem, parts.placement, previous) == pytest.approx(
        optimum(problem, one.placement, previous), rel=1e-4
    )
    again = solve(app, sites, latency=matrix, previous=previous)
    assert {a.replica: a.site for a in again.assignments} == {a.replica: a.site for a in first.assignments}
    assert again.hub == first.hub


def test_a_hub_part_where_a_replica_has_no_candidate_is_skipped() -> None:
    sites = Sites.of(
        {
            "sites": {
                "near": {"tier": "hub", "broker": "mqtt://localhost:1883", "cpu": 8},
                "far": {"tier": "hub", "broker": "mqtt://localhost:1883", "cpu": 8},
                "s": {
                    "tier": "spoke",
                    "broker": "mqtt://localhost:1883",
                    "streams": {"r": {"topic": "t/#", "rate": 10, "record_bytes": 100}},
                },
            },
            "links": [
                {"between": ["s", "near"], "latency_ms": 10, "bandwidth_mbps": 100},
                {"between": ["s", "far"], "latency_ms": 90, "bandwidth_mbps": 100},
            ],
            "default_link": {"latency_ms": 200, "bandwidth_mbps": 10},
        }
    )
    app = App("t")
    app.source("r").map(fn("merge", scope="global")).sink(sinks.memory("o"), name="out")
    problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))
    window = next(r for r in problem.decisions() if r.op.name != "out")
    window.candidates = ("far",)  # as if only the far hub could run it
    assert problem.at_hub("near") is None
    found = solve_ilp(problem, Weights())
    assert found.optimal
    assert found.hub == "far"
    assert found.placement is not None
    assert found.placement[window.id] == "far"


def test_of_equally_fast_paths_the_cheaper_wins() -> None:
    links = {
        ("a", "e"): LinkInfo(5, 100, cost=3),
        ("e", "d"): LinkInfo(15, 100, cost=3),
        ("a", "b"): LinkInfo(10, 5, cost=1),
        ("b", "d"): LinkInfo(10, 5, cost=1),
        ("d", "f"): LinkInfo(1, 50, cost=1),
    }
    m = LatencyMatrix(["a", "b", "d", "e", "f"], links)
    info = m.info("a", "f")
    assert (info.latency_ms, info.cost, info.bandwidth_mbps, info.origin) == (21, 3, 5, "path")
    assert m.info("f", "a").origin == "unreachable"
    assert math.isinf(m.latency("f", "a"))
