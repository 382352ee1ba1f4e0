"""The HTML report of one run, or of several overlaid: the totals, then charts as inline SVG.

One file with no outside reference (no script, no stylesheet, no font, no
image to fetch), so it opens offline and can be mailed or archived as is. The
charts come from :mod:`simulate.charts`: result latency (local and global),
WAN bytes per link and outbox backlog per site over time, with faults and
re-plans marked.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from simulate import charts
from simulate.charts import Line, Mark
from simulate.report import Report, summarise
from simulate.timeline import Timeline

#: Links drawn one by one in the WAN chart; the rest are summed into one line.
TOP_LINKS = 6
#: Sites drawn one by one in the backlog chart; the rest are summed into one line.
TOP_SITES = 8

Run = tuple[Report, Timeline]
"""One run: its report and what it measured over time."""

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;color:#222;max-width:1100px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
.verdict{margin:2px 0;font-weight:600}.ok{color:#1e7b34}.bad{color:#b3261e}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
td:first-child,th:first-child{text-align:left}th{background:#f6f6f6}
.notes li{color:#8a5a00}figure{margin:8px 0 18px}svg{max-width:100%;height:auto}
table.events td{text-align:left}pre{font-size:12px;background:#f8f8f8;padding:8px;overflow-x:auto}.muted{color:#777}
"""


def render_html(runs: Sequence[Run]) -> str:
    """The whole report as one HTML document: the runs side by side, overlaid in the charts."""
    if not runs:
        msg = "render_html needs at least one run"
        raise ValueError(msg)
    reports = [r for r, _ in runs]
    summary = summarise(reports)
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(summary.title)}</title><style>{_STYLE.strip()}</style></head><body>",
        f"<h1>{_e(summary.title)}</h1>",
        *(_verdict(r) for r in reports),
        _table(summary.columns, summary.rows),
    ]
    parts.append('<ul class="muted">' + "".join(f"<li>{_e(n)}</li>" for n in summary.legend) + "</ul>")
    if summary.problems:
        parts.append("<h2>Problems</h2>")
        parts.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in summary.problems) + "</ul>")
    if summary.events:
        parts.append("<h2>Plan history</h2>")
        parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in summary.events) + "</ul>")
    warmup = reports[0].warmup
    parts.append("<h2>Result latency</h2>")
    after = f" after the {warmup:g} s warm-up" if warmup > 0 else ""
    parts.append(
        '<p class="muted">Arrival at the simulator minus the event time of the result '
        "(window results: minus the window's end, so the watermark delay is included). Each result counts once"
        + (f", and only those whose window ended (or record was stamped){after}" if warmup > 0 else "")
        + ": the legend gives how many.</p>"
    )
    for tier in ("local", "global"):
        series = {r.label: t.latency_ms.get(tier, []) for r, t in runs}
        parts.append(_figure(charts.latency_cdf(f"{tier} results{after}: latency distribution", series)))
    marks = _marks(runs)
    parts.append("<h2>WAN traffic</h2>")
    parts.append(_figure(_wan_chart(runs, marks)))
    parts.append("<h2>Outbox backlog</h2>")
    parts.append(
        '<p class="muted">Records each agent holds for the hub, as its heartbeats report them; '
        "a break in a line means no heartbeat got through (a site cut off).</p>"
    )
    parts.append(_figure(_backlog_chart(runs, marks)))
    parts.append("<h2>Events</h2>")
    parts.append(_marks_table(marks))
    for r in reports:
        parts.append(f"<details><summary>event log of {_e(r.label)}</summary><pre>{_e(chr(10).join(r.events))}</pre>")
        parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_html(path: Path, runs: Sequence[Run]) -> Path:
    """Write :func:`render_html` of ``runs`` to ``path`` and return it."""
    path.write_text(render_html(runs), encoding="utf-8")
    return path


def _verdict(report: Report) -> str:
    checked = sum(s.checked for s in report.sinks)
    if report.fell_behind:
        text = f"{report.label} ({report.placement}): could not keep up: {report.queued} records still queued"
        return f'<p class="verdict bad">{_e(text)}</p>'
    good = not (report.lost or report.duplicates or report.wrong) and report.drained and not report.problems
    text = (
        f"{report.label} ({report.placement}): {report.lost} lost, {report.duplicates} duplicated, "
        f"{report.wrong} wrong of {checked} results checked"
        + ("" if report.drained else ", not drained")
        + (f", {len(report.problems)} problems" if report.problems else "")
    )
    return f'<p class="verdict {"ok" if good else "bad"}">{_e(text)}</p>'


def _table(columns: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    head = "<tr><th>measure</th>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr>"
    body = "".join(
        "<tr><td>" + _e(name) + "</td>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>" for name, cells in rows
    )
    return f"<table>{head}{body}</table>"


def _figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"


def _marks(runs: Sequence[Run]) -> list[Mark]:
    """Faults (the same schedule in every run: each label once) and every run's re-plans, by time."""
    several = len(runs) > 1
    out: list[Mark] = []
    seen: set[str] = set()
    for report, timeline in runs:
        for mark in timeline.marks:
            if mark.kind == "fault":
                if mark.label in seen:
                    continue
                seen.add(mark.label)
                out.append(mark)
            else:
                out.append(dataclasses.replace(mark, label=f"[{report.label}] {mark.label}") if several else mark)
    return sorted(out, key=lambda m: m.t)


def _marks_table(marks: Sequence[Mark]) -> str:
    if not marks:
        return '<p class="muted">No faults and no re-plans during the sensor run.</p>'
    rows = [
        (f"{m.t:.1f}", [m.kind.replace("replan", "re-plan"), m.label, "" if m.until is None else f"{m.until:.1f}"])
        for m in marks
    ]
    head = "<tr><th>t (s)</th><th>what</th><th>detail</th><th>until (s)</th></tr>"
    body = "".join(
        "<tr><td>" + _e(t) + "</td>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>" for t, cells in rows
    )
    return f'<table class="events">{head}{body}</table>'


def _wan_chart(runs: Sequence[Run], marks: Sequence[Mark]) -> str:
    finals: dict[str, int] = {}
    for _, t in runs:
        for link, series in t.wan.items():
            finals[link] = max(finals.get(link, 0), series[-1] if series else 0)
    ranked = [link for link, total in sorted(finals.items(), key=lambda kv: -kv[1]) if total > 0]
    top, rest = ranked[:TOP_LINKS], ranked[TOP_LINKS:]
    lines = []
    for run, (_, t) in enumerate(runs):
        for link in top:
            if link in t.wan:
                lines.append(Line(link, t.wan_times, t.wan[link], run))
        if rest:
            summed = [sum(t.wan[link][i] for link in rest if link in t.wan) for i in range(len(t.wan_times))]
            lines.append(Line(f"{len(rest)} other links", t.wan_times, summed, run))
    peak = max((max(line.ys, default=0) for line in lines), default=0)
    scale, unit = charts.scale_of(peak, "B")
    return charts.time_chart(
        "WAN bytes delivered per link (both directions, cumulative)",
        unit,
        lines,
        marks,
        [r.label for r, _ in runs],
        unit_scale=scale,
    )


def _backlog_chart(runs: Sequence[Run], marks: Sequence[Mark]) -> str:
    peaks: dict[str, int] = {}
    for _, t in runs:
        for site, points in t.backlog.items():
            peaks[site] = max(peaks.get(site, 0), max((n for _, n in points), default=0))
    ranked = sorted(peaks, key=lambda s: (-peaks[s], s))
    top, rest = ranked[:TOP_SITES], set(ranked[TOP_SITES:])
    lines = []
    for run, (_, t) in enumerate(runs):
        for site in top:
            if t.backlog.get(site):
                drawn = with_gaps(t.backlog[site])
                lines.append(Line(site, [p[0] for p in drawn], [p[1] for p in drawn], run))
        if rest:
            merged = sorted((time, site, n) for site in rest for time, n in t.backlog.get(site, []))
            latest: dict[str, int] = {}
            xs, ys = [], []
            for time, site, n in merged:
                latest[site] = n
                xs.append(time)
                ys.append(sum(latest.values()))
            lines.append(Line(f"{len(rest)} other sites", xs, ys, run))
    return charts.time_chart(
        "Outbox backlog per site (records waiting to reach the hub, from the heartbeats)",
        "records",
        lines,
        marks,
        [r.label for r, _ in runs],
        step=True,
    )


def with_gaps(
    points: Sequence[tuple[float, float]], factor: float = 3.0, least: float = 5.0
) -> list[tuple[float, float]]:
    """``points`` with a NaN (a break in the line) where no point came for ``factor`` times the usual interval.

    The backlog is known only from heartbeats that reached the hub: a break
    says "unknown" (a site cut off) instead of holding the last value.
    """
    if len(points) < 3:
        return list(points)
    steps = sorted(b[0] - a[0] for a, b in itertools.pairwise(points))
    gap = max(factor * steps[len(steps) // 2], least)
    out = [points[0]]
    for a, b in itertools.pairwise(points):
        if b[0] - a[0] > gap:
            out.append((a[0] + steps[len(steps) // 2], math.nan))
        out.append(b)
    return out


def _e(text: str) -> str:
    return html.escape(text, quote=True)
