"""Chaos run: the smart farm under a seeded random mix of faults, checked exact, with each process's growth.

    .venv/bin/python bench/chaos.py [--seed 1] [--duration 900] [--ha] [--dsn postgresql://...] [--run-dir DIR]

One simulated run of ``examples/smart_farm`` (real Mosquitto, Spark in local
mode) with ``--chaos SEED`` (:mod:`simulate.chaos`): partitions, agent
kills, broker restarts, latency drift and the moves it causes, overloads,
and the hub's leader killed and paused, every one healed before the last
45 s. With ``--ha`` two hubs share a PostgreSQL database (``--dsn``, or the
tests' server) and the hub faults hit the leader.

Printed, from the same run: each fault and what it did (the run's events),
lost / duplicated / wrong results, and for each long-lived process (brokers,
hubs, agents, their children) its resident memory and open files once the
warm-up is over (the baseline) and at the end, with the ratio; the goal is
0 / 0 / 0 and every process within 10% of its baseline. A process started
again by a fault is compared with its own figures after the warm-up that
follows its start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]
FARM = ROOT / "examples" / "smart_farm"
GROWTH_GOAL = 1.10
WARMUP_S = 30.0


@dataclass
class Figures:
    """One process's resident memory and open files over the run, as ``(time, rss, open files)`` samples."""

    name: str
    started: float
    samples: list[tuple[float, int, int]] = field(default_factory=list)

    def at(self, moment: float) -> tuple[int, int] | None:
        """The last sample taken at or before ``moment`` (epoch seconds), if any."""
        before = [s for s in self.samples if s[0] <= moment]
        return (before[-1][1], before[-1][2]) if before else None

    def after(self, moment: float) -> tuple[int, int] | None:
        """The first sample taken at or after ``moment``, if any."""
        later = [s for s in self.samples if s[0] >= moment]
        return (later[0][1], later[0][2]) if later else None


@dataclass
class Sampler:
    """Samples the run's processes (this process's descendants) every ``every_s`` seconds in a thread."""

    every_s: float = 2.0
    seen: dict[int, Figures] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """Sample until :attr:`stop` is set."""
        me = psutil.Process()
        while not self.stop.wait(self.every_s):
            for proc in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self._sample(proc)

    def _sample(self, proc: psutil.Process) -> None:
        figures = self.seen.get(proc.pid)
        if figures is None:
            name = " ".join(proc.cmdline()[:6])[:90]
            figures = self.seen[proc.pid] = Figures(name, proc.create_time())
        figures.samples.append((time.time(), proc.memory_info().rss, proc.num_fds()))


@contextlib.contextmanager
def sampling() -> Iterator[Sampler]:
    """A running :class:`Sampler`, stopped on leaving."""
    sampler = Sampler()
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    try:
        yield sampler
    finally:
        sampler.stop.set()
        thread.join(10)


@contextlib.contextmanager
def database(dsn: str | None, ha: bool) -> Iterator[str | None]:
    """``dsn``, an empty database on the tests' PostgreSQL server with ``ha``, or None without it."""
    if not ha or dsn is not None:
        yield dsn if ha else None
        return
    from tests.postgres import postgres_server

    with postgres_server() as server, server.database() as own:
        yield own


def main() -> None:
    """Run once and print the figures."""
    from simulate.runner import Options, run

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=1, help="the chaos seed (the same seed, the same faults)")
    parser.add_argument("--duration", type=float, default=900.0, help="seconds of sensor data [15 minutes]")
    parser.add_argument("--ha", action="store_true", help="two hubs on --ha; the hub faults hit the leader")
    parser.add_argument("--dsn", help="the PostgreSQL database of --ha [default: the tests' server]")
    parser.add_argument("--run-dir", type=Path, help="keep the run's logs and report here [default: a temporary one]")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="spanedge-chaos-") as tmp,
        database(args.dsn, args.ha) as dsn,
        sampling() as sampler,
    ):
        directory = args.run_dir or Path(tmp)
        opts = Options(
            sites=FARM / "sites.yaml",
            app=FARM / "app.py",
            duration=args.duration,
            chaos=args.seed,
            mode="managed",
            run_dir=directory / "run",
            ha=dsn,
        )
        started = time.monotonic()
        outcome = asyncio.run(run(opts))
    report = outcome.report
    print(f"smart_farm, chaos seed {args.seed}, {args.duration:g} s{' with --ha' if args.ha else ''}")
    print(f"run took {time.monotonic() - started:.0f} s; faults: {len(report.faults)}")
    for event in outcome.events:
        if event.startswith("t="):
            print(f"  {event}")
    print(f"lost {report.lost}, duplicated {report.duplicates}, wrong {report.wrong} (goal 0 / 0 / 0)")
    print(f"{'process':<92}{'RSS warm -> end':>24}{'open files':>16}")
    ended = outcome.started_at + args.duration  # the sensors' last second: before the drain and the shutdown
    worst = 1.0
    for figures in sorted(sampler.seen.values(), key=lambda f: f.name):
        # its baseline: after the warm-up that follows its own start (a process a fault started again has its own)
        first = figures.after(max(outcome.started_at, figures.started) + WARMUP_S)
        last = figures.at(ended)
        if first is None or last is None or figures.samples[0][0] > ended - WARMUP_S:
            continue  # lived less than a warm-up within the run: a short-lived helper process
        (rss0, fds0), (rss1, fds1) = first, last
        growth = max(rss1 / rss0 if rss0 else 1.0, fds1 / fds0 if fds0 else 1.0)
        worst = max(worst, growth)
        print(
            f"{figures.name:<92}{rss0 / 2**20:>9.0f} -> {rss1 / 2**20:>5.0f} MiB{fds0:>8} -> {fds1:<5}"
            f"{'' if growth <= GROWTH_GOAL else '  over 10%'}"
        )
    verdict = "met" if worst <= GROWTH_GOAL else "missed"
    print(f"goal: every process within 10% of its figures after warm-up: {verdict} (worst {worst:.2f}x)")


if __name__ == "__main__":
    main()
