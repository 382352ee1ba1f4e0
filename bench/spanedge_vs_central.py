"""SpanEdge vs central: the same app and the same sensor data under the ILP placement and everything-at-the-hub.

Runs the app twice across the simulated topology of its ``sites.yaml`` (WAN
links of 20-80 ms with bandwidth caps, as declared there), first placed by the
ILP, then by the central baseline, with the same seeded sensor data, and
prints WAN bytes, local- and global-result latency (p50/p99) and hub CPU side
by side, then the path of ``report.html``, which overlays both runs in charts
(:mod:`simulate.report_html`)::

    python bench/spanedge_vs_central.py --duration 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulate.report import Report

ROOT = Path(__file__).resolve().parent.parent


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def _loss(report: Report) -> str:
    if report.fell_behind:  # the baseline's result, not a loss
        return f"could not keep up: {report.queued} records still queued"
    text = f"{report.lost} / {report.duplicates}"
    return text if report.drained else text + " (not drained)"


def _latency_row(ours: Report, base: Report, tier: str, quantile: str) -> tuple[str, str, str, str]:
    """One latency quantile of local or global results, for both runs and their ratio."""
    a, b = (getattr(getattr(r, f"{tier}_latency"), quantile) for r in (ours, base))
    return f"{tier} result {quantile} ms", _ms(a), _ms(b), _ratio(a, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sites", type=Path, default=ROOT / "examples" / "cold_chain" / "sites.yaml")
    parser.add_argument("--app", type=Path, default=ROOT / "examples" / "cold_chain" / "app.py")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of sensor data per run")
    parser.add_argument("--baseline", default="central", help="central or local-first")
    parser.add_argument("--heartbeat-interval", type=float, default=5.0)
    parser.add_argument("--drain-timeout", type=float, default=180.0, help="seconds to wait for results after the run")
    parser.add_argument("--run-dir", type=Path, default=ROOT / ".spanedge" / "bench" / "spanedge_vs_central")
    parser.add_argument("--json", dest="as_json", action="store_true", help="print the two reports as JSON")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))  # before bench/, whose placement.py would shadow the placement package
    from simulate.runner import Options, run_compare

    opts = Options(
        sites=args.sites,
        app=args.app,
        duration=args.duration,
        run_dir=args.run_dir,
        heartbeat_interval=args.heartbeat_interval,
        drain_timeout=args.drain_timeout,
        mode="standalone",
    )
    outcomes = asyncio.run(run_compare(opts, args.baseline))
    ours, base = (o.report for o in outcomes)
    if args.as_json:
        print(json.dumps([ours.to_dict(), base.to_dict()], indent=2))
        print(f"charts: {outcomes[0].html}", file=sys.stderr)
        return
    rows = [
        ("WAN bytes", f"{ours.wan_total:,}", f"{base.wan_total:,}", f"{ours.wan_total / max(1, base.wan_total):.1%}"),
        *(_latency_row(ours, base, tier, q) for tier in ("local", "global") for q in ("p50", "p99")),
        (
            "hub CPU s",
            f"{ours.hub_cpu_s or 0:.1f}",
            f"{base.hub_cpu_s or 0:.1f}",
            _ratio(ours.hub_cpu_s, base.hub_cpu_s),
        ),
        ("sensor messages", str(sum(s.sent for s in ours.streams)), str(sum(s.sent for s in base.streams)), ""),
        ("lost / duplicate", _loss(ours), _loss(base), ""),
    ]
    widths = [max(len(r[i]) for r in [("measure", "spanedge (ilp)", args.baseline, "ratio"), *rows]) for i in range(4)]
    header = ("measure", "spanedge (ilp)", args.baseline, "ratio")
    print(f"app {ours.app}, {args.duration:.0f} s of sensor data per run, WAN as declared in {args.sites}")
    for i, row in enumerate([header, *rows]):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("latency of window results: arrival at the simulator minus window_end (includes the watermark delay)")
    for r in (ours, base):
        for p in r.problems:
            print(f"[{r.label}] {p}")
    print(f"charts (latency, WAN bytes and backlog over time, both runs overlaid): {outcomes[0].html}")


if __name__ == "__main__":
    main()
