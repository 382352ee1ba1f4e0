"""Placement benchmark: the integer program against the central and local-first baselines.

Synthetic instances of 10/30/100 operators over 5/20/50 sites (see
``placement.synthetic``). For each: the solve time of the whole ``solve``
call (expansion, greedy fallback, ILP, explanations; median of 3 runs, wall
clock and CPU time of this process, as the machine may be shared), the
solver status and gap, and the objective and WAN traffic of the ILP plan,
the greedy heuristic and both baselines, all on the same cost model. A
baseline that ignores capacities and so overloads a site is marked ``!``.

Run: ``.venv/bin/python bench/placement.py [--seeds 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# This file has the name of the package it measures: import the package from
# the repository root, not this script from its own directory.
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from placement import LatencyMatrix, Weights, solve  # noqa: E402
from placement.baselines import RULES  # noqa: E402
from placement.constraints import violations  # noqa: E402
from placement.cost import evaluate  # noqa: E402
from placement.problem import build_problem  # noqa: E402
from placement.synthetic import synthetic  # noqa: E402

SIZES = ((10, 5), (30, 20), (100, 50))


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


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    """Print the benchmark table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="instances per size")
    args = parser.parse_args()
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
        for seed in range(args.seeds):
            rows.append(run(n_ops, n_sites, seed))
    print(table(rows, header))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nobjective: lower is better (1.0 = all raw bytes over the WAN once, or one hop to the hub);"
        f" '!' = the baseline overloads a site's CPU. load average during the run: {load:.2f}"
    )


if __name__ == "__main__":
    main()
