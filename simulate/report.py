"""The simulation report: records in and out, latencies, WAN bytes, losses, duplicates, dead letters.

:mod:`simulate.checking` fills the :class:`SinkCheck` of each sink; this
module holds the report's data and renders it.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from spanedge.history import fold, summary
from spanedge.numbers import is_number


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) by nearest rank; ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def epoch(value: Any) -> float | None:
    """Seconds since the epoch from a number or an ISO-8601 string."""
    if is_number(value):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=datetime.UTC)
        return parsed.timestamp()
    return None


@dataclass
class Latency:
    """End-to-end latency percentiles in milliseconds."""

    count: int = 0
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        """Percentiles of latencies given in seconds."""
        ms = [s * 1000.0 for s in seconds]
        return cls(len(ms), percentile(ms, 50), percentile(ms, 95), percentile(ms, 99))


@dataclass
class SinkCheck:
    """One sink's results against the reference."""

    sink: str
    tier: str
    received: int = 0
    expected: int = 0
    checked: int = 0
    missing: int = 0
    duplicates: int = 0
    unexpected: int = 0
    wrong: int = 0
    lost_records: int = 0
    extra_records: int = 0
    open_at_end: int = 0
    after_cutoff: int = 0  # results received of windows that end after the cutoff: not checked
    destroyed: int = 0  # results that depend on records a site killed for good took with it, not whole
    repeated: int = 0  # results a dead site published that the site recomputing its part published again
    unchecked: str | None = None
    latency: Latency = field(default_factory=Latency)
    examples: list[str] = field(default_factory=list)


@dataclass
class StreamCount:
    """Sensor messages of one stream at one site."""

    stream: str
    site: str
    sent: int = 0
    malformed: int = 0


@dataclass
class SiteCount:
    """What the agent of one site reported, and what the dead-letter topic carried."""

    site: str
    dead_lettered: int = 0
    expected_dead: int = 0
    late: int = 0
    dropped: int = 0
    backlog: int | None = None
    max_backlog: int = 0
    sensor_failures: int = 0


@dataclass
class Report:
    """Everything a simulation run measured."""

    label: str
    app: str
    placement: str
    broker: str
    duration: float
    streams: list[StreamCount] = field(default_factory=list)
    operators: dict[str, dict[str, int]] = field(default_factory=dict)
    sinks: list[SinkCheck] = field(default_factory=list)
    local_latency: Latency = field(default_factory=Latency)
    global_latency: Latency = field(default_factory=Latency)
    wan_bytes: dict[str, dict[str, int]] = field(default_factory=dict)
    wan_total: int = 0
    sites: list[SiteCount] = field(default_factory=list)
    replans: int | None = None
    plan_changes: int | None = None
    hub_cpu_s: float | None = None
    faults: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    drained: bool = True
    started_at: float = 0.0
    events: list[str] = field(default_factory=list)
    plan_history: list[str] = field(default_factory=list)
    destroyed_by: list[str] = field(default_factory=list)
    hosts: str = "loopback"
    shaping: list[str] = field(default_factory=list)
    warmup: float = 0.0
    settle: float = 0.0
    baseline: bool = False
    """A baseline placement run beside SpanEdge's (``--compare``): one that cannot keep up is not a failure."""

    @property
    def queued(self) -> int:
        """Records still on their way at the end of the run, at least: in the agents' outboxes or the checked results' gaps.

        A run that did not drain lacks records in its checked results (queued at
        the hub, in its log or its queries, or in an outbox), and may hold more
        in the outboxes for later windows: the larger of the two counts.
        """
        return max(self.lost, sum(s.backlog or 0 for s in self.sites))

    @property
    def fell_behind(self) -> bool:
        """A baseline that did not drain: it could not keep up with the data, its missing results are still queued."""
        return self.baseline and not self.drained

    @property
    def failed(self) -> bool:
        """Results lost or duplicated by a run that should have them all (not a baseline that fell behind)."""
        return bool(self.lost or self.duplicates) and not self.fell_behind

    @property
    def repeated(self) -> int:
        """Results a killed site had published that the site recomputing its part published again."""
        return sum(s.repeated for s in self.sinks)

    @property
    def destroyed(self) -> int:
        """Results that depend on what a site killed for good took with it, and did not arrive whole."""
        return sum(s.destroyed for s in self.sinks)

    @property
    def lost(self) -> int:
        """Records lost over every checked sink (records short in windows, or results missing)."""
        return sum(s.lost_records for s in self.sinks)

    @property
    def duplicates(self) -> int:
        """Results received more than once."""
        return sum(s.duplicates for s in self.sinks)

    @property
    def wrong(self) -> int:
        """Results whose values differ from the reference's."""
        return sum(s.wrong for s in self.sinks)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        data = asdict(self)
        data["lost"] = self.lost
        data["duplicates"] = self.duplicates
        data["wrong"] = self.wrong
        data["destroyed"] = self.destroyed
        data["repeated"] = self.repeated
        data["queued"] = self.queued
        data["fell_behind"] = self.fell_behind
        return data


def combine_latency(checks: Iterable[SinkCheck], results: dict[str, list[float]], tier: str) -> Latency:
    """Latency over every sink of ``tier`` (``results`` holds each sink's raw latencies in seconds)."""
    values = [v for c in checks if c.tier == tier for v in results.get(c.sink, [])]
    return Latency.of(values)


def replans_of(placement: Any) -> int | None:
    """Re-plans from the hub's placement answer: its history length less one, or its version less one."""
    if not isinstance(placement, dict):
        return None
    history = placement.get("history")
    if isinstance(history, list):
        return max(0, len(history) - 1)
    plan = placement.get("plan", placement)
    version = plan.get("version") if isinstance(plan, dict) else None
    return max(0, int(version) - 1) if isinstance(version, int) else None


def plan_history_of(placement: Any, t0: float) -> list[str]:
    """The hub's plan history as lines: when (after ``t0``, the sensors' start), the version, the reason and what moved.

    A run of re-plans that left the placement unchanged is one line that counts them.
    """
    history = placement.get("history") if isinstance(placement, dict) else None
    entries = [h for h in history if isinstance(h, dict)] if isinstance(history, list) else []
    lines = []
    for group in fold(entries):
        first, last = group[0], group[-1]
        if len(group) > 1:
            span = f"from {_when(first, t0)} to {_when(last, t0)}"
            lines.append(f"plan v{first.get('version')} {span}: {summary(group)}")
            continue
        moved = ", ".join(_move(m, t0) for m in first.get("moved") or [])
        lines.append(
            f"plan v{first.get('version')} at {_when(first, t0)}: {first.get('reason')}"
            + (f"; moved {moved}" if moved else "")
        )
    return lines


def _when(entry: dict[str, Any], t0: float) -> str:
    """The time of a history entry after ``t0`` (``+12.5 s``), or how long before it (the setup, before the sensors)."""
    at = entry.get("at")
    seconds = float(at) - t0 if isinstance(at, int | float) else 0.0
    return f"+{seconds:.1f} s" if round(seconds, 1) >= 0 else f"setup ({-seconds:.1f} s before the sensors started)"


def _move(m: dict[str, Any], t0: float) -> str:
    """One move of a history entry: its replica and sites, state size, handover time, and what a dead site risked."""
    notes = []
    if isinstance(m.get("recover_by"), int | float) and isinstance(m.get("switch_at"), int | float):
        since = m.get("at_risk_from")
        start = f"{since - t0:.1f} s" if isinstance(since, int | float) else "its last result"
        note = f"{m['from']} gone: results from {start} to the switch at {m['switch_at'] - t0:.1f} s at risk"
        back = m.get("back_at")
        if isinstance(back, int | float):
            note += f", back at {back - t0:.1f} s" + (" in time" if back <= m["recover_by"] else ", too late")
        notes.append(note)
    elif isinstance(m.get("recovered_by"), str) and isinstance(m.get("at_risk_from"), int | float):
        notes.append(
            f"{m['from']} gone: results from {m['at_risk_from'] - t0:.1f} s to the switch"
            + (f" at {m['switch_at'] - t0:.1f} s" if isinstance(m.get("switch_at"), int | float) else "")
            + f" recomputed by {m['recovered_by']}"
        )
    if isinstance(m.get("state_bytes"), int):
        notes.append(f"state {_bytes(m['state_bytes'])}")
    if isinstance(m.get("handover_s"), int | float):
        notes.append(f"handed over {m['handover_s']:.1f} s after the re-plan")
    return f"{m['replica']} {m['from']}->{m['to']}" + (f" ({', '.join(notes)})" if notes else "")


def plan_changes_of(placement: Any) -> int | None:
    """Re-plans that moved an operator (history entries after the first marked ``changed``)."""
    history = placement.get("history") if isinstance(placement, dict) else None
    if not isinstance(history, list):
        return None
    return sum(1 for h in history[1:] if isinstance(h, dict) and h.get("changed", True))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _bytes(n: int) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


@dataclass
class Summary:
    """The report as a table (one column per run, one row per measure), then lines of text.

    ``legend`` says what the rows count; ``events`` are what happened to the plan
    (re-plans, what a killed site took with it); ``problems`` are what went wrong.
    """

    title: str
    columns: list[str]
    rows: list[tuple[str, list[str]]]
    legend: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def summarise(reports: Sequence[Report]) -> Summary:
    """The rows the text and HTML reports show, the runs side by side."""
    rows: list[tuple[str, list[str]]] = []

    def row(name: str, cells: Iterable[str]) -> None:
        rows.append((name, list(cells)))

    row("broker", (r.broker for r in reports))
    row("hosts", (r.hosts for r in reports))
    row("sensor run (s)", (f"{r.duration:.0f}" for r in reports))
    for i, s in enumerate(reports[0].streams):
        row(f"sensor msgs {s.stream}@{s.site}", (_stream_cell(r, i) for r in reports))
    for op in reports[0].operators:
        row(f"edge op {op} in -> out", (_op_cell(r, op) for r in reports))
    for i, c in enumerate(reports[0].sinks):
        row(f"out {c.sink} ({c.tier})", (_sink_cell(r, i) for r in reports))
    for tier, attr in (("local", "local_latency"), ("global", "global_latency")):
        row(f"{tier} result latency p50/p95/p99 ms", (_latency_cell(getattr(r, attr), r.warmup) for r in reports))
    links = sorted({k for r in reports for k in r.wan_bytes})
    for link in links:
        row(f"WAN {link}", (_bytes(sum(r.wan_bytes.get(link, {}).values())) for r in reports))
    row("WAN total", (_bytes(r.wan_total) for r in reports))
    if len(reports) > 1 and reports[1].wan_total:
        row("WAN vs second run", [f"{reports[0].wan_total / reports[1].wan_total:.1%}"] + [""] * (len(reports) - 1))
    if any(r.fell_behind for r in reports):
        row("kept up with the data", (_kept_up_cell(r) for r in reports))
    row("lost records", (_lost_cell(r) for r in reports))
    row("duplicate results", (str(r.duplicates) for r in reports))
    row("wrong results", (str(r.wrong) for r in reports))
    if any(r.destroyed for r in reports):
        row("results destroyed with a killed site", (str(r.destroyed) for r in reports))
    if any(r.repeated for r in reports):
        row("results repeated after a killed site", (str(r.repeated) for r in reports))
    row("dead-lettered (expected)", (_dead_cell(r) for r in reports))
    row("late records", (str(sum(s.late for s in r.sites)) for r in reports))
    row("outbox backlog max / at end", (_backlog_cell(r) for r in reports))
    row("re-plans (placement changed)", (_replan_cell(r) for r in reports))
    row("hub CPU (s)", ("-" if r.hub_cpu_s is None else f"{r.hub_cpu_s:.1f}" for r in reports))
    row("faults", (", ".join(r.faults) or "none" for r in reports))
    events = [f"[{r.label}] {line}" for r in reports for line in r.plan_history[1:]]
    events += [f"[{r.label}] {line}" for r in reports for line in r.destroyed_by]
    problems = [f"[{r.label}] {p}" for r in reports for p in r.problems]
    problems += [f"[{r.label}] {c.sink}: {e}" for r in reports for c in r.sinks for e in c.examples]
    return Summary(
        title=f"SpanEdge simulation: app '{reports[0].app}'",
        columns=[f"{r.label} ({r.placement})" for r in reports],
        rows=rows,
        legend=legend(reports[0]),
        events=events,
        problems=problems,
    )


def legend(report: Report) -> list[str]:
    """What the rows of the report count, with the run's warm-up and settle times."""
    warmup = f"leaving out the first {report.warmup:g} s (warm-up)" if report.warmup > 0 else "from the start"
    return [
        "sensor msgs: the messages the simulated sensors published, malformed ones included",
        "edge op: records in and out of the operator at the agents, over every replica, site and agent restart, "
        "from their heartbeats",
        f"out: results received; checked: those the reference expects of windows that end by the cutoff, "
        f"{report.settle:g} s (settle) before the last event time; after the cutoff: results received of later "
        "windows, which may still be open, not checked",
        f"latency: each result once, from its window's end (or its record's event time) to its arrival, {warmup}",
        "WAN: bytes the emulated links carried, both directions, from setup to the end of the drain",
    ]


def render(reports: Sequence[Report]) -> Any:
    """A rich renderable with the reports side by side (one column per run)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    summary = summarise(reports)
    table = Table(title=Text(summary.title), show_lines=False)
    table.add_column("measure", style="bold")
    for column in summary.columns:  # text, never markup: names come from the user's files
        table.add_column(Text(column), justify="right")
    for name, cells in summary.rows:
        table.add_row(Text(name), *map(Text, cells))
    lines = [Text(n, style="dim") for n in summary.legend] + [Text(e) for e in summary.events]
    return Group(table, *lines, *(Text(p, style="yellow") for p in summary.problems))


def _kept_up_cell(report: Report) -> str:
    if not report.fell_behind:
        return "yes" if report.drained else "no: not drained"
    return f"could not keep up: {report.queued} records still queued"


def _lost_cell(report: Report) -> str:
    if report.fell_behind:  # not lost: still on their way (see the row above)
        return f"- ({report.lost} not yet arrived)"
    return str(report.lost) + ("" if report.drained else " (not drained)")


def _backlog_cell(report: Report) -> str:
    return f"{max((s.max_backlog for s in report.sites), default=0)} / {sum(s.backlog or 0 for s in report.sites)}"


def _op_cell(report: Report, op: str) -> str:
    counts = report.operators.get(op)
    return "-" if counts is None else f"{counts.get('in', 0)} -> {counts.get('out', 0)}"


def _replan_cell(report: Report) -> str:
    if report.replans is None:
        return "-"
    return f"{report.replans} ({report.plan_changes if report.plan_changes is not None else '?'})"


def _stream_cell(report: Report, i: int) -> str:
    if i >= len(report.streams):
        return "-"
    s = report.streams[i]
    return f"{s.sent}" + (f" ({s.malformed} malformed)" if s.malformed else "")


def _sink_cell(report: Report, i: int) -> str:
    if i >= len(report.sinks):
        return "-"
    c = report.sinks[i]
    if c.unchecked:
        return f"{c.received} (unchecked)"
    later = f"; {c.after_cutoff} after the cutoff" if c.after_cutoff else ""
    return f"{c.received} ({c.checked} checked: {c.missing} missing, {c.wrong} wrong{later})"


def _latency_cell(latency: Latency, warmup: float) -> str:
    if not latency.count:
        return f"no results after the {warmup:g} s warm-up" if warmup > 0 else "no results"
    return f"{_ms(latency.p50)} / {_ms(latency.p95)} / {_ms(latency.p99)} ({latency.count} results)"


def _dead_cell(report: Report) -> str:
    return f"{sum(s.dead_lettered for s in report.sites)} ({sum(s.expected_dead for s in report.sites)})"
