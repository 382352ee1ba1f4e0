"""Placement benchmark: the integer program against the central and local-first baselines.

Synthetic instances of 10/30/100 operators over 5/20/50 sites (see
``placement.synthetic``). For each: the solve time of the whole ``solve``
call (expansion, greedy fallback, ILP, explanations; median of 3 runs, wall
clock and CPU time of this process, as the machine may be shared), the
solver status and gap, and the objective and WAN traffic of the ILP plan,
the greedy heuristic and both baselines, all on the same cost model. A
baseline that ignores capacities and so overloads a site is marked ``!``.

Re-plans: instances of about 1,000 replicas over 200 sites are planned,
then re-planned from that plan with migration costs (every window replica
holds 10 s of its input as state) and the default hysteresis, first with
nothing changed (goal: 0 moves), then after the links of ten source spokes
became six times slower. For each re-plan: wall and CPU time of ``solve``,
status, gap and the replicas moved, next to the moves the same change
causes when planned from scratch; and the integer program alone, solved
once per hub (as ``solve`` does) and, as the baseline of the same run, as
one program with a hub choice, with the relative difference of their
optima (0 when both are proven optimal).

Run: ``.venv/bin/python bench/placement.py [--seeds 3] [--replan-only]``
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# This file has the name of the package it measures: import the package from
# the repository root, not this script from its own directory.
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from placement import LatencyMatrix, Previous, Weights, solve  # noqa: E402
from placement.baselines import RULES  # noqa: E402
from placement.constraints import violations  # noqa: E402
from placement.cost import evaluate, migration, objective  # noqa: E402
from placement.ilp import solve_ilp  # noqa: E402
from placement.problem import build_problem  # noqa: E402
from placement.synthetic import synthetic  # noqa: E402
from spanedge.operators import Kind  # noqa: E402
from spanedge.plan import Plan  # noqa: E402

SIZES = ((10, 5), (30, 20), (100, 50))
REPLAN_SIZES = ((10, 200),)
#: Seconds of input a window replica holds as state.
WINDOW_STATE_S = 10.0


def run(n_ops: int, n_sites: int, seed: int, repeat: int = 3) -> list[str]:
    app, sites = synthetic(n_ops, n_sites, seed=seed)
    matrix = LatencyMatrix.from_sites(sites)
    times = []
    cpu = []
    plan = None
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        plan = solve(app, sites, latency=matrix)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    assert plan is not None
    problem = build_problem(app, sites, matrix)
    weights = Weights()
    greedy = solve(app, sites, latency=matrix, method="greedy")
    cells = [
        str(len(app.operators)),
        str(n_sites),
        str(len(problem.replicas)),
        f"{statistics.median(times):.3f}",
        f"{statistics.median(cpu):.3f}",
        plan.solver.status,
        "-" if plan.solver.gap is None else f"{plan.solver.gap:.2%}",
        f"{plan.totals.objective:.4f}",
        f"{greedy.totals.objective:.4f}",
    ]
    wan = [plan.totals.wan_bytes_per_s]
    for name in ("local-first", "central"):
        placement, hub = RULES[name](problem, weights)
        totals = evaluate(problem, weights, placement)
        overloaded = any("cores of" in v for v in violations(problem, placement, hub))
        cells.append(f"{totals.objective:.4f}{'!' if overloaded else ''}")
        wan.append(totals.wan_bytes_per_s)
    cells += [f"{w / 1e3:.1f}" for w in wan]
    return cells


def _placement(plan: Plan) -> dict[str, str]:
    return {a.replica: a.site for a in plan.assignments}


def _moved(before: Plan, after: Plan) -> int:
    old = _placement(before)
    return sum(1 for rid, site in _placement(after).items() if rid in old and old[rid] != site)


def _timed(**kwargs: Any) -> tuple[Plan, float, float]:
    start, start_cpu = time.perf_counter(), time.process_time()
    plan = solve(**kwargs)
    return plan, time.perf_counter() - start, time.process_time() - start_cpu


def _slower(sites: Any, matrix: LatencyMatrix, rng: random.Random, spokes: int = 10, factor: float = 6.0) -> Any:
    """The matrix with every link of ``spokes`` random source spokes ``factor`` times slower."""
    chosen = rng.sample(sorted(s.name for s in sites.spokes if s.streams), spokes)
    rows = [
        {"src": a, "dst": b, "latency_p50_ms": matrix.latency(a, b) * factor}
        for a in chosen
        for b in sites.sites
        if b != a
    ]
    rows += [{**r, "src": r["dst"], "dst": r["src"]} for r in list(rows)]
    return matrix.with_measurements(rows)


def _verdict(first: Plan, plan: Plan) -> str:
    if "previous plan kept" in plan.solver.status:
        return "kept (hysteresis)"
    return "same" if _moved(first, plan) == 0 else "moved"


def replan(n_ops: int, n_sites: int, seed: int) -> list[list[str]]:
    """Rows of the re-plan table for one instance: unchanged, then after a latency change."""
    app, sites = synthetic(n_ops, n_sites, seed=seed)
    matrix = LatencyMatrix.from_sites(sites)
    first = solve(app, sites, latency=matrix)
    problem = build_problem(app, sites, matrix)
    state = {
        rid: r.rate_in * r.record_bytes * WINDOW_STATE_S
        for rid, r in problem.replicas.items()
        if r.op.kind is Kind.WINDOW
    }
    previous = Previous.of(first, state)
    rows = []
    changed = _slower(sites, matrix, random.Random(seed))
    for label, latency in (("unchanged", matrix), ("latency x6", changed)):
        plan, wall, cpu = _timed(app=app, sites=sites, latency=latency, previous=previous)
        scratch = solve(app, sites, latency=latency)
        parts, one = _ilp_both(app, sites, latency, previous)
        rows.append(
            [
                f"{n_sites}/{len(problem.replicas)}",
                str(seed),
                label,
                f"{wall:.3f}",
                f"{cpu:.3f}",
                plan.solver.status.split(";")[0],
                "-" if plan.solver.gap is None else f"{plan.solver.gap:.2%}",
                str(_moved(first, plan)),
                str(_moved(first, scratch)),
                f"{sum(state.get(rid, 0.0) for rid in problem.order if _placement(first)[rid] != _placement(plan)[rid]) / 1e3:.0f}",
                _verdict(first, plan),
                f"{parts[0]:.3f}",
                f"{one[0]:.3f}",
                f"{(parts[1] - one[1]) / one[1]:+.1e}",
            ]
        )
    return rows


def _ilp_both(app: Any, sites: Any, latency: LatencyMatrix, previous: Previous) -> tuple[tuple[float, float], ...]:
    """CPU seconds and optimum (migration included) of the integer program per hub, then as one program."""
    problem = build_problem(app, sites, latency, previous.placement)
    weights = Weights()
    out = []
    for per_hub in (True, False):
        start = time.process_time()
        found = solve_ilp(problem, weights, previous=previous, per_hub=per_hub)
        seconds = time.process_time() - start
        assert found.placement is not None, found.status
        out.append(
            (
                seconds,
                objective(problem, weights, found.placement) + migration(problem, weights, previous, found.placement),
            )
        )
    return tuple(out)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    """Print the benchmark table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="instances per size")
    parser.add_argument("--replan-only", action="store_true", help="only the re-plan table")
    args = parser.parse_args()
    if not args.replan_only:
        fresh(args.seeds)
    rows = [
        row for n_ops, n_sites in REPLAN_SIZES for seed in range(args.seeds) for row in replan(n_ops, n_sites, seed)
    ]
    header = [
        "sites/replicas",
        "seed",
        "re-plan",
        "s",
        "cpu s",
        "status",
        "gap",
        "moves",
        "from scratch",
        "state kB",
        "plan",
        "ilp per hub cpu s",
        "one program cpu s",
        "optimum vs one",
    ]
    print("\nre-plans from a previous plan, with migration costs and hysteresis:")
    print(table(rows, header))
    per_hub = sum(float(r[-3]) for r in rows)
    one = sum(float(r[-2]) for r in rows)
    print(
        f"integer program: {per_hub:.2f} s per hub against {one:.2f} s as one program (CPU, all re-plans), {one / per_hub:.1f}x"
    )
    _load()


def fresh(seeds: int) -> None:
    """Print the table of plans made from scratch."""
    header = [
        "ops",
        "sites",
        "replicas",
        "ilp s",
        "cpu s",
        "status",
        "gap",
        "ilp obj",
        "greedy",
        "local-first",
        "central",
        "ilp kB/s",
        "l-f kB/s",
        "central kB/s",
    ]
    rows = []
    for n_ops, n_sites in SIZES:
        for seed in range(seeds):
            rows.append(run(n_ops, n_sites, seed))
    print(table(rows, header))
    print(
        "\nobjective: lower is better (1.0 = all raw bytes over the WAN once, or one hop to the hub);"
        " '!' = the baseline overloads a site's CPU."
    )


def _load() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average during the run: {load:.2f}")


if __name__ == "__main__":
    main()
