"""Hub failover: the time from SIGKILL of the leading hub to the first global result of the new leader.

    .venv/bin/python bench/failover.py [--dsn postgresql://...] [--kill-at 60] [--duration 120] [--run-dir DIR]

One simulated run of the cold-chain example (3 spokes, real Mosquitto and
Spark in local mode) with two hubs on ``--ha`` and a warm standby: the
leader's process group, Spark included, is SIGKILLed at ``--kill-at``
seconds. Every 10 s window of every unit goes to a hub sink (the example's
global filter passes all of them), so global results arrive all the time.

Printed, from the same run:

* steady state (the baseline): the latency of the global results received
  before the kill, from the end of their window to their arrival (p50, p99),
  and the largest gap between two global results then;
* failover: from the kill to the standby's ``leads under epoch 2`` line in
  its log, and to the first global result received after that line (one
  the killed leader published just before the kill can arrive after it);
* whether every result arrived once and exact.

The goal is a first global result within 15 s of the kill. Without
``--dsn`` the bench uses the tests' PostgreSQL (``tests/postgres.py``: the
machine's, or one it starts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]  # not bench/hub.py
COLD_CHAIN = ROOT / "examples" / "cold_chain"
GOAL_S = 15.0
GLOBAL_SINK = "fleet_alerts"
ANOMALY = 'return not 0.0 <= stats["mean_c"] <= 8.0'


@contextlib.contextmanager
def database(dsn: str | None) -> Iterator[str]:
    """``dsn``, or an empty database on the tests' PostgreSQL server, dropped afterwards."""
    if dsn is not None:
        yield dsn
        return
    from tests.postgres import postgres_server

    with postgres_server() as server, server.database() as own:
        yield own


def app_file(directory: Path) -> Path:
    """The cold-chain app with a global filter that passes every window, so the hub sink gets them all."""
    text = (COLD_CHAIN / "app.py").read_text()
    if ANOMALY not in text:
        msg = f"examples/cold_chain/app.py changed: {ANOMALY!r} not found"
        raise SystemExit(msg)
    path = directory / "app.py"
    path.write_text(text.replace(ANOMALY, 'return stats["n"] >= 0'))
    return path


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def took_over_at(log: Path) -> float | None:
    """Wall-clock time of the ``leads under epoch 2`` line of a hub's log (its timestamp, local time)."""
    for line in log.read_text(errors="replace").splitlines():
        if "leads under epoch 2" in line:
            stamp = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
            if stamp is not None:
                return datetime.strptime(stamp[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def figures(outcome: Any) -> dict[str, Any]:
    """The bench's figures from a run's outcome."""
    kill = next(m for m in outcome.timeline.marks if m.kind == "fault" and m.label.startswith("kill-hub"))
    killed_at = outcome.started_at + kill.t
    results = sorted((r for r in outcome.collector.results if r.sink == GLOBAL_SINK), key=lambda r: r.received_at)
    before = [r for r in results if r.received_at < killed_at]
    after = [r for r in results if r.received_at >= killed_at]
    latencies = [r.received_at - float(r.value["window_end"]) for r in before]
    arrivals = [r.received_at for r in before]
    logs = outcome.run_dir / "logs"
    # whichever hub won the first election was killed: the other one's log has the line
    stamps = (took_over_at(logs / f"{h}.log") for h in ("hub-b", "hub") if (logs / f"{h}.log").exists())
    new_leader = next((t for t in stamps if t is not None), None)
    # a result the killed leader published just before the kill can arrive just after it
    led = [r for r in after if new_leader is None or r.received_at >= new_leader]
    return {
        "steady": (percentile(latencies, 50), percentile(latencies, 99)) if latencies else None,
        "gap": max((b - a for a, b in itertools.pairwise(arrivals)), default=None),
        "takeover": None if new_leader is None else new_leader - killed_at,
        "first": led[0].received_at - killed_at if led else None,
        "exact": outcome.report.lost == 0 and outcome.report.duplicates == 0 and not outcome.report.problems,
        "count": (len(before), len(after)),
    }


def main() -> None:
    """Run once and print the figures."""
    from simulate.runner import Options, run

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn", help="the PostgreSQL database the hubs share [default: the tests' server]")
    parser.add_argument("--kill-at", type=float, default=60.0, help="seconds after the sensors start")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of sensor data")
    parser.add_argument("--run-dir", type=Path, help="keep the run's logs and report here [default: a temporary one]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spanedge-failover-") as tmp, database(args.dsn) as dsn:
        directory = args.run_dir or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        opts = Options(
            sites=COLD_CHAIN / "sites.yaml",
            app=app_file(directory),
            duration=args.duration,
            faults=[f"kill-hub@{args.kill_at:g}s"],
            mode="managed",
            run_dir=directory / "run",
            ha=dsn,
        )
        started = time.monotonic()
        outcome = asyncio.run(run(opts))
        found = figures(outcome)
    steady, gap = found["steady"], found["gap"]
    print(f"cold_chain, two hubs with --ha (warm standby, 10 s lease), leader SIGKILLed at {args.kill_at:g} s")
    print(f"run took {time.monotonic() - started:.0f} s; global results before/after the kill: {found['count']}")
    if steady is not None:
        print(f"steady state: global result latency p50 {steady[0]:.2f} s, p99 {steady[1]:.2f} s; ", end="")
        print(f"largest gap between global results {gap:.1f} s" if gap is not None else "one result only")
    for label, key in (("kill -> new leader leads", "takeover"), ("kill -> first global result", "first")):
        value = found[key]
        print(f"{label}: {'-' if value is None else f'{value:.1f} s'}")
    first = found["first"]
    verdict = "met" if first is not None and first < GOAL_S else "missed"
    print(f"goal: first global result within {GOAL_S:g} s of the kill: {verdict}")
    print(f"every result once and exact: {'yes' if found['exact'] else 'no'}")
    latency = outcome.report.global_latency
    if latency.p50 is not None and latency.p99 is not None:
        print(
            f"global result latency over the whole run: p50 {latency.p50 / 1000:.2f} s, p99 {latency.p99 / 1000:.2f} s"
        )


if __name__ == "__main__":
    main()
