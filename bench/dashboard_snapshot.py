"""The dashboard's snapshot at fleet scale: built and encoded for N sites, beside the whole latency matrix.

    .venv/bin/python bench/dashboard_snapshot.py [--sites 1000] [--repeat 5]

One process builds a coordinator over ``--sites`` spokes (labels ``kind``
truck or van), takes one heartbeat per spoke with its measured latency to
the hub and two neighbours, and then times :func:`build_snapshot` plus its
JSON encoding, what the hub does once a second for each open dashboard.
The baseline of the same run is the same snapshot carrying every ordered
pair of sites (the whole matrix, what it carried before the measured links
only above 20 sites). Printed: the p50 and max of each over ``--repeat``
runs, and the snapshot's size. The goal is a snapshot within 250 ms at
1,000 sites.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]
GOAL_MS = 250.0


def sites_yaml(count: int) -> str:
    """One hub and ``count`` spokes, each with a stream and a ``kind`` label."""
    lines = ["sites:", '  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883", cpu: 8}']
    for i in range(count):
        kind = "truck" if i % 5 else "van"
        lines.append(
            f'  s{i:05d}: {{tier: spoke, broker: "mqtt://127.0.0.1:1883", labels: {{kind: {kind}}}, '
            f'streams: {{readings: {{topic: "s/{i}/+", rate: 5}}}}}}'
        )
    lines.append("default_link: {latency_ms: 40, bandwidth_mbps: 10}")
    return "\n".join(lines) + "\n"


def coordinator(count: int) -> Any:
    """A coordinator whose registry took a heartbeat of every spoke, with three measured links each."""
    from hub.control.coordinator import Coordinator
    from hub.control.registry import SiteRegistry
    from spanedge.sites import parse_sites

    coord = Coordinator(SiteRegistry(parse_sites(sites_yaml(count))))
    names = [f"s{i:05d}" for i in range(count)]
    for i, name in enumerate(names):
        peers = {"cloud": 40.0 + i % 9, names[(i + 1) % count]: 5.0, names[(i - 1) % count]: 6.0}
        latency = {peer: {"rtt_ms": ms * 2, "p95_ms": ms * 2.5, "samples": 5} for peer, ms in peers.items()}
        beat = {"site": name, "ts": time.time(), "cpu": 5.0, "latency": latency}
        assert coord.heartbeat(name, beat)
    return coord


def timed(work: Callable[[], bytes], repeat: int) -> tuple[list[float], int]:
    """Seconds each of ``repeat`` runs of ``work`` took, and the size of what it gave."""
    times, size = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        size = len(work())
        times.append(time.perf_counter() - start)
    return times, size


def main() -> None:
    """Build, time and print."""
    import orjson

    from hub.api.dashboard import snapshot
    from hub.control.registry import measured_links

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sites", type=int, default=1000, help="spokes in the fleet")
    parser.add_argument("--repeat", type=int, default=5, help="snapshots timed of each kind")
    args = parser.parse_args()
    coord = coordinator(args.sites)
    build = lambda: orjson.dumps(snapshot.build_snapshot(coord))  # noqa: E731
    now, now_size = timed(build, args.repeat)
    kept = snapshot.MATRIX_SITES
    snapshot.MATRIX_SITES = args.sites + 1  # the baseline: every pair, as the matrix needs
    try:
        whole, whole_size = timed(build, max(1, min(args.repeat, 3)))
    finally:
        snapshot.MATRIX_SITES = kept
    ms = 1000.0
    links = len(measured_links(coord.registry))
    print(f"dashboard snapshot of {args.sites} sites ({links} measured links), built and JSON-encoded")
    print(f"{'snapshot':<44}{'p50':>10}{'max':>10}{'size':>12}")
    for label, values, size in (
        ("measured links only (now, above 20 sites)", now, now_size),
        ("every pair of sites (baseline)", whole, whole_size),
    ):
        print(f"{label:<44}{statistics.median(values) * ms:>8.0f}ms{max(values) * ms:>8.0f}ms{size / 2**20:>9.1f} MiB")
    ratio = statistics.median(now) / statistics.median(whole)
    verdict = "met" if statistics.median(now) * ms <= GOAL_MS else "missed"
    print(f"now / baseline: {ratio:.3f}; goal: a snapshot within {GOAL_MS:g} ms: {verdict}")


if __name__ == "__main__":
    main()
