"""Human-readable rendering of plans for the command line."""

from __future__ import annotations

from collections.abc import Sequence

from spanedge.plan import Plan, Totals


def _rate(bytes_per_s: float) -> str:
    for unit, scale in (("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.1f} {unit}"
    return f"{bytes_per_s:.0f} B/s"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _totals_row(name: str, totals: Totals) -> list[str]:
    return [
        name,
        _rate(totals.wan_bytes_per_s),
        f"{totals.mean_latency_ms:.1f}",
        f"{totals.worst_latency_ms:.1f}",
        f"{totals.hub_cpu:.3f}",
        f"{totals.objective:.3f}",
    ]


def render_plan(plan: Plan, baselines: Sequence[str] = ()) -> str:
    """Return the placement table, totals and (if asked) baselines side by side."""
    head = (
        f"app '{plan.app}' (plan v{plan.version}), hub {plan.hub}: "
        f"{plan.solver.method} {plan.solver.status} in {plan.solver.seconds * 1000:.0f} ms"
    )
    if plan.solver.gap is not None:
        head += f", gap {plan.solver.gap:.2%}"
    rows = [["replica", "site", "why"]]
    rows += [[a.replica, a.site, a.reason] for a in plan.assignments]
    parts = [head, "", _table(rows), ""]
    totals = [["placement", "WAN traffic", "mean latency ms", "worst latency ms", "hub cores", "objective"]]
    totals.append(_totals_row(plan.solver.method, plan.totals))
    for name in baselines:
        if name in plan.baselines:
            totals.append(_totals_row(name, plan.baselines[name]))
    parts.append(_table(totals))
    for name in baselines:
        base = plan.baselines.get(name)
        if base is not None and base.wan_bytes_per_s > 0:
            ratio = plan.totals.wan_bytes_per_s / base.wan_bytes_per_s
            parts.append(f"WAN traffic vs {name}: {ratio:.1%}")
    if plan.slo_ms is not None:
        verdict = "met" if plan.totals.worst_latency_ms <= plan.slo_ms else "MISSED"
        parts.append(f"latency SLO {plan.slo_ms:.0f} ms: {verdict} (worst path {plan.totals.worst_latency_ms:.1f} ms)")
    parts.extend(f"warning: {w}" for w in plan.warnings)
    return "\n".join(parts)
