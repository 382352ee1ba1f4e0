"""Turn an app and its sites into a :class:`~spanedge.plan.Plan`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from placement.baselines import BASELINES, RULES
from placement.constraints import diagnose, explain_infeasible, violations
from placement.cost import Weights, evaluate, migration, moves, objective
from placement.explain import fmt_bytes, reasons
from placement.greedy import greedy
from placement.ilp import solve_ilp
from placement.latency import LatencyMatrix
from placement.problem import Previous, Problem, build_problem
from placement.split import Place, Split, capped, cut_of, part_load, part_traffic, search, splittable
from spanedge.app import App
from spanedge.errors import InfeasiblePlacement, SpanEdgeError
from spanedge.keyrange import describe
from spanedge.loader import load_app
from spanedge.placement_settings import check_slo_ms
from spanedge.plan import Assignment, Flow, KeyPart, Plan, SolverInfo, Totals
from spanedge.sites import Sites, load_sites

METHODS = ("ilp", "greedy", *BASELINES)


def _check_names(names: Sequence[str], valid: Sequence[str], what: str) -> None:
    for name in names:
        if name not in valid:
            msg = f"unknown {what} {name!r}; valid: {', '.join(valid)}"
            raise SpanEdgeError(msg)


def solve(
    app: App,
    sites: Sites,
    *,
    latency: LatencyMatrix | None = None,
    weights: Weights = Weights(),  # noqa: B008 - frozen dataclass
    slo_ms: float | None = None,
    method: str = "ilp",
    time_limit: float = 10.0,
    version: int = 1,
    baselines: Sequence[str] = (),
    previous: Previous | None = None,
) -> Plan:
    """Place ``app`` on ``sites`` and return the plan, with the totals of the requested baselines.

    ``method`` is ``ilp`` (the integer program, with the greedy heuristic as
    fallback), ``greedy``, ``central`` or ``local-first``. Raises
    :class:`~spanedge.errors.InfeasiblePlacement` naming the binding
    constraint if no placement fits, and
    :class:`~spanedge.errors.InvalidSettings` for an ``slo_ms`` out of its
    range (:func:`spanedge.placement_settings.check_slo_ms`).

    With a ``previous`` plan (a re-plan), the ILP weighs the migration of
    every moved replica's state, and the previous placement is kept unless
    the new one's objective, migration included, is lower by more than
    ``previous.hysteresis``; the solver status says which it was.
    """
    _check_names([method], METHODS, "placement method")
    _check_names(baselines, BASELINES, "baseline")
    slo_ms = check_slo_ms(slo_ms)
    start = time.perf_counter()
    streams = app.source_streams()
    sites.check_app_streams(streams, app.name)
    matrix = latency or LatencyMatrix.from_sites(sites)
    problem = build_problem(app, sites, matrix, previous.placement if previous is not None else None)
    unsplit = problem
    parts: tuple[KeyPart, ...] = ()
    if method in RULES:
        placement, hub = RULES[method](problem, weights)
        info = SolverInfo(method, "baseline", time.perf_counter() - start, None)
        totals = evaluate(problem, weights, placement)
    else:

        def place(p: Problem) -> tuple[dict[str, str], str, SolverInfo]:
            return _place(p, weights, method, time_limit, start, previous)

        found = _placed(app, sites, matrix, weights, problem, place, previous)
        if isinstance(found, Split):
            problem, placement, hub, info, parts = found.problem, found.placement, found.hub, found.info, (found.part,)
            totals = _with_part(evaluate(problem, weights, placement), found)
        else:
            placement, hub, info = found
            totals = evaluate(problem, weights, placement)
    why = reasons(problem, weights, placement, hub, method)
    for part in parts:
        why[part.replica] += f"; split by key: {describe(0, part.keys_from)} here, the others at {part.site}"
    assignments = tuple(
        Assignment(rid, problem.replicas[rid].op.name, problem.replicas[rid].group, placement[rid], why[rid])
        for rid in problem.order
    )
    flows = tuple(Flow(e.src, e.dst, e.rate, e.bytes_per_s) for e in problem.edges)
    compared = {name: _baseline(unsplit, weights, name) for name in baselines}
    warnings = _warnings(problem, placement, hub, totals.worst_latency_ms, slo_ms)
    return Plan(
        app=app.name,
        version=version,
        hub=hub,
        assignments=assignments,
        flows=flows,
        totals=totals,
        solver=info,
        baselines=compared,
        slo_ms=slo_ms,
        warnings=tuple(warnings),
        parts=parts,
    )


def _place(
    problem: Problem, weights: Weights, method: str, time_limit: float, start: float, previous: Previous | None
) -> tuple[dict[str, str], str, SolverInfo]:
    """Place ``problem`` (the ILP or greedy, then the hysteresis in a re-plan); raise InfeasiblePlacement."""
    diagnose(problem)
    placement, hub, info = _optimise(problem, weights, method, time_limit, start, previous)
    if previous is not None:
        placement, hub, info = _hysteresis(problem, weights, previous, placement, hub, info)
    return placement, hub, info


def _placed(
    app: App,
    sites: Sites,
    matrix: LatencyMatrix,
    weights: Weights,
    problem: Problem,
    place: Place,
    previous: Previous | None,
) -> tuple[dict[str, str], str, SolverInfo] | Split:
    """Place ``problem``; if nothing fits, split a keyed window in two by key (:mod:`placement.split`).

    A re-plan of a split placement merges the replica back once one site
    carries it, unless keeping the split is within the hysteresis.
    """
    try:
        placement, hub, info = place(problem)
    except InfeasiblePlacement:
        found = search(app, sites, matrix, weights, problem, place, previous)
        if found is None:
            raise
        status = f"{found.info.status}; split {found.part.replica} by key across {found.placement[found.part.replica]} and {found.part.site}"
        return replace(found, info=replace(found.info, status=status))
    if previous is None or not previous.parts:
        return placement, hub, info
    kept = _kept_split(app, sites, matrix, weights, previous, place)
    after = _with_migration(problem, weights, previous, placement)
    if kept is not None and kept.score > 0 and (kept.score - after) / kept.score <= previous.hysteresis:
        gain = (kept.score - after) / kept.score
        status = (
            f"{info.status}; split of {kept.part.replica} kept (merging gains {gain:.1%} <= {previous.hysteresis:.1%})"
        )
        return replace(kept, info=replace(kept.info, status=status))
    merged = ", ".join(p.replica for p in previous.parts)
    return placement, hub, replace(info, status=f"{info.status}; {merged} merged back (one site carries it)")


def _kept_split(
    app: App, sites: Sites, matrix: LatencyMatrix, weights: Weights, previous: Previous, place: Place
) -> Split | None:
    """The previous plan's split placement, if it still fits."""
    part = previous.parts[0]
    unsplit = build_problem(app, sites, matrix, previous.placement)
    if part.replica not in unsplit.replicas or part.replica not in splittable(unsplit):
        return None
    cut = cut_of(part.replica, previous)
    if cut is None or cut.at != part.keys_from:
        return None  # the records no longer divide at the previous cut
    need = part_load(unsplit, part.replica, cut.kept)
    left = sites.sites[part.site].cpu - need if part.site in sites.sites else 0.0
    if left <= 0:
        return None
    problem = build_problem(
        app, capped(sites, part.site, left), matrix, previous.placement, shares={part.replica: cut.kept}
    )
    kept = kept_placement(problem, previous)
    if kept is None or kept[0][part.replica] == part.site:
        return None
    cost, wan = part_traffic(problem, weights, kept[0], part.replica, part.site, cut.kept)
    score = objective(problem, weights, kept[0]) + cost
    info = SolverInfo("ilp", "previous plan kept", 0.0, None)
    return Split(problem, kept[0], kept[1], info, part, cost, wan, score)


def _with_part(totals: Totals, found: Split) -> Totals:
    """``totals`` with the traffic of a split's part."""
    return replace(
        totals,
        wan_bytes_per_s=totals.wan_bytes_per_s + found.extra_wan,
        objective=totals.objective + found.extra_objective,
    )


def _optimise(
    problem: Problem, weights: Weights, method: str, time_limit: float, start: float, previous: Previous | None = None
) -> tuple[dict[str, str], str, SolverInfo]:
    if method == "greedy":
        quick = greedy(problem, weights)
        if quick is None:
            raise explain_infeasible(problem, "the greedy heuristic found no placement; try method='ilp'")
        return quick[0], quick[1], SolverInfo("greedy", "heuristic", time.perf_counter() - start, None)
    result = (
        solve_ilp(problem, weights, time_limit)
        if previous is None
        else solve_ilp(problem, weights, time_limit, previous=previous)
    )
    # The heuristic is a fallback: it runs only when the solver proved no optimum.
    quick = None if result.optimal or result.infeasible else greedy(problem, weights)
    seconds = time.perf_counter() - start
    if result.placement is None or result.hub is None:
        if quick is None or result.infeasible:
            raise explain_infeasible(problem, result.status)
        return (
            quick[0],
            quick[1],
            SolverInfo(f"greedy (ilp/{result.solver}: {result.status})", "heuristic", seconds, None),
        )
    if not result.optimal and quick is not None:
        found = _with_migration(problem, weights, previous, result.placement)
        heuristic = _with_migration(problem, weights, previous, quick[0])
        if heuristic < found - 1e-9:
            gap = None if result.bound is None else max(0.0, (heuristic - result.bound) / max(abs(heuristic), 1e-12))
            info = SolverInfo(f"greedy (ilp/{result.solver}: {result.status})", "feasible", seconds, gap)
            return quick[0], quick[1], info
    return result.placement, result.hub, SolverInfo(f"ilp/{result.solver}", result.status, seconds, result.gap)


def _with_migration(problem: Problem, weights: Weights, previous: Previous | None, placement: dict[str, str]) -> float:
    """The objective of ``placement``, plus the migration term in a re-plan."""
    extra = migration(problem, weights, previous, placement) if previous is not None else 0.0
    return objective(problem, weights, placement) + extra


def kept_placement(problem: Problem, previous: Previous) -> tuple[dict[str, str], str] | None:
    """The previous placement as a complete placement of ``problem`` and its hub, or ``None`` if it breaks a rule.

    It breaks one when a replica is new or its site is no longer a candidate
    (the app or the sites changed), or a site would be over its CPU budget.
    """
    chosen: dict[str, str] = {}
    for r in problem.decisions():
        site = previous.placement.get(r.id)
        if site is None:
            return None
        chosen[r.id] = site
    full = problem.resolve(chosen)
    used = sorted({s for rid, s in chosen.items() if problem.is_hub(s)})
    hub = used[0] if used else (previous.hub if previous.hub in problem.hubs else problem.hubs[0])
    if violations(problem, full, hub):
        return None
    return full, hub


def _hysteresis(
    problem: Problem,
    weights: Weights,
    previous: Previous,
    placement: dict[str, str],
    hub: str,
    info: SolverInfo,
) -> tuple[dict[str, str], str, SolverInfo]:
    """Keep the previous placement unless ``placement`` improves the objective by more than the hysteresis."""
    moved = moves(problem, previous, placement)
    kept = kept_placement(problem, previous)
    if not moved or kept is None:
        return placement, hub, info
    before = objective(problem, weights, kept[0])
    after = _with_migration(problem, weights, previous, placement)
    gain = (before - after) / before if before > 0 else 0.0
    if gain > previous.hysteresis:
        status = f"{info.status}; {len(moved)} replicas move (gain {gain:.1%} > {previous.hysteresis:.1%})"
        return placement, hub, replace(info, status=status)
    status = f"{info.status}; previous plan kept (gain {gain:.1%} <= {previous.hysteresis:.1%})"
    return kept[0], kept[1], replace(info, status=status)


def _warnings(problem: Problem, placement: dict[str, str], hub: str, worst: float, slo_ms: float | None) -> list[str]:
    out: list[str] = []
    if slo_ms is not None and worst > slo_ms:
        out.append(
            f"worst source-to-sink latency {worst:.0f} ms exceeds the SLO of {slo_ms:.0f} ms; "
            "raise latency_weight, add closer hubs, or relax the SLO"
        )
    per_link: dict[tuple[str, str], float] = {}
    for e in problem.edges:
        a, b = placement[e.src], placement[e.dst]
        if a != b:
            per_link[a, b] = per_link.get((a, b), 0.0) + e.bytes_per_s
    for (a, b), load in sorted(per_link.items()):
        mbps = load * 8 / 1e6
        capacity = problem.latency.bandwidth(a, b)
        if mbps > capacity:
            out.append(f"link {a} -> {b} carries {fmt_bytes(load)} ({mbps:.3g} Mbit/s) but has {capacity:.3g} Mbit/s")
    broken = violations(problem, placement, hub)
    if broken:
        out.append("this placement breaks: " + "; ".join(broken[:5]))
    return out


def plan_app(
    app_file: Path,
    sites_file: Path,
    *,
    latency_file: Path | None = None,
    slo_ms: float | None = None,
    traffic_weight: float = 1.0,
    latency_weight: float = 1.0,
    baselines: Sequence[str] = (),
    app_name: str | None = None,
) -> Plan:
    """Load an app file and a ``sites.yaml`` (and measured latencies, if given) and plan the app."""
    _check_names(baselines, BASELINES, "baseline")
    app_path = Path(app_file).resolve()
    app = load_app(app_path, app_name)
    sites = load_sites(sites_file)
    matrix = LatencyMatrix.from_sites(sites)
    if latency_file is not None:
        matrix = matrix.with_measurements(Path(latency_file))
    plan = solve(
        app,
        sites,
        latency=matrix,
        weights=Weights(traffic_weight, latency_weight),
        slo_ms=slo_ms,
        baselines=baselines,
    )
    return replace(plan, app_file=str(app_path), app_source=app_path.read_text())


__all__ = ["METHODS", "plan_app", "solve"]


def _baseline(problem: Problem, weights: Weights, name: str) -> Totals:
    """A baseline's totals, with the rules of the problem it breaks (capacities, scopes)."""
    placement, hub = RULES[name](problem, weights)
    return replace(evaluate(problem, weights, placement), violations=tuple(violations(problem, placement, hub)))
