"""Handover: what a lossless move costs and buys, against the same run with the plan kept fixed.

Runs the smart farm (``examples/smart_farm``) twice with the same seeded
sensor data and the same fault, the barn's links slowed to 300 ms at 20 s:

* **move**: managed by the hub, which re-plans and moves field-east's
  offloaded windows away from the barn, each with a handover;
* **fixed**: the same ILP plan run standalone, so nothing moves and the
  barn keeps field-east's windows behind its slow links.

It prints each move (the replica, its sites, the state it held at the old
site and the seconds from the re-plan until the hub had everything the old
owner owed) and, side by side, the result latencies, WAN bytes and what
the checker found (lost, duplicated, wrong)::

    python bench/handover.py --duration 80
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulate.report import Report

ROOT = Path(__file__).resolve().parent.parent
FAULT = "latency:barn:300@20s"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def _moves(run_dir: Path, t0: float) -> list[dict[str, Any]]:
    """Every move in the hub's plan history of a run, with when it was planned (seconds after ``t0``)."""
    path = run_dir / "placement.json"
    if not path.exists():
        return []
    history = json.loads(path.read_text()).get("history") or []
    return [{"at": h["at"] - t0, "reason": h.get("reason", ""), **m} for h in history[1:] for m in h.get("moved") or []]


def _checked(report: Report) -> str:
    text = f"{report.lost} / {report.duplicates} / {report.wrong}"
    return text if report.drained else text + " (not drained)"


def _rows(move: Report, fixed: Report) -> list[tuple[str, str, str, str]]:
    rows = []
    for tier in ("local", "global"):
        for q in ("p50", "p99"):
            a, b = (getattr(getattr(r, f"{tier}_latency"), q) for r in (move, fixed))
            if a is not None or b is not None:  # the smart farm's local results are valve commands: no window end
                rows.append((f"{tier} result {q} ms", _ms(a), _ms(b), _ratio(a, b)))
    rows.append(("WAN bytes", f"{move.wan_total:,}", f"{fixed.wan_total:,}", _ratio(move.wan_total, fixed.wan_total)))
    rows.append(("lost / duplicated / wrong", _checked(move), _checked(fixed), ""))
    return rows


def _print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for i, row in enumerate([header, *rows]):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=80.0, help="seconds of sensor data per run")
    parser.add_argument("--fault", default=FAULT, help="the fault that makes the hub re-plan")
    parser.add_argument(
        "--run-dir", type=Path, default=ROOT / ".spanedge" / "bench" / "handover", help="replaced on every run"
    )
    args = parser.parse_args()
    shutil.rmtree(args.run_dir, ignore_errors=True)  # an earlier run's brokers and agents would start from their state

    sys.path.insert(0, str(ROOT))  # before bench/, whose placement.py would shadow the placement package
    from simulate.runner import Options, run

    example = ROOT / "examples" / "smart_farm"
    base = Options(sites=example / "sites.yaml", app=example / "app.py", duration=args.duration, faults=[args.fault])

    async def both() -> list[Any]:
        return [
            await run(replace(base, mode=mode, label=label, run_dir=args.run_dir / label))
            for mode, label in (("managed", "move"), ("standalone", "fixed"))
        ]

    moved, fixed = asyncio.run(both())
    print(f"smart farm, {args.duration:.0f} s of probe data per run, fault {args.fault}; the same seeded data")
    moves = _moves(moved.run_dir, moved.started_at)
    if moves:
        _print_table(
            ("move", "planned at s", "state bytes", "handover s"),
            [
                (
                    f"{m['replica']} {m['from']} -> {m['to']}",
                    f"{m['at']:.1f}",
                    f"{m['state_bytes']:,}" if isinstance(m.get("state_bytes"), int) else "-",
                    f"{m['handover_s']:.1f}" if isinstance(m.get("handover_s"), int | float) else "-",
                )
                for m in moves
            ],
        )
    else:
        print("no move: the hub did not re-plan within the run (see the move run's events.log)")
    print()
    _print_table(("measure", "move", "fixed plan", "ratio"), _rows(moved.report, fixed.report))
    print("latency of window results: arrival at the simulator minus window_end (includes the watermark delay)")
    print("handover s: from the re-plan until the hub's log held everything the old owner said it owed")
    for report in (moved.report, fixed.report):
        for problem in report.problems:
            print(f"[{report.label}] {problem}")


if __name__ == "__main__":
    main()
