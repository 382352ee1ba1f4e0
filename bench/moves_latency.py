"""Moves and the hub's windows: how late the farm-wide results come before, during and after a move.

Runs the smart farm (``examples/smart_farm``) managed by the hub, with the
barn's links slowed to 300 ms at 50 s so that the hub moves field-east's
offloaded replicas away from the barn, and its farm-wide window made short
(5 s by default instead of 30 s) so that enough of its windows end in each
phase to count. The first 40 s are left out (``--warmup``): a hub query's
first micro-batches on a busy machine take many seconds while Spark warms up,
which is no steady state. Each farm-wide result's delay is its arrival at the
simulator minus its window's end. The results are split by where their
window ends:

* **steady**: after the warm-up and before the re-plan that moves: the
  baseline, measured in the same run;
* **needs the old owner**: the windows that start before the switch T and end
  at or after it: their records before T come from the old owner, and only a
  record at or after T closes them, so they wait for its last records
  (:mod:`hub.handover.holds`);
* **during**: the other windows ending from the re-plan until one window past
  the moment the hub had everything the old owner owed;
* **after**: the later ones.

It prints each phase's p50 and p95 beside the steady state and the excess
over it, and what the checker found (lost, duplicated, wrong)::

    python bench/moves_latency.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
FAULT = "latency:barn:300@50s"
FARM_WINDOW = 'size="30s"'
PHASES = ("steady", "needs the old owner", "during", "after")


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _write_inputs(directory: Path, window_s: float, settle_s: float, warmup_s: float) -> tuple[Path, Path]:
    """The smart farm's sites (``settle`` and ``warmup`` set) and app (farm-wide window of ``window_s``) in ``directory``."""
    example = ROOT / "examples" / "smart_farm"
    text = (example / "app.py").read_text()
    if text.count(FARM_WINDOW) != 1:
        sys.exit(f"examples/smart_farm/app.py changed: {FARM_WINDOW} not found once; update bench/moves_latency.py")
    directory.mkdir(parents=True, exist_ok=True)
    app = directory / "app.py"
    app.write_text(text.replace(FARM_WINDOW, f'size="{window_s:g}s"'))
    data = yaml.safe_load((example / "sites.yaml").read_text())
    data["simulation"]["settle"] = f"{settle_s:g}s"
    data["simulation"]["warmup"] = f"{warmup_s:g}s"
    sites = directory / "sites.yaml"
    sites.write_text(yaml.safe_dump(data, sort_keys=False))
    return sites, app


def _move(run_dir: Path) -> dict[str, Any] | None:
    """The first re-plan that moved something: when, the switch, and when the hub had all the old owner owed."""
    path = run_dir / "placement.json"
    history = json.loads(path.read_text()).get("history") or [] if path.exists() else []
    for entry in history[1:]:
        moved = entry.get("moved") or []
        if entry.get("changed") and moved:
            switches = [m["switch_at"] for m in moved if isinstance(m.get("switch_at"), int | float)]
            switch = min(switches, default=entry["at"])
            done = [m["handed_over_at"] for m in moved if isinstance(m.get("handed_over_at"), int | float)]
            return {"at": entry["at"], "switch": switch, "done": max(done) if done else None, "moved": moved}
    return None


def phase_of(end: float, start: float, move: dict[str, Any], window_s: float, steady_from: float) -> str | None:
    """The phase of a window ``[start, end)`` around ``move`` (see the module's docstring); None in the warm-up."""
    if end < steady_from:
        return None
    if end < move["at"]:
        return "steady"
    if start < move["switch"] <= end:
        return "needs the old owner"
    done = move["done"] if move["done"] is not None else move["switch"]
    return "during" if end <= max(done, move["switch"]) + window_s else "after"


def delays(outcome: Any, move: dict[str, Any], window_s: float) -> dict[str, list[float]]:
    """Each farm-wide window's delay (first arrival minus its end), in seconds, by phase."""
    first: dict[tuple[str, float], Any] = {}
    for r in outcome.collector.results:
        if r.sink != "farm_dashboard" or not isinstance(r.value, dict):
            continue
        key = (str(r.value.get("zone")), float(r.value["window_start"]))
        first.setdefault(key, r)
    out: dict[str, list[float]] = {p: [] for p in PHASES}
    steady_from = outcome.started_at + outcome.report.warmup
    for r in first.values():
        end, start = float(r.value["window_end"]), float(r.value["window_start"])
        phase = phase_of(end, start, move, window_s, steady_from)
        if phase is not None:
            out[phase].append(r.received_at - end)
    return out


def _print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for i, row in enumerate([header, *rows]):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=110.0, help="seconds of sensor data")
    parser.add_argument("--warmup", type=float, default=40.0, help="seconds left out at the start")
    parser.add_argument("--fault", action="append", help=f"a fault that makes the hub re-plan (default {FAULT})")
    parser.add_argument("--window", type=float, default=5.0, help="the farm-wide window's size in seconds")
    parser.add_argument(
        "--run-dir", type=Path, default=ROOT / ".spanedge" / "bench" / "moves-latency", help="replaced on every run"
    )
    args = parser.parse_args()
    faults = args.fault or [FAULT]
    shutil.rmtree(args.run_dir, ignore_errors=True)  # an earlier run's brokers and agents would start from their state

    sys.path.insert(0, str(ROOT))  # before bench/, whose placement.py would shadow the placement package
    from simulate.runner import Options, run

    sites, app = _write_inputs(args.run_dir / "inputs", args.window, settle_s=3 * args.window, warmup_s=args.warmup)
    opts = Options(sites=sites, app=app, duration=args.duration, faults=faults, mode="managed", run_dir=args.run_dir)
    outcome = asyncio.run(run(opts))
    report = outcome.report
    t0 = outcome.started_at
    print(f"smart farm, {args.duration:.0f} s of probe data, farm-wide window {args.window:g} s, faults {faults}")
    move = _move(outcome.run_dir)
    if move is None:
        print("no move: the hub did not re-plan within the run (see events.log in the run directory)")
        return
    done = "never" if move["done"] is None else f"{move['done'] - t0:.1f} s"
    replicas = ", ".join(sorted(f"{m['replica']} {m['from']}->{m['to']}" for m in move["moved"]))
    print(f"moved {replicas}")
    print(
        f"re-planned at {move['at'] - t0:.1f} s, switch T at {move['switch'] - t0:.1f} s, old owner's part in: {done}"
    )
    by_phase = delays(outcome, move, args.window)
    steady = by_phase["steady"]
    base = {q: _percentile(steady, q) for q in (50, 95)}
    rows = []
    for phase in PHASES:
        values = by_phase[phase]
        p50, p95 = _percentile(values, 50), _percentile(values, 95)
        over = "-" if p95 is None or base[95] is None else f"{p95 - base[95]:+.2f}"
        rows.append((phase, str(len(values)), _s(p50), _s(p95), _s(base[50]), _s(base[95]), over))
    print()
    _print_table(("windows ending", "n", "p50 s", "p95 s", "steady p50", "steady p95", "p95 - steady p95"), rows)
    print("delay: a farm-wide result's arrival at the simulator minus its window's end")
    print(f"lost / duplicated / wrong: {report.lost} / {report.duplicates} / {report.wrong}", end="")
    print("" if report.drained else " (not drained)")
    for problem in report.problems:
        print(f"problem: {problem}")


if __name__ == "__main__":
    main()
