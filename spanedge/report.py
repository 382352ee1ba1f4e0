"""Human-readable reports for the command line: blocks of lines and tables, rendered as plain text here.

A report is a list of blocks (a line of text, or a :class:`Table`), so the
command line can print the same report as coloured tables on a terminal and
as plain text when piped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spanedge.keyrange import complement, describe
from spanedge.plan import Plan, Totals


@dataclass(frozen=True)
class Table:
    """A table: a header row and data rows of text cells; ``alarm`` marks rows to highlight."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    alarm: frozenset[int] = frozenset()


Block = str | Table


def _rate(bytes_per_s: float) -> str:
    for unit, scale in (("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.1f} {unit}"
    return f"{bytes_per_s:.0f} B/s"


def to_text(blocks: Sequence[Block]) -> str:
    """A report as plain text: tables with aligned columns under a dashed rule."""
    return "\n".join(_table([list(b.header), *map(list, b.rows)]) if isinstance(b, Table) else b for b in blocks)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _totals_row(name: str, totals: Totals) -> tuple[str, ...]:
    return (
        name if totals.feasible else f"{name} (INFEASIBLE)",
        _rate(totals.wan_bytes_per_s),
        f"{totals.mean_latency_ms:.1f}",
        f"{totals.worst_latency_ms:.1f}",
        f"{totals.hub_cpu:.3f}",
        f"{totals.objective:.3f}",
    )


def plan_report(plan: Plan, baselines: Sequence[str] = ()) -> list[Block]:
    """The placement table, totals and (if asked) baselines side by side."""
    head = (
        f"app '{plan.app}' (plan v{plan.version}), hub {plan.hub}: "
        f"{plan.solver.method} {plan.solver.status} in {plan.solver.seconds * 1000:.0f} ms"
    )
    if plan.solver.gap is not None:
        head += f", gap {plan.solver.gap:.2%}"
    split = {p.replica: p for p in plan.parts}
    rows_placed = []
    for a in plan.assignments:
        part = split.get(a.replica)
        if part is None:
            rows_placed.append((a.replica, a.site, a.reason))
            continue
        kept = ", ".join(describe(lo, hi) for lo, hi in complement([(part.keys_from, part.keys_before)]))
        rows_placed.append((f"{a.replica} ({kept})", a.site, a.reason))
        rows_placed.append((f"{a.replica} ({describe(part.keys_from, part.keys_before)})", part.site, part.reason))
    placed = Table(("replica", "site", "why"), tuple(rows_placed))
    parts: list[Block] = [head, "", placed, ""]
    compared = [(name, plan.baselines[name]) for name in baselines if name in plan.baselines]
    rows = [_totals_row(plan.solver.method, plan.totals), *(_totals_row(n, t) for n, t in compared)]
    alarm = frozenset(i for i, (_, t) in enumerate(compared, start=1) if not t.feasible)
    header = ("placement", "WAN traffic", "mean latency ms", "worst latency ms", "hub cores", "objective")
    parts.append(Table(header, tuple(rows), alarm))
    for name, base in compared:
        if not base.feasible:
            shown = "; ".join(base.violations[:3]) + (
                f"; +{len(base.violations) - 3} more" if len(base.violations) > 3 else ""
            )
            parts.append(f"{name} is infeasible here, so its scores are not comparable: {shown}")
        elif base.wan_bytes_per_s > 0:
            ratio = plan.totals.wan_bytes_per_s / base.wan_bytes_per_s
            parts.append(f"WAN traffic vs {name}: {ratio:.1%}")
    if plan.slo_ms is not None:
        verdict = "met" if plan.totals.worst_latency_ms <= plan.slo_ms else "MISSED"
        parts.append(f"latency SLO {plan.slo_ms:.0f} ms: {verdict} (worst path {plan.totals.worst_latency_ms:.1f} ms)")
    parts.extend(f"warning: {w}" for w in plan.warnings)
    return parts
