"""A same-app re-plan at fleet scale, in one process: the coordinator's part beside the solve alone.

    .venv/bin/python bench/replan.py [--sites 1000] [--repeat 5]

One process builds a coordinator over ``--sites`` spokes with a state
directory and a plan distributor (its publisher acknowledges every message
at once), takes a heartbeat of every spoke as ``bench/hub_sites.py`` sends
them (a measured latency to the hub and to two neighbours: three links a
spoke), deploys that bench's app, then times ``--repeat`` deploys of the same
app, what ``POST /apps`` does at the hub without Spark: the placement with
the current measurements, the app's record written, the plan views of every
site cut and compared with what each site holds. Before each, every spoke
sends a new heartbeat, so every link's estimate is new, as under load. The
baseline of the same run is :func:`placement.solve` alone on the same app,
sites and latency matrix with the plan in force as the previous one: the
solver and its baselines, which any re-plan pays. Printed: p50 and max of
each, and their ratio. The goal, over the whole hub (``bench/hub_sites.py``),
is a re-plan of 1,000 sites within 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [
    str(ROOT),
    *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"),
]  # not bench/placement.py

from bench.hub_sites import APP, heartbeat, site_names, sites_yaml  # noqa: E402

GOAL_S = 2.0
RATE = 5.0  # records/s of each spoke's stream, as bench/hub_sites.py's defaults send them


class Acknowledged:
    """A publisher whose broker acknowledges every message at once."""

    def __init__(self) -> None:
        self.messages = 0

    def publish_all(self, messages: Sequence[tuple[str, bytes]]) -> list[bool]:
        """Count ``messages``; every one is acknowledged."""
        self.messages += len(messages)
        return [True] * len(messages)


def coordinator(count: int, state: Path) -> tuple[Any, list[str]]:
    """A coordinator over ``count`` spokes, with a state directory and a distributor, and the spokes' names."""
    from hub.control.coordinator import Coordinator
    from hub.control.distribution import PlanDistributor
    from hub.control.registry import SiteRegistry
    from hub.control.state import StateStore
    from spanedge.signing import PlanSigningKey
    from spanedge.sites import parse_sites

    names = site_names(count)
    store = StateStore(state)
    distributor = PlanDistributor(Acknowledged(), PlanSigningKey.generate(), store)
    registry = SiteRegistry(parse_sites(sites_yaml("mqtt://127.0.0.1:1883", names)))
    return Coordinator(registry, distributor=distributor, store=store), names


def beat_all(coord: Any, names: list[str]) -> None:
    """A heartbeat of every spoke."""
    for i, name in enumerate(names):
        if not coord.heartbeat(name, heartbeat(names, i, RATE)):
            msg = f"the registry refused the heartbeat of {name}"
            raise RuntimeError(msg)


def solve_alone(coord: Any) -> Callable[[], object]:
    """The solve of the deployed app on the inputs the coordinator has now, with its plan as the previous one."""
    import placement
    from hub.control.planning import BASELINES, planned_latency_rows, planned_sites

    deployed = coord.deployments["fleet"]
    sites = planned_sites(coord.registry, deployed.app)
    rows = planned_latency_rows(coord.registry)
    matrix = placement.LatencyMatrix.from_sites(sites).with_measurements(rows)
    previous = placement.Previous.of(deployed.record.plan)
    return lambda: placement.solve(
        deployed.app, sites, latency=matrix, version=2, baselines=BASELINES, previous=previous
    )


def main() -> None:
    """Build, time and print."""
    import os

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sites", type=int, default=1000, help="spokes in the fleet")
    parser.add_argument("--repeat", type=int, default=5, help="re-plans timed, and solves alone")
    args = parser.parse_args()

    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    with tempfile.TemporaryDirectory(prefix="spanedge-bench-replan-") as tmp:
        coord, names = coordinator(args.sites, Path(tmp) / "state")
        beat_all(coord, names)
        source, filename = APP.replace("OUT", repr(str(Path(tmp) / "archive"))), str(Path(tmp) / "fleet.py")
        start = time.perf_counter()
        coord.deploy(source, filename)
        first = time.perf_counter() - start
        replans, solves = [], []
        for _ in range(args.repeat):
            beat_all(coord, names)
            start = time.perf_counter()
            record, _ = coord.deploy(source, filename)
            replans.append(time.perf_counter() - start)
            solve = solve_alone(coord)
            start = time.perf_counter()
            solve()
            solves.append(time.perf_counter() - start)
        replicas = len(record.plan.assignments)

    print(f"\nsame-app re-plan of {args.sites} sites ({replicas} replicas) in one process, {load} at the start")
    print(f"{'':<36}{'p50':>9}{'max':>9}   goal")
    p50s = {}
    for label, times in (("re-plan (deploy of the same app)", replans), ("solve alone (baseline)", solves)):
        p50s[label] = statistics.median(times)
        goal = f"<= {GOAL_S:g} s" if label.startswith("re-plan") else ""
        print(f"{label:<36}{1000 * p50s[label]:>7.0f}ms{1000 * max(times):>7.0f}ms   {goal}")
    ratio = p50s["re-plan (deploy of the same app)"] / p50s["solve alone (baseline)"]
    print(f"re-plan / solve alone: {ratio:.2f}x ({args.repeat} of each); first deploy {first:.1f} s")


if __name__ == "__main__":
    main()
