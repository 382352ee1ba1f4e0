"""Placement: the integer program against brute force, scopes, capacities, decisions, errors, baselines."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import placement.planner
from placement import LatencyMatrix, Weights, plan_app, solve
from placement.constraints import violations
from placement.cost import evaluate, objective
from placement.ilp import IlpResult, solve_ilp
from placement.problem import Problem, build_problem
from placement.synthetic import hinted as fn
from placement.synthetic import synthetic
from spanedge import App, agg, sinks
from spanedge.errors import InfeasiblePlacement, InvalidSettings, SpanEdgeError
from spanedge.loader import load_app
from spanedge.plan import Plan
from spanedge.scope import Scope
from spanedge.sites import Sites, load_sites
from tests.conftest import EXAMPLES


def make_sites(sites: dict[str, Any], links: Sequence[Any] = (), default_ms: float = 100.0) -> Sites:
    full = {}
    for name, spec in sites.items():
        spec = dict(spec)
        spec.setdefault("broker", "mqtt://localhost:1883")
        full[name] = spec
    return Sites.of(
        {"sites": full, "links": list(links), "default_link": {"latency_ms": default_ms, "bandwidth_mbps": 100}}
    )


def spoke(cpu: float = 1.0, rate: float | None = None, record_bytes: float = 100.0) -> dict[str, Any]:
    site: dict[str, Any] = {"tier": "spoke", "cpu": cpu}
    if rate is not None:
        site["streams"] = {"r": {"topic": "t/#", "rate": rate, "record_bytes": record_bytes}}
    return site


def hub(cpu: float = 8.0) -> dict[str, Any]:
    return {"tier": "hub", "cpu": cpu}


def link(a: str, b: str, ms: float, cost: float = 1.0) -> dict[str, Any]:
    return {"between": [a, b], "latency_ms": ms, "bandwidth_mbps": 100, "cost": cost}


def placement_of(plan: Plan) -> dict[str, str]:
    return {a.replica: a.site for a in plan.assignments}


# --- exhaustive enumeration -------------------------------------------------------------------


def brute_force(problem: Problem, weights: Weights) -> float:
    """The best objective over every placement that obeys the rules (checked by ``violations``).

    Every valid placement uses one hub, one spoke per source site, and puts
    each replica at its source site's spoke or at the hub, so enumerating
    those choices enumerates all valid placements.
    """
    decisions = problem.decisions()
    homes = sorted({r.home for r in decisions if r.home is not None})
    spokes = {
        h: sorted({c for r in decisions if r.home == h for c in r.candidates if not problem.is_hub(c)}) or [h]
        for h in homes
    }
    best = math.inf
    for hub_site in problem.hubs:
        for chosen_spokes in itertools.product(*(spokes[h] for h in homes)):
            at = dict(zip(homes, chosen_spokes, strict=True))
            for bits in itertools.product((False, True), repeat=len(decisions)):
                chosen = {
                    r.id: hub_site if to_hub or r.home is None else at[r.home]
                    for r, to_hub in zip(decisions, bits, strict=True)
                }
                full = problem.resolve(chosen)
                if violations(problem, full, hub_site):
                    continue
                best = min(best, objective(problem, weights, full))
    return best


def tiny(seed: int) -> tuple[App, Sites]:
    """A small random instance: 2-3 spokes (two source the stream), 1-2 hubs, 3-4 operators.

    A third of the instances add a second stream, sourced by one spoke, merged
    with the first by an unscoped union (replicated per source site).
    """
    rng = random.Random(seed)
    spokes = {
        f"s{i}": spoke(cpu=rng.choice([0.02, 0.06, 0.12, 1.0]), rate=rng.choice([100, 400, 1000]) if i < 2 else None)
        for i in range(rng.choice([2, 3]))
    }
    union = seed % 3 == 2
    if union:
        spokes["s1"]["streams"]["q"] = {"topic": "q/#", "rate": rng.choice([50, 500]), "record_bytes": 300}
    hubs = {f"h{i}": hub(cpu=rng.choice([0.03, 0.1, 8.0])) for i in range(rng.choice([1, 2]))}
    names = [*spokes, *hubs]
    links = [
        link(a, b, rng.choice([5, 20, 60, 120]), cost=rng.choice([1.0, 2.0]))
        for a, b in itertools.combinations(names, 2)
    ]
    app = App("tiny")
    stream = app.source("r")
    if union:
        stream = stream.union(
            app.source("q").map(fn("qm", scope=rng.choice(["local", None]), selectivity=0.5)), name="u"
        )
    for i in range(2 if union else rng.choice([3, 4])):
        scope = rng.choice(["local", None, None])
        cost = rng.choice([1e-5, 5e-5, 1e-4])
        if rng.random() < 0.3:
            stream = stream.flat_map(fn(f"f{i}", scope=scope, cost=cost, selectivity=rng.choice([2.0, 5.0])))
        else:
            stream = stream.filter(fn(f"f{i}", scope=scope, cost=cost, selectivity=rng.choice([0.01, 0.3, 0.9, 1.0])))
        if i == 1 and rng.random() < 0.5:
            stream.sink(sinks.memory("side"), name="side")
    if rng.random() < 0.7:
        stream = stream.map(fn("fleet", scope="global", cost=1e-5))
    stream.sink(sinks.memory("out"), name="out")
    return app, make_sites({**hubs, **spokes}, links)


@pytest.mark.parametrize("seed", range(24))
def test_ilp_matches_exhaustive_enumeration(seed: int) -> None:
    app, sites = tiny(seed)
    weights = Weights(traffic=1.0, latency=random.Random(seed).choice([0.2, 1.0, 5.0]))
    matrix = LatencyMatrix.from_sites(sites)
    problem = build_problem(app, sites, matrix)
    best = brute_force(problem, weights)
    if math.isinf(best):
        with pytest.raises(InfeasiblePlacement):
            solve(app, sites, latency=matrix, weights=weights)
        return
    plan = solve(app, sites, latency=matrix, weights=weights)
    assert plan.solver.status == "optimal"
    assert violations(problem, placement_of(plan), plan.hub) == []
    assert plan.totals.objective == pytest.approx(best, rel=1e-4, abs=1e-9)


def test_brute_force_sees_capacity_bound_instances() -> None:
    """The enumeration test covers instances where capacity moves replicas or makes them infeasible."""
    outcomes = set()
    for seed in range(24):
        app, sites = tiny(seed)
        matrix = LatencyMatrix.from_sites(sites)
        problem = build_problem(app, sites, matrix)
        free = brute_force(problem, Weights())
        outcomes.add("infeasible" if math.isinf(free) else "feasible")
        roomy = sites.replace(sites={k: v.replace(cpu=100.0) for k, v in sites.sites.items()})
        if not math.isinf(free):
            relaxed = brute_force(build_problem(app, roomy, matrix), Weights())
            if relaxed < free - 1e-9:
                outcomes.add("capacity binds")
    assert {"feasible", "capacity binds"} <= outcomes


# --- rules on random instances ---------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_scope_and_capacity_never_violated(seed: int) -> None:
    app, sites = synthetic(30, 12, seed=seed, hubs=2 if seed % 2 else 1)
    plan = solve(app, sites, baselines=["central", "local-first"])
    problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))
    placed = placement_of(plan)
    assert violations(problem, placed, plan.hub) == []
    hubs = {s.name for s in sites.hubs}
    load = dict.fromkeys(sites.sites, 0.0)
    for a in plan.assignments:
        op = app.operators[a.operator]
        load[a.site] += problem.replicas[a.replica].load
        if op.scope is Scope.LOCAL:
            assert a.site not in hubs, a
        if op.hub_only:
            assert a.site == plan.hub, a
        assert a.reason, a
    for name, used in load.items():
        assert used <= sites.sites[name].cpu + 1e-6
    assert plan.totals.objective <= plan.baselines["local-first"].objective + 1e-6 or plan.warnings == ()


def test_greedy_is_valid_and_never_better_than_the_ilp() -> None:
    for seed in range(3):
        app, sites = synthetic(30, 12, seed=seed)
        exact = solve(app, sites)
        quick = solve(app, sites, method="greedy")
        problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))
        assert violations(problem, placement_of(quick), quick.hub) == []
        assert exact.totals.objective <= quick.totals.objective * (1 + 1e-4) + 1e-9


# --- decisions that must make sense ---------------------------------------------------------


def three_spokes() -> Sites:
    return make_sites(
        {"cloud": hub(), "a": spoke(rate=1000), "b": spoke(rate=500), "c": spoke(rate=200)},
        [link("a", "cloud", 40), link("b", "cloud", 60), link("c", "cloud", 30)],
    )


def test_selective_filter_goes_to_the_edge() -> None:
    app = App("t")
    app.source("r").filter(fn("drop_most", selectivity=0.01)).map(fn("merge", scope="global")).sink(
        sinks.memory("o"), name="out"
    )
    plan = solve(app, three_spokes())
    where = placement_of(plan)
    assert [where[f"drop_most@{s}"] for s in "abc"] == ["a", "b", "c"]
    assert where["merge"] == "cloud"
    assert "cuts WAN traffic" in plan.assignment("drop_most@a").reason


def test_expanding_operator_goes_to_the_hub() -> None:
    app = App("t")
    app.source("r").flat_map(fn("explode", selectivity=10)).map(fn("merge", scope="global")).sink(
        sinks.memory("o"), name="out"
    )
    plan = solve(app, three_spokes())
    where = placement_of(plan)
    assert {where[f"explode@{s}"] for s in "abc"} == {"cloud"}
    assert "exceeds its input" in plan.assignment("explode@a").reason
    assert plan.totals.wan_bytes_per_s == pytest.approx((1000 + 500 + 200) * 100)


def test_expanding_operator_stays_local_when_it_must() -> None:
    app = App("t")
    app.source("r").flat_map(fn("explode", scope="local", selectivity=10)).map(fn("merge", scope="global")).sink(
        sinks.memory("o"), name="out"
    )
    plan = solve(app, three_spokes())
    assert plan.site_of("explode@a") == "a"
    assert plan.assignment("explode@a").reason.startswith("scope @local")


def offload_sites(near: float = 0.2, mid: float = 2.0, far: float = 4.0) -> Sites:
    return make_sites(
        {
            "cloud": hub(),
            "factory-a": spoke(cpu=0.1, rate=1000),
            "near": spoke(near),
            "mid": spoke(mid),
            "far": spoke(far),
        },
        [
            link("factory-a", "cloud", 50),
            link("factory-a", "near", 10),
            link("factory-a", "mid", 20),
            link("factory-a", "far", 70),
            link("near", "cloud", 50),
            link("mid", "cloud", 50),
            link("far", "cloud", 10),
        ],
    )


def heavy_local_app() -> App:
    app = App("t")
    app.source("r").map(fn("parse", scope="local", cost=5e-4)).filter(fn("keep", selectivity=0.1)).map(
        fn("merge", scope="global")
    ).sink(sinks.memory("o"), name="out")
    return app


def test_full_spoke_offloads_to_the_nearest_spoke_with_room() -> None:
    plan = solve(heavy_local_app(), offload_sites())
    assert plan.site_of("parse@factory-a") == "mid"
    reason = plan.assignment("parse@factory-a").reason
    assert reason.startswith("capacity: factory-a is full")
    assert "offloaded to mid (20 ms)" in reason
    assert plan.site_of("keep@factory-a") in ("mid", "cloud")


def test_infeasible_capacity_names_the_site_and_operator() -> None:
    with pytest.raises(InfeasiblePlacement) as err:
        solve(heavy_local_app(), offload_sites(near=0.1, mid=0.3, far=0.1))
    message = str(err.value)
    assert message.startswith("site factory-a needs 0.5 cores for its local operators but has 0.1")
    assert "near 0.1 cores at 10 ms, mid 0.3 cores at 20 ms" in message
    assert "raise its capacity or let 'parse' run at a nearby spoke" in message


def test_hub_overload_is_named() -> None:
    app = App("t")
    app.source("r").map(fn("merge", scope="global", cost=1e-2)).sink(sinks.memory("o"), name="out")
    sites = make_sites({"cloud": hub(cpu=1.0), "a": spoke(rate=1000)})
    with pytest.raises(InfeasiblePlacement, match=r"must run at a hub need 10 cores but the largest hub, cloud, has 1"):
        solve(app, sites)


def test_local_after_multi_site_merge_is_rejected() -> None:
    app = App("t")
    merged = app.source("r").map(fn("m"))
    w = merged.window(key="k", aggs={"n": agg.count()}, size="10s", name="w")
    w.map(fn("after", scope="local")).sink(sinks.memory("o"), name="out")
    with pytest.raises(InfeasiblePlacement, match="merges the streams of 3 sites"):
        solve(app, three_spokes())


def test_hub_choice_and_one_hub_only() -> None:
    sites = make_sites(
        {"east": hub(), "west": hub(), "a": spoke(rate=100), "b": spoke(rate=100)},
        [link("a", "east", 80), link("b", "east", 80), link("a", "west", 10), link("b", "west", 15)],
    )
    app = App("t")
    app.source("r").map(fn("merge", scope="global")).sink(sinks.memory("o"), name="out")
    plan = solve(app, sites, baselines=["central", "local-first"])
    assert plan.hub == "west"
    assert plan.site_of("merge") == "west"
    assert plan.totals.worst_latency_ms == 15


def test_slo_violation_is_a_warning() -> None:
    plan = solve(heavy_local_app(), offload_sites(), slo_ms=5)
    assert any("exceeds the SLO of 5 ms" in w for w in plan.warnings)
    assert plan.slo_ms == 5


@pytest.mark.parametrize("slo_ms", [math.nan, math.inf, -5, 0])
def test_an_slo_that_is_not_a_positive_number_is_refused(slo_ms: float) -> None:
    with pytest.raises(InvalidSettings, match=f"^slo_ms must be a finite number > 0 and <= 3600000, got {slo_ms!r}"):
        solve(heavy_local_app(), offload_sites(), slo_ms=slo_ms)


def test_latency_weight_trades_traffic_for_latency() -> None:
    sites = make_sites(
        {"cloud": hub(), "a": spoke(rate=1000), "relay": spoke(cpu=4)},
        [link("a", "cloud", 200, cost=5.0), link("a", "relay", 5, cost=1.0), link("relay", "cloud", 5, cost=1.0)],
    )
    app = App("t")
    app.source("r").map(fn("parse", scope="local")).map(fn("merge", scope="global")).sink(sinks.memory("o"), name="out")
    plan = solve(app, sites)
    assert plan.site_of("parse@a") == "relay"
    assert "offloaded from a to relay" in plan.assignment("parse@a").reason


def test_mixed_streams_singletons_at_spokes_and_sinks_on_sources() -> None:
    sites = make_sites(
        {
            "cloud": {"tier": "hub", "cpu": 8, "streams": {"r": {"topic": "x", "rate": 10}}},
            "a": spoke(rate=100),
            "b": {"tier": "spoke", "cpu": 1, "streams": {"q": {"topic": "y", "rate": 1000}}},
        },
        [link("a", "cloud", 30), link("b", "cloud", 40)],
    )
    app = App("t")
    r = app.source("r")
    r.sink(sinks.memory("raw"), name="raw")
    q = app.source("q")
    q.window(key="k", aggs={"n": agg.count()}, size="10s", name="w", keys=5).sink(sinks.memory("ws"), name="ws")
    r.map(fn("p", scope="local")).union(q.map(fn("qm")), name="u").map(fn("g", scope="global")).sink(
        sinks.memory("o"), name="out"
    )
    plan = solve(app, sites)
    problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))
    assert violations(problem, placement_of(plan), plan.hub) == []
    where = placement_of(plan)
    assert where["raw@a"] == "a"
    assert where["raw@cloud"] == "cloud"
    # A window over one site's stream is a singleton that may stay at that spoke.
    assert where["w"] == "b"
    assert plan.assignment("w").group is None
    assert "cuts WAN traffic" in plan.assignment("w").reason
    assert where["p@cloud"] == "cloud"
    assert plan.assignment("p@cloud").reason == "scope @local: at its source site (a hub)"
    assert {f.src for f in plan.inputs("u@b")} == {"qm@b"}
    assert {f.src for f in plan.inputs("u@a")} == {"p@a"}
    assert {f.src for f in plan.inputs("g")} == {"u@a", "u@b", "u@cloud"}


# --- baselines, the plan, the example --------------------------------------------------------


def test_baselines_on_the_same_cost_model() -> None:
    plan = plan_app(
        EXAMPLES / "cold_chain" / "app.py", EXAMPLES / "cold_chain" / "sites.yaml", baselines=["central", "local-first"]
    )
    central = plan.baselines["central"]
    assert central.wan_bytes_per_s == pytest.approx((100 + 100 + 400) * 110)
    assert central.mean_latency_ms == pytest.approx((80 + 70 + 20) / 3)
    assert central.worst_latency_ms == 80
    assert central.objective == pytest.approx(2.0)
    local_first = plan.baselines["local-first"]
    assert local_first.wan_bytes_per_s < central.wan_bytes_per_s / 10
    assert plan.totals.objective <= min(central.objective, local_first.objective) + 1e-9
    assert central.hub_cpu > plan.totals.hub_cpu


def test_baseline_methods_and_unknown_names() -> None:
    app, sites = synthetic(10, 5, seed=1)
    central = solve(app, sites, method="central")
    assert {a.site for a in central.assignments if not a.replica.startswith("s")} == {central.hub}
    assert all(
        "baseline central" in a.reason for a in central.assignments if a.group is None and "sink" not in a.reason
    )
    first = solve(app, sites, method="local-first")
    problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))
    assert evaluate(problem, Weights(), placement_of(first)) == first.totals
    with pytest.raises(SpanEdgeError, match="unknown baseline 'edge-only'; valid: central, local-first"):
        solve(app, sites, baselines=["edge-only"])
    with pytest.raises(SpanEdgeError, match="unknown placement method 'magic'"):
        solve(app, sites, method="magic")


def test_cold_chain_plans_and_explains_itself() -> None:
    plan = plan_app(EXAMPLES / "cold_chain" / "app.py", EXAMPLES / "cold_chain" / "sites.yaml")
    assert plan.app == "cold-chain"
    assert plan.hub == "cloud"
    assert Path(plan.app_file).is_absolute()
    assert "App(" in plan.app_source
    order = [a.replica for a in plan.assignments]
    for flow in plan.flows:
        assert order.index(flow.src) < order.index(flow.dst)
        assert flow.bytes_per_s > 0
    assert {(f.src, f.dst) for f in plan.flows} >= {
        ("readings@truck-7", "to_celsius@truck-7"),
        ("unit_stats@truck-9", "anomaly"),
    }
    assert plan.site_of("unit_stats@truck-7") == "truck-7"
    assert plan.site_of("anomaly") == "cloud"
    assert all(a.reason for a in plan.assignments)
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.solver.status == "optimal"
    assert plan.solver.gap is not None
    assert plan.solver.gap <= 1e-4


def test_plan_app_rejects_unknown_baseline_before_solving(tmp_path: Path) -> None:
    with pytest.raises(SpanEdgeError, match="valid: central, local-first"):
        plan_app(tmp_path / "missing.py", tmp_path / "missing.yaml", baselines=["nope"])


@pytest.mark.parametrize("value", [-1, math.inf, math.nan, 1e7, True])
def test_weights_must_be_finite_numbers_in_range(value: float) -> None:
    with pytest.raises(
        InvalidSettings, match=f"^objective weight traffic must be a finite number >= 0 and <= 1000000, got {value!r}"
    ):
        Weights(traffic=value)
    assert Weights.of({"latency": 2}) == Weights(latency=2.0)


# --- solvers -----------------------------------------------------------------------------------


def test_cbc_fallback_finds_the_same_optimum() -> None:
    for seed in (3, 4):
        app, sites = tiny(seed)
        problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))
        highs = solve_ilp(problem, Weights(), solver="highs")
        cbc = solve_ilp(problem, Weights(), solver="cbc")
        assert (highs.solver, cbc.solver) == ("highs", "cbc")
        assert highs.placement is not None
        assert cbc.placement is not None
        assert cbc.optimal
        assert cbc.gap == 0.0
        assert objective(problem, Weights(), cbc.placement) == pytest.approx(
            objective(problem, Weights(), highs.placement), rel=1e-4
        )


def test_greedy_is_the_fallback_when_the_solver_finds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def nothing(*args: object, **kwargs: object) -> IlpResult:
        return IlpResult(None, None, "Not Solved, no solution within 10 s", False, None, 10.0, "highs")

    monkeypatch.setattr(placement.planner, "solve_ilp", nothing)
    plan = solve(heavy_local_app(), offload_sites())
    assert plan.solver.method == "greedy (ilp/highs: Not Solved, no solution within 10 s)"
    assert plan.solver.status == "heuristic"
    assert plan.site_of("parse@factory-a") == "mid"


def test_a_time_limited_solution_reports_its_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    def limited(problem: Problem, weights: Weights, time_limit: float = 10.0) -> IlpResult:
        found = solve_ilp(problem, weights, time_limit)
        return IlpResult(found.placement, found.hub, "feasible (time limit)", False, 0.02, found.seconds, "highs")

    monkeypatch.setattr(placement.planner, "solve_ilp", limited)
    plan = solve(heavy_local_app(), offload_sites())
    assert plan.solver.gap == 0.02
    assert plan.solver.status in ("feasible (time limit)", "feasible")


@pytest.mark.parametrize("example", ["cold_chain", "traffic"])
def test_examples_plan_validly(example: str) -> None:
    folder = EXAMPLES / example
    plan = plan_app(folder / "app.py", folder / "sites.yaml", baselines=["central", "local-first"])
    app, sites = load_app(folder / "app.py"), load_sites(folder / "sites.yaml")
    problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))
    assert violations(problem, placement_of(plan), plan.hub) == []
    assert plan.totals.objective <= plan.baselines["central"].objective
    assert plan.totals.wan_bytes_per_s < plan.baselines["central"].wan_bytes_per_s


def test_a_baseline_that_breaks_the_rules_is_marked_infeasible() -> None:
    from spanedge.report import plan_report, to_text

    plan = plan_app(
        EXAMPLES / "cold_chain" / "app.py", EXAMPLES / "cold_chain" / "sites.yaml", baselines=["central", "local-first"]
    )
    central, local_first = plan.baselines["central"], plan.baselines["local-first"]
    # central puts the @local operators at the hub; local-first keeps them at their sites
    assert not central.feasible
    assert any("to_celsius@truck-7 at cloud" in v for v in central.violations)
    assert local_first.feasible
    assert Plan.from_json(plan.to_json()).baselines["central"].violations == central.violations
    text = to_text(plan_report(plan, ["central", "local-first"]))
    assert "central (INFEASIBLE)" in text
    assert "central is infeasible here" in text
    assert "local-first (INFEASIBLE)" not in text
    assert "WAN traffic vs central" not in text  # an infeasible baseline's ratio is no score
    assert "WAN traffic vs local-first: 100.0%" in text


def windows_in_a_row(first_scope: str | None) -> App:
    app = App("t")
    minute = app.source("r").window(
        key="k", aggs={"n": agg.count()}, size="10s", name="minute", scope=first_scope, cost=1e-3
    )
    minute.window(key="k", aggs={"n": agg.sum("n")}, size="1m", name="hour", scope="global").sink(
        sinks.memory("o"), name="out"
    )
    return app


def test_a_window_with_a_window_after_it_never_runs_at_the_hub() -> None:
    # the source site is too small for the window and the hub is cheap to reach: the hub would win,
    # but the hub cannot chain two windows, so the window goes to the spoke nearby
    sites = make_sites(
        {"cloud": hub(), "a": spoke(cpu=0.1, rate=1000), "b": spoke(cpu=4.0)},
        [link("a", "cloud", 5), link("a", "b", 20), link("b", "cloud", 5)],
    )
    where = placement_of(solve(windows_in_a_row(None), sites))
    assert where["minute"] == "b"
    assert where["hour"] == "cloud"
    problem = build_problem(windows_in_a_row(None), sites, LatencyMatrix.from_sites(sites))
    assert "cloud" not in problem.replicas["minute"].candidates


def test_two_windows_in_a_row_that_must_both_run_at_the_hub_are_refused_with_what_to_do() -> None:
    # over three sites' readings, an unscoped window is one replica at the hub
    with pytest.raises(InfeasiblePlacement) as err:
        solve(windows_in_a_row(None), three_spokes())
    message = str(err.value)
    assert "window 'hour' (test_placement.py:" in message
    assert "the hub cannot chain two windows in one Spark query" in message
    assert "run 'minute' (test_placement.py:" in message
    assert "at the edge (scope='local')" in message
    plan = solve(windows_in_a_row("local"), three_spokes())
    assert {placement_of(plan)[f"minute@{s}"] for s in "abc"} == {"a", "b", "c"}
