"""Checking results: what the sinks published against the reference run of what the sensors sent.

Window results are matched on ``(key, window_start)``: a window received
twice is a duplicate; a window missing or short of records is a loss (in
records when the window counts them). Values are compared whenever a result
exists: a window whose aggregates differ from the reference's, its count
included, is wrong, so a partial window is both short and wrong. Only windows
that end at least ``settle`` seconds before the last event time are checked:
later ones may still be open. Other sinks are compared as multisets of values.

A site killed for good (``kill-site``) destroys what it was handling: the
records in flight in its own agent and in the replicas it ran for other sites,
until a re-plan moved them (:mod:`simulate.site_losses`). A result that
depends on such a record (it differs in a reference run without them) and
did not arrive whole is counted as ``destroyed``, not lost nor wrong; every
other result is checked as usual. A site that joined mid-run is checked from
the switch of its join on, where the hub starts counting its data.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict, deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from simulate.joins import counted
from simulate.reference import Expected, Item, evaluate
from simulate.report import Latency, SinkCheck, SiteCount, StreamCount, epoch
from simulate.results import Collector, Result
from simulate.sensors import Sent
from simulate.site_losses import Destroyed
from spanedge.app import App
from spanedge.numbers import is_number
from spanedge.operators import Kind, Operator, WindowSpec

WindowKey = tuple[str, float]
"""A window result's identity: its key (as text) and its start (rounded to milliseconds)."""


def scope_tier(app: App, sink: str) -> str:
    """``global`` if the sink or anything upstream runs only at the hub, else ``local``."""
    graph = app.graph()
    names = {sink, *graph.ancestors(sink)}
    return "global" if any(graph.op(n).hub_only for n in names) else "local"


def source_time_field(app: App) -> str | None:
    """The event-time field of the app's sources (the first one that names one)."""
    return next((op.time_field for op in app.operators.values() if op.kind is Kind.SOURCE and op.time_field), None)


@dataclass
class AtRisk:
    """The expected results that depend on destroyed records: window keys and record values, per sink."""

    windows: dict[str, set[WindowKey]] = field(default_factory=dict)
    records: dict[str, Counter[bytes]] = field(default_factory=dict)


@dataclass
class Reference:
    """The expected results of what the sensors sent, the cutoff of checkable windows, and the messages per stream."""

    expected: Expected
    cutoff: float
    streams: dict[tuple[str, str], StreamCount] = field(default_factory=dict)
    items: dict[str, list[Item]] = field(default_factory=dict)
    unwatched: frozenset[str] = frozenset()
    """Sinks whose results do not come over MQTT (a device's, read back at the end): never waited for."""

    @classmethod
    def of(
        cls,
        app: App,
        sent: Iterable[Sent],
        settle: float,
        t0: float,
        dead: Iterable[str] = (),
        joined: Mapping[str, float] | None = None,
    ) -> Reference:
        """Run the reference over the well-formed messages in ``sent``.

        The cutoff is the last event time of the site that sent the least far,
        less ``settle`` (``t0`` less ``settle`` if nothing was sent); sites in
        ``dead`` (killed for good, their sensors stopped) do not hold it back.
        A site that joined mid-run counts from the switch time of its join on
        (``joined``, site: switch): the hub takes none of its records before it
        (:func:`simulate.joins.counted`).
        """
        items: dict[str, list[Item]] = {}
        max_event: dict[str, float] = {}
        streams: dict[tuple[str, str], StreamCount] = {}
        for record in sent:
            m = record.message
            count = streams.setdefault((m.stream, m.site), StreamCount(m.stream, m.site))
            count.sent += 1
            if m.malformed:
                count.malformed += 1
                continue
            assert m.event_time is not None, "well-formed messages carry their event time"
            if not counted(m.site, m.event_time, joined or {}):
                continue
            items.setdefault(m.stream, []).append(Item(m.site, m.event_time, m.value))
            max_event[m.site] = max(max_event.get(m.site, 0.0), m.event_time)
        alive = [t for site, t in max_event.items() if site not in set(dead)]
        cutoff = (min(alive) if alive else t0) - settle
        unwatched = frozenset(
            op.name
            for op in app.operators.values()
            if op.kind is Kind.SINK and (op.sink is None or op.sink.kind != "mqtt")
        )
        return cls(evaluate(app, items), cutoff, streams, items, unwatched)

    def at_risk(self, app: App, destroyed: Sequence[Destroyed]) -> AtRisk:
        """The expected results that differ, or are missing, in a reference run without the ``destroyed`` records."""
        risk = AtRisk()
        if not destroyed:
            return risk
        kept = {
            stream: [i for i in items if not any(d.covers(i.site, i.event_time) for d in destroyed)]
            for stream, items in self.items.items()
        }
        reduced = evaluate(app, kept)
        for sink, want in self.expected.sinks.items():
            spec = self.expected.windowed.get(sink)
            other = reduced.sinks.get(sink, [])
            if spec is not None and sink not in self.expected.reshaped:
                after = {_want_key(i, spec): _canon(i.value) for i in other}
                risk.windows[sink] = {k for i in want if after.get(k := _want_key(i, spec)) != _canon(i.value)}
            else:
                risk.records[sink] = Counter(_canon(i.value) for i in want) - Counter(_canon(i.value) for i in other)
        return risk

    def missing(self, results: Sequence[Result], risk: AtRisk | None = None) -> int:
        """Checkable results that have not arrived yet (windows by key and start, others by count).

        Results in ``risk`` (they depend on records a dead site destroyed) are not waited for.
        """
        missing = 0
        risk = risk or AtRisk()
        for sink, want in self.expected.sinks.items():
            if sink in self.unwatched:
                continue
            got = [r for r in results if r.sink == sink]
            spec = self.expected.windowed.get(sink)
            risky = risk.records.get(sink, Counter())
            if sink in self.expected.reshaped:
                arrived = Counter(_canon(r.value) for r in got)
                due = Counter(_canon(i.value) for i in want if i.event_time <= self.cutoff)
                missing += sum((due - arrived - risky).values())
                continue
            if spec is None:
                missing += max(0, len(want) - sum(risky.values()) - len(got))
                continue
            seen = {_received_key(r.value, spec) for r in got} | risk.windows.get(sink, set())
            missing += sum(
                1 for i in want if float(i.value["window_end"]) <= self.cutoff and _want_key(i, spec) not in seen
            )
        return missing


def check_sinks(
    app: App,
    reference: Reference,
    results: Sequence[Result],
    latency_from: float,
    destroyed: Sequence[Destroyed] = (),
    repeats: Collection[tuple[str, str]] = (),
) -> tuple[list[SinkCheck], dict[str, list[float]]]:
    """Check every sink of ``app``; return the checks and each sink's latencies in seconds.

    Results that depend on ``destroyed`` records and did not arrive whole count as destroyed.
    A result that came twice, once from the broker of a site killed for good and once from
    the site that recomputed its part (a pair of ``repeats``, :func:`simulate.site_losses.recoveries`),
    counts as repeated, not duplicated.
    """
    time_field = source_time_field(app)
    risk = reference.at_risk(app, destroyed)
    checks: list[SinkCheck] = []
    latencies: dict[str, list[float]] = {}
    for op in app.operators.values():
        if op.kind is not Kind.SINK:
            continue
        received = [r for r in results if r.sink == op.name]
        check, lat = _check_operator(app, op, reference, received, time_field, latency_from, risk)
        _count_repeats(check, received, reference.expected.windowed.get(op.name), repeats)
        checks.append(check)
        latencies[op.name] = lat
    return checks, latencies


def _check_operator(
    app: App,
    op: Operator,
    reference: Reference,
    received: Sequence[Result],
    time_field: str | None,
    latency_from: float,
    risk: AtRisk,
) -> tuple[SinkCheck, list[float]]:
    expected = reference.expected
    window = expected.windowed.get(op.name)
    want: list[Item] | None = None
    unchecked: str | None = None
    if op.sink is None or op.sink.kind != "mqtt":
        window = None
        unchecked = f"{op.sink.kind if op.sink else '?'} sink: the simulator only watches mqtt sinks"
    elif op.name in expected.unchecked:
        unchecked = expected.unchecked[op.name]
    else:
        want = expected.sinks.get(op.name, [])
    tier = scope_tier(app, op.name)
    late: Counter[bytes] = Counter()
    arrived = len(received)
    if want is not None and op.name in expected.reshaped:
        # results of windows that end after the cutoff may still be open: neither expected nor counted
        late = Counter(_canon(i.value) for i in want if i.event_time > reference.cutoff)
        want = [i for i in want if i.event_time <= reference.cutoff]
        received = _without(received, late)
    check, lat = check_sink(
        op.name,
        tier,
        received,
        want,
        window,
        reference.cutoff,
        time_field,
        latency_from,
        risk.windows.get(op.name, set()),
        risk.records.get(op.name, Counter()),
    )
    check.open_at_end += sum(late.values())
    check.after_cutoff += arrived - len(received)
    check.received = arrived
    check.unchecked = unchecked
    return check, lat


def _count_repeats(
    check: SinkCheck, received: Sequence[Result], window: WindowSpec | None, repeats: Collection[tuple[str, str]]
) -> None:
    """Move from ``check.duplicates`` to ``check.repeated`` the results that came from both sites of a pair of ``repeats``."""
    if not repeats or not check.duplicates:
        return
    sites: dict[Any, set[str]] = defaultdict(set)
    counts: Counter[Any] = Counter()
    for r in received:
        key = _received_key(r.value, window) if window is not None else _canon(r.value)
        sites[key].add(r.site)
        counts[key] += 1
    repeated = sum(
        n - 1 for key, n in counts.items() if n > 1 and any(d in sites[key] and by in sites[key] for d, by in repeats)
    )
    moved = min(repeated, check.duplicates)
    check.repeated += moved
    check.duplicates -= moved


def _without(received: Sequence[Result], values: Counter[bytes]) -> list[Result]:
    """``received`` less one result per occurrence in ``values`` (canonical JSON)."""
    left = Counter(values)
    kept = []
    for r in received:
        key = _canon(r.value)
        if left[key] > 0:
            left[key] -= 1
        else:
            kept.append(r)
    return kept


def check_sink(
    sink: str,
    tier: str,
    received: Sequence[Result],
    expected: Sequence[Item] | None,
    window: WindowSpec | None,
    cutoff: float,
    time_field: str | None = None,
    latency_from: float = 0.0,
    risky_windows: set[WindowKey] | None = None,
    risky_records: Counter[bytes] | None = None,
) -> tuple[SinkCheck, list[float]]:
    """Compare one sink's results with the reference (``expected=None``: not checkable).

    ``risky_windows`` and ``risky_records`` are the expected results that depend on records a
    dead site destroyed (:meth:`Reference.at_risk`): missing or short, they count as destroyed.

    Returns the check and the sink's latencies in seconds (first arrival of each result).
    """
    check = SinkCheck(sink, tier, received=len(received))
    if window is not None:
        latencies = _check_windows(check, received, expected, window, cutoff, latency_from, risky_windows or set())
    else:
        latencies = _check_records(check, received, expected, time_field, latency_from, risky_records or Counter())
    check.latency = Latency.of(latencies)
    return check, latencies


def _check_windows(
    check: SinkCheck,
    received: Sequence[Result],
    expected: Sequence[Item] | None,
    window: WindowSpec,
    cutoff: float,
    latency_from: float,
    risky: set[WindowKey],
) -> list[float]:
    got: dict[WindowKey, list[Result]] = defaultdict(list)
    for r in received:
        key = _received_key(r.value, window)
        if key is None:
            check.unexpected += 1
        else:
            got[key].append(r)
    latencies = []
    for rs in got.values():
        check.duplicates += len(rs) - 1
        end = epoch(rs[0].value.get("window_end"))
        if end is not None and end >= latency_from:
            latencies.append(rs[0].received_at - end)
    if expected is None:
        return latencies
    for rs in got.values():
        end = epoch(rs[0].value.get("window_end"))
        if end is not None and end > cutoff:
            check.after_cutoff += 1
    want = {_want_key(i, window): i.value for i in expected}
    check.expected = len(want)
    for key, value in want.items():
        if float(value["window_end"]) > cutoff:
            check.open_at_end += 1
        else:
            check.checked += 1
            hits = got.get(key)
            _compare_window(check, key, value, hits[0].value if hits else None, window, key in risky)
    for key, rs in got.items():
        end = epoch(rs[0].value.get("window_end"))
        if key not in want and end is not None and end <= cutoff:
            check.unexpected += 1
            _example(check, f"unexpected {key}: {_short(rs[0].value)}")
    return latencies


def _compare_window(
    check: SinkCheck,
    key: WindowKey,
    want: dict[str, Any],
    got: dict[str, Any] | None,
    window: WindowSpec,
    risky: bool = False,
) -> None:
    """Count one checkable window: missing, short or long in records, and wrong if any aggregate differs.

    A ``risky`` window (it depends on records a dead site destroyed) that is missing or differs is destroyed.
    """
    count = _count_field(window)
    n = int(want[count]) if count else 0
    if risky and (got is None or any(not _close(got.get(name), want[name]) for name, _ in window.aggs)):
        check.destroyed += 1
        return
    if got is None:
        check.missing += 1
        check.lost_records += n if count else 1
        _example(check, f"missing {key} (n={n})")
        return
    notes = []
    if count is not None:
        have = int(got.get(count) or 0)
        check.lost_records += max(0, n - have)
        check.extra_records += max(0, have - n)
        if have != n:
            notes.append(f"{have} records, want {n}")
    if notes or any(not _close(got.get(name), want[name]) for name, _ in window.aggs):
        check.wrong += 1
        notes.append(f"wrong: got {_short(got)}, want {_short(want)}")
    if notes:
        _example(check, f"{key}: {'; '.join(notes)}")


def _check_records(
    check: SinkCheck,
    received: Sequence[Result],
    expected: Sequence[Item] | None,
    time_field: str | None,
    latency_from: float,
    risky: Counter[bytes],
) -> list[float]:
    latencies = []
    times = _event_times(expected or ())
    want = Counter({value: len(at) for value, at in times.items()})
    got: Counter[bytes] = Counter()
    for r in received:
        value = _canon(r.value)
        got[value] += 1
        t = epoch(r.value.get(time_field)) if time_field and isinstance(r.value, dict) else None
        if t is None and (waiting := times.get(value)):  # no source time in it (a map reshaped a window's result)
            t = waiting.popleft()  # the reference's event time for it: its window's end
        if t is not None and t >= latency_from:
            latencies.append(r.received_at - t)
    if expected is not None:
        check.expected = check.checked = sum(want.values())
        absent = want - got
        destroyed = absent & risky
        check.destroyed = sum(destroyed.values())
        check.missing = check.lost_records = sum((absent - destroyed).values())
        for value in sorted(absent - destroyed, key=lambda v: times[v][0] if times.get(v) else 0.0):
            _example(check, f"missing {value.decode(errors='replace')[:160]}")
        surplus = got - want
        check.duplicates = sum(n for v, n in surplus.items() if v in want)
        check.unexpected = sum(n for v, n in surplus.items() if v not in want)
    return latencies


def _event_times(expected: Iterable[Item]) -> dict[bytes, deque[float]]:
    """The event times of the expected results by canonical value, earliest first (each arrival takes one)."""
    times: dict[bytes, deque[float]] = defaultdict(deque)
    for item in sorted(expected, key=lambda i: i.event_time):
        times[_canon(item.value)].append(item.event_time)
    return times


def site_counts(
    collector: Collector, spokes: Iterable[str], reference: Reference, sensor_failures: dict[str, int]
) -> list[SiteCount]:
    """What each spoke's agent reported (dead letters, late records, backlog) next to the dead letters expected."""
    out = []
    for spoke in spokes:
        malformed = sum(c.malformed for c in reference.streams.values() if c.site == spoke)
        out.append(
            SiteCount(
                site=spoke,
                dead_lettered=max(collector.dlq.get(spoke, 0), int(collector.counter(spoke, "dlq"))),
                expected_dead=malformed + reference.expected.errors.get(spoke, 0),
                late=int(collector.counter(spoke, "late")),
                dropped=int(collector.counter(spoke, "outbox", "dropped")),
                backlog=collector.backlog(spoke),
                max_backlog=collector.max_backlog.get(spoke, 0),
                sensor_failures=sensor_failures.get(spoke, 0),
            )
        )
    return out


def _received_key(value: Any, window: WindowSpec) -> WindowKey | None:
    start = epoch(value.get("window_start")) if isinstance(value, dict) else None
    return None if start is None else (str(value.get(window.key)), round(start, 3))


def _want_key(item: Item, window: WindowSpec) -> WindowKey:
    return (str(item.value[window.key]), round(float(item.value["window_start"]), 3))


def _close(a: Any, b: Any) -> bool:
    if is_number(a) and is_number(b):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-3)
    return bool(a == b)


def _count_field(window: WindowSpec) -> str | None:
    return next((name for name, agg in window.aggs if agg.func == "count" and agg.custom is None), None)


def _canon(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _short(value: Any) -> str:
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= 160 else text[:157] + "..."


def _example(check: SinkCheck, text: str) -> None:
    if len(check.examples) < 5:
        check.examples.append(text)
