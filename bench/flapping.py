"""Flapping benchmark: do plans move replicas back and forth when the measured latencies are noisy?

The ``smart_farm`` example's hub coordinator (the real
:class:`hub.control.coordinator.Coordinator`, :class:`hub.control.registry.SiteRegistry` and
ILP planner; no brokers, agents or Spark) runs on a simulated clock for a few
minutes. Every spoke sends a heartbeat every 2 s with the round trip it
measured to every other site. Each link's one-way delay is the one
``spanedge simulate`` emulates (the ``links:`` of ``sites.yaml``, else its
``default_link``) times a factor redrawn every few seconds uniformly within
±jitter, as if a ``latency`` fault changed every link that often; the
coordinator's analyse step runs every 5 s, as in the hub.

Two coordinators get the same heartbeats, each with its own registry (a
link's estimate is a trimmed mean over a 60 s window of reports, restarted
by a level shift; :mod:`hub.control.links`): one with the hub's defaults (drift
threshold 0.5; hysteresis 5%, or half the measured links' relative spread if
more; migration weight 1, though the hub knows no state bytes, so the
migration term is 0 either way), the baseline with the hysteresis and the
migration cost off (``default_planner`` with ``hysteresis=0,
noise_margin=0, migration_weight=0``); both re-plan at most every 10 s, as
the hub of ``spanedge simulate`` does. Per scenario and jitter the table
prints the re-plans (drift beyond the threshold), the plan versions that
changed the placement, the replicas moved, how many of those moves went
back to a site the replica had left before, and, for a lasting change, the
seconds from it to the first move after it.

Scenarios: the declared links (field-east's windows run at the barn, 5 ms
away; the shed is 25 ms away); a near tie (the barn's links to the fields at
25 ms like the shed's, from the start); two lasting changes from the middle
of the run, as ``--fault latency:barn:<ms>@<t>``: the barn's links at 300 ms
(beyond the 100 ms a replica may be offloaded, so the barn can no longer
keep field-east's replicas) and at 90 ms (the shed is then about 19% better,
a gain the noise hysteresis weighs).

Run: ``.venv/bin/python bench/flapping.py [--duration 300] [--jitter 0.3 0.5] [--period 5] [--seeds 10]``
"""

from __future__ import annotations

import argparse
import functools
import logging
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from hub.control.coordinator import Coordinator  # noqa: E402
from hub.control.planning import Planner, default_planner  # noqa: E402
from hub.control.registry import SiteRegistry  # noqa: E402
from simulate.config import parse_simulation, resolve_links  # noqa: E402
from spanedge.sites import Sites, load_sites  # noqa: E402

EXAMPLE = _ROOT / "examples" / "smart_farm"
HEARTBEAT_S = 2.0
CHECK_S = 5.0
MIN_REPLAN_S = 10.0  # what the hub of ``spanedge simulate`` runs with
TIE_MS = 25.0  # the shed's latency to the fields
BARN_LINKS = ("cloud", "shed", "field-east", "field-west")


@dataclass(frozen=True)
class Scenario:
    """Links overridden from the start, and links overridden from the middle of the run (a lasting change), {(a, b): ms}."""

    first: Mapping[tuple[str, str], float]
    later: Mapping[tuple[str, str], float]


SCENARIOS: dict[str, Scenario] = {
    "declared links": Scenario({}, {}),
    "near tie: barn 25 ms from the fields": Scenario(
        {("barn", "field-east"): TIE_MS, ("barn", "field-west"): TIE_MS}, {}
    ),
    "lasting change: barn's links 300 ms from mid-run": Scenario({}, {("barn", s): 300.0 for s in BARN_LINKS}),
    "lasting change: barn's links 90 ms from mid-run": Scenario({}, {("barn", s): 90.0 for s in BARN_LINKS}),
}


class Clock:
    """The simulated clock both coordinators and registries read."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        """Start at ``start`` (seconds)."""
        self.now = start

    def __call__(self) -> float:
        """The current simulated time."""
        return self.now


#: The hub's planner with the hysteresis (fixed and noise-aware) and the migration cost off: the baseline.
WITHOUT_HYSTERESIS: Planner = functools.partial(default_planner, hysteresis=0.0, noise_margin=0.0, migration_weight=0.0)
PLANNERS: dict[str, Planner] = {"default": default_planner, "no hysteresis": WITHOUT_HYSTERESIS}


@dataclass
class Figures:
    """What one coordinator did over a run; ``move_after_s``: from the lasting change to the first move after it."""

    replans: int = 0
    changes: int = 0
    moved: int = 0
    moved_back: int = 0
    first_change_s: float | None = None
    move_after_s: float | None = None


class Network:
    """Each link's one-way delay, as ``spanedge simulate`` emulates it, times a factor redrawn every ``period`` s.

    The factor is drawn uniformly within ±``jitter``.
    """

    def __init__(self, sites: Sites, jitter: float, period: float, seed: int) -> None:
        """Draw from a generator seeded with ``seed``."""
        self.names = list(sites.sites)
        wan = resolve_links(sites, parse_simulation(sites))
        self.declared = {(w.a, w.b) if w.a < w.b else (w.b, w.a): w.delay_ms for w in wan}
        self.jitter, self.period = jitter, period
        self.rng = random.Random(seed)
        self.factor = dict.fromkeys(self.declared, 1.0)
        self.base: dict[tuple[str, str], float] = dict(self.declared)
        self.drawn_at = -period

    def override(self, links: Mapping[tuple[str, str], float]) -> None:
        """Set the base delay of ``links`` (ms)."""
        for (a, b), ms in links.items():
            self.base[(a, b) if a < b else (b, a)] = ms

    def at(self, t: float) -> None:
        """Redraw the factors if a period has passed at ``t`` (s since the start)."""
        if t - self.drawn_at >= self.period:
            self.drawn_at = t
            self.factor = {k: 1.0 + self.rng.uniform(-self.jitter, self.jitter) for k in self.declared}

    def delay(self, a: str, b: str) -> float:
        """The one-way delay between ``a`` and ``b`` now (ms)."""
        key = (a, b) if a < b else (b, a)
        return self.base[key] * self.factor[key]

    def heartbeat(self, site: str) -> dict[str, Any]:
        """The heartbeat ``site`` sends: the round trip it measured to every other site."""
        rtts = {p: 2 * self.delay(site, p) for p in self.names if p != site}
        return {"site": site, "latency": {p: {"rtt_ms": r, "p95_ms": r * 1.1, "samples": 5} for p, r in rtts.items()}}


def simulate(
    sites: Sites, source: str, scenario: str, *, jitter: float, period: float, duration: float, seed: int
) -> dict[str, Figures]:
    """Run a coordinator per planner of :data:`PLANNERS` on the same heartbeats of ``scenario``; their figures by name."""
    clock = Clock()
    start = clock.now
    net = Network(sites, jitter, period, seed)
    net.override(SCENARIOS[scenario].first)
    later = SCENARIOS[scenario].later
    change_at = duration // 2 // HEARTBEAT_S * HEARTBEAT_S if later else None
    spokes = [s.name for s in sites.spokes]
    coordinators = {
        name: Coordinator(
            SiteRegistry(sites, clock=clock), planner=planner, min_replan_interval_s=MIN_REPLAN_S, clock=clock
        )
        for name, planner in PLANNERS.items()
    }
    t, deployed = 0.0, False
    while t <= duration:
        clock.now = start + t
        net.at(t)
        if t == change_at:
            net.override(later)
        for spoke in spokes:
            beat = net.heartbeat(spoke)
            for c in coordinators.values():
                c.heartbeat(spoke, beat)
        if not deployed and t >= 3 * HEARTBEAT_S:  # deployed once a few heartbeats came in
            for c in coordinators.values():
                c.deploy(source, "app.py")
            deployed = True
        elif deployed and t % CHECK_S < HEARTBEAT_S:
            for c in coordinators.values():
                c.check()
        t += HEARTBEAT_S
    return {name: _figures(c, start, change_at) for name, c in coordinators.items()}


def _figures(coordinator: Coordinator, start: float, change_at: float | None) -> Figures:
    (record,) = coordinator.records()
    figures = Figures()
    left: dict[str, set[str]] = {}
    for entry in record.history[1:]:
        figures.replans += 1
        if not entry.changed:
            continue
        figures.changes += 1
        at = entry.at - start
        if figures.first_change_s is None:
            figures.first_change_s = at
        if change_at is not None and at >= change_at and figures.move_after_s is None:
            figures.move_after_s = at - change_at
        for m in entry.moved:
            figures.moved += 1
            figures.moved_back += m["to"] in left.get(m["replica"], set())
            left.setdefault(m["replica"], set()).add(m["from"])
    return figures


def _span(values: list[float]) -> str:
    """``lo–hi`` (or the one value) of ``values`` in whole seconds; ``-`` if none."""
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:.0f}" if lo == hi else f"{lo:.0f}–{hi:.0f}"


def _row(label: str, name: str, runs: list[Figures], lasting: bool) -> str:
    """One line of the table: ``runs`` of planner ``name`` summed."""
    firsts = [f.first_change_s for f in runs if f.first_change_s is not None]
    after = [f.move_after_s for f in runs if f.move_after_s is not None]
    moved_after = f"{_span(after)} ({len(after)} of {len(runs)} runs)" if lasting else "-"
    cells = (
        label,
        name,
        sum(f.replans for f in runs),
        sum(f.changes for f in runs),
        sum(f.moved for f in runs),
        sum(f.moved_back for f in runs),
        _span(firsts),
        moved_after,
    )
    return " | ".join(str(v) for v in cells)


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=float, default=300.0, help="simulated seconds per run")
    parser.add_argument("--jitter", type=float, nargs="+", default=[0.3, 0.5], help="relative jitter of each link")
    parser.add_argument("--period", type=float, default=5.0, help="seconds between two draws of the delays")
    parser.add_argument(
        "--seeds", type=int, default=10, help="runs per row, each with its own draws; figures are summed"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the coordinators log every re-plan
    sites = load_sites(EXAMPLE / "sites.yaml")
    source = (EXAMPLE / "app.py").read_text()
    print(
        f"smart_farm, {args.duration:.0f} s simulated, heartbeats every {HEARTBEAT_S:.0f} s, checks every "
        f"{CHECK_S:.0f} s, re-plans at most every {MIN_REPLAN_S:.0f} s, delays redrawn every {args.period:g} s; "
        f"lasting changes at {args.duration // 2 // HEARTBEAT_S * HEARTBEAT_S:.0f} s"
    )
    print(f"figures summed over {args.seeds} runs with different draws; times in s, the range over the runs")
    header = (
        "scenario",
        "planner",
        "re-plans",
        "plan changes",
        "replicas moved",
        "moved back",
        "first change at",
        "first move after the lasting change",
    )
    print(" | ".join(header))
    for scenario, spec in SCENARIOS.items():
        for jitter in args.jitter:
            totals: dict[str, list[Figures]] = {}
            for seed in range(1, args.seeds + 1):
                runs = simulate(
                    sites, source, scenario, jitter=jitter, period=args.period, duration=args.duration, seed=seed
                )
                for name, f in runs.items():
                    totals.setdefault(name, []).append(f)
            for name, fs in totals.items():
                print(_row(f"{scenario}, jitter ±{jitter:.0%}", name, fs, bool(spec.later)))


if __name__ == "__main__":
    main()
