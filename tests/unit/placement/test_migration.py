"""Re-plans: the migration-cost term of the objective and the hysteresis that keeps a plan."""

from __future__ import annotations

import math

import pytest

from placement import LatencyMatrix, Previous, Weights, solve
from placement.cost import MIGRATION_HORIZON_S, migration, move_cost, moves
from placement.planner import kept_placement
from placement.problem import build_problem
from placement.synthetic import synthetic
from spanedge.errors import InvalidSettings
from spanedge.plan import Plan
from tests.unit.placement.test_placement import heavy_local_app, offload_sites

PARSE = "parse@factory-a"


def placement_of(plan: Plan) -> dict[str, str]:
    return {a.replica: a.site for a in plan.assignments}


def first_plan() -> Plan:
    """``parse`` runs at ``mid``: ``near``, the nearer spoke, is too small for it."""
    plan = solve(heavy_local_app(), offload_sites())
    assert plan.site_of(PARSE) == "mid"
    return plan


def test_a_move_costs_its_state_times_the_link_cost() -> None:
    sites = offload_sites(near=2.0)
    problem = build_problem(heavy_local_app(), sites, LatencyMatrix.from_sites(sites))
    cost = problem.latency.cost("mid", "near")
    want = 3e6 * cost / (problem.source_bytes * MIGRATION_HORIZON_S)
    assert math.isclose(move_cost(problem, Weights(), 3e6, "mid", "near"), want)
    assert math.isclose(move_cost(problem, Weights(migration=2.5), 3e6, "mid", "near"), 2.5 * want)
    assert move_cost(problem, Weights(), 3e6, "mid", "mid") == 0.0
    assert move_cost(problem, Weights(), 0.0, "mid", "near") == 0.0
    previous = Previous.of(first_plan(), {PARSE: 3e6})
    moved = {**previous.placement, PARSE: "near", "keep@factory-a": "near"}
    assert moves(problem, previous, moved) == [PARSE, "keep@factory-a"]
    assert math.isclose(migration(problem, Weights(), previous, moved), want)  # keep holds no state
    assert migration(problem, Weights(), previous, dict(previous.placement)) == 0.0


def test_weights_hysteresis_and_state_must_be_non_negative() -> None:
    with pytest.raises(InvalidSettings, match="objective weight migration must be a finite number >= 0"):
        Weights(migration=-1.0)
    with pytest.raises(ValueError, match="hysteresis must be a number >= 0"):
        Previous({}, hysteresis=-0.1)
    with pytest.raises(ValueError, match="state bytes must be numbers >= 0; got -5 for replica 'w'"):
        Previous({}, state_bytes={"w": -5})


def test_a_replan_with_nothing_changed_moves_nothing() -> None:
    plan = first_plan()
    again = solve(heavy_local_app(), offload_sites(), previous=Previous.of(plan, {PARSE: 1e6}))
    assert placement_of(again) == placement_of(plan)
    assert again.solver.status == "optimal"


@pytest.mark.parametrize("seed", [0, 1])
def test_an_unchanged_replan_of_a_larger_instance_moves_nothing(seed: int) -> None:
    app, sites = synthetic(30, 20, seed=seed)
    plan = solve(app, sites)
    state = {a.replica: 1e5 for a in plan.assignments}
    again = solve(app, sites, previous=Previous.of(plan, state))
    assert placement_of(again) == placement_of(plan)


def test_the_migration_term_decides_whether_a_better_site_is_worth_the_move() -> None:
    """``near`` grows: moving ``parse`` there gains 0.2; a move that costs more than that is not made."""
    plan = first_plan()
    sites = offload_sites(near=2.0)
    free = solve(heavy_local_app(), sites)
    assert free.site_of(PARSE) == "near"
    gain = plan.totals.objective - free.totals.objective
    problem = build_problem(heavy_local_app(), sites, LatencyMatrix.from_sites(sites))
    per_byte = move_cost(problem, Weights(), 1.0, "mid", "near")
    cheap = Previous.of(plan, {PARSE: 0.5 * gain / per_byte}, hysteresis=0.0)
    moved = solve(heavy_local_app(), sites, previous=cheap)
    assert moved.site_of(PARSE) == "near"
    assert "2 replicas move" in moved.solver.status
    dear = Previous.of(plan, {PARSE: 2.0 * gain / per_byte}, hysteresis=0.0)
    stayed = solve(heavy_local_app(), sites, previous=dear)
    assert placement_of(stayed) == placement_of(plan)
    assert math.isclose(stayed.totals.objective, plan.totals.objective)
    # the weight scales the term: with migration free the same state moves
    again = solve(heavy_local_app(), sites, weights=Weights(migration=0.0), previous=dear)
    assert again.site_of(PARSE) == "near"


def test_hysteresis_keeps_the_plan_unless_the_gain_is_large_enough() -> None:
    plan = first_plan()
    sites = offload_sites(near=2.0)
    gain = (plan.totals.objective - solve(heavy_local_app(), sites).totals.objective) / plan.totals.objective
    kept = solve(heavy_local_app(), sites, previous=Previous.of(plan, hysteresis=gain + 0.01))
    assert placement_of(kept) == placement_of(plan)
    assert kept.solver.status.endswith(f"previous plan kept (gain {gain:.1%} <= {gain + 0.01:.1%})")
    assert math.isclose(kept.totals.objective, plan.totals.objective)
    moved = solve(heavy_local_app(), sites, previous=Previous.of(plan, hysteresis=gain - 0.01))
    assert moved.site_of(PARSE) == "near"


def test_a_previous_plan_that_breaks_the_rules_is_not_kept() -> None:
    """``mid`` shrinks below what ``parse`` needs: however large the hysteresis, ``parse`` moves."""
    plan = first_plan()
    sites = offload_sites(near=2.0, mid=0.3)
    problem = build_problem(heavy_local_app(), sites, LatencyMatrix.from_sites(sites))
    previous = Previous.of(plan, {PARSE: 1e9}, hysteresis=10.0)
    assert kept_placement(problem, previous) is None
    replanned = solve(heavy_local_app(), sites, previous=previous)
    assert replanned.site_of(PARSE) == "near"


def test_the_previous_spoke_stays_a_candidate() -> None:
    """Without a previous plan ``mid`` is no candidate once ``factory-a`` has room; with one it is, and kept."""
    plan = first_plan()
    sites = offload_sites()
    bigger = sites.sites["factory-a"].replace(cpu=4.0)
    roomy = sites.replace(sites={**sites.sites, "factory-a": bigger})
    matrix = LatencyMatrix.from_sites(roomy)
    assert "mid" not in build_problem(heavy_local_app(), roomy, matrix).replicas[PARSE].candidates
    previous = Previous.of(plan, {PARSE: 1e9})
    assert "mid" in build_problem(heavy_local_app(), roomy, matrix, previous.placement).replicas[PARSE].candidates
    assert solve(heavy_local_app(), roomy).site_of(PARSE) == "factory-a"
    assert solve(heavy_local_app(), roomy, previous=previous).site_of(PARSE) == "mid"
