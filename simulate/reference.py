"""The expected sink results of an app, computed in plain Python from what the sensors sent.

Record-level operators run the user's functions through the runtime's
:func:`~spanedge.runtime.apply`. Windows are assigned here, independently of
the runtime: tumbling and sliding windows per key (per source site for
``@local`` windows) from epoch-aligned starts, session windows per key closing
after ``gap`` seconds without a record. What a window computes over its
records is the runtime's :class:`~spanedge.runtime.windows.Aggregations`
(built-in and the app's custom ones), and a record whose key or aggregated
fields the runtime cannot read is an expected dead letter, as at the edge.
Hub ``transform`` functions are not evaluated: sinks behind them are reported
as unchecked. Given the outputs of the operators that ran elsewhere (the edge
part of ``spanedge preview``), it evaluates only the operators after them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spanedge.app import App
from spanedge.dag import OperatorGraph
from spanedge.operators import Kind, Operator, WindowKind, WindowSpec
from spanedge.runtime import WINDOW_TIME_OFFSET, apply, failure
from spanedge.runtime.windows import AggregationError, Aggregations, FieldError, WindowState
from spanedge.scope import Scope


@dataclass(frozen=True, slots=True)
class Item:
    """A record in the reference run: its source site, event time and value."""

    site: str
    event_time: float
    value: Any


@dataclass(frozen=True, slots=True)
class Member:
    """A record in a window: the item, its window key and the field values its aggregations read."""

    item: Item
    key: Any
    values: list[Any]


@dataclass(frozen=True, slots=True)
class Failure:
    """A record (or a window's results) an operator failed on: where the record came from, why, and its value."""

    operator: str
    site: str
    reason: str
    value: Any


@dataclass
class Expected:
    """Expected results per sink; ``unchecked`` names sinks the reference cannot evaluate.

    ``errors`` counts the expected dead letters per source site and ``failures``
    lists them; ``counts`` holds the records into and out of each evaluated operator.
    """

    sinks: dict[str, list[Item]] = field(default_factory=dict)
    windowed: dict[str, WindowSpec] = field(default_factory=dict)
    reshaped: set[str] = field(default_factory=set)
    """Sinks fed by a window through maps that reshape its results: records, checked up to the cutoff."""
    unchecked: dict[str, str] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    failures: list[Failure] = field(default_factory=list)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)

    def fail(self, op: Operator, site: str, reason: str, value: Any) -> None:
        """Count an expected dead letter of ``op`` for a record of ``site``."""
        self.errors[site] += 1
        self.failures.append(Failure(op.name, site, reason, value))


def window_starts(spec: WindowSpec, t: float) -> list[float]:
    """Starts of the windows (epoch-aligned) that contain event time ``t``."""
    size = spec.size or 0.0
    slide = spec.slide or size
    last = math.floor(t / slide) * slide
    starts = []
    start = last
    while start > t - size:
        starts.append(round(start, 6))
        start -= slide
    return sorted(starts)


def _window(op: Operator, items: list[Item], expected: Expected) -> list[Item]:
    spec = op.window
    assert spec is not None
    # the runtime reads a record's key and aggregated fields; which windows the record joins is decided here
    state = WindowState(spec)
    per_site = op.scope is Scope.LOCAL
    groups: dict[tuple[str, Any, float], list[Member]] = defaultdict(list)
    members: list[Member] = []
    for item in items:
        try:
            members.append(Member(item, state.key_of(item.value), state.aggs.values(item.value)))
        except FieldError as exc:  # the runtime dead-letters a record its window cannot read
            expected.fail(op, item.site, f"window {op.name}: {exc}", item.value)
    if spec.kind is WindowKind.SESSION:
        for (site, key), mine in _by_key(members, per_site).items():
            start = last = None
            for m in sorted(mine, key=lambda m: m.item.event_time):
                if last is None or m.item.event_time - last >= (spec.gap or 1.0):
                    start = m.item.event_time
                last = m.item.event_time
                assert start is not None
                groups[(site, key, start)].append(m)
    else:
        for m in members:
            for start in window_starts(spec, m.item.event_time):
                groups[(m.item.site if per_site else "", m.key, start)].append(m)
    out = []
    for (site, key, start), mine in sorted(groups.items(), key=lambda kv: (kv[0][2], str(kv[0][1]))):
        if spec.kind is WindowKind.SESSION:
            end = max(m.item.event_time for m in mine) + (spec.gap or 1.0)
        else:
            end = round(start + (spec.size or 0.0), 6)
        where = site or mine[0].item.site
        value: dict[str, Any] = {spec.key: key, "window_start": start, "window_end": end}
        try:
            results = _aggregate(state.aggs, mine)
        except AggregationError as exc:  # the runtime emits no result for the window and dead-letters the failure
            expected.fail(op, where, str(exc), value)
            continue
        value.update(results)
        out.append(Item(where, end - WINDOW_TIME_OFFSET, value))
    return out


def _aggregate(aggs: Aggregations, members: list[Member]) -> dict[str, Any]:
    """The runtime's aggregations over the members of one window."""
    accs = aggs.zero()
    for m in members:
        aggs.add(accs, m.values)
    return aggs.results(accs)


def _by_key(members: list[Member], per_site: bool) -> dict[tuple[str, Any], list[Member]]:
    out: dict[tuple[str, Any], list[Member]] = defaultdict(list)
    for m in members:
        out[(m.item.site if per_site else "", m.key)].append(m)
    return out


def evaluate(app: App, sources: dict[str, list[Item]], given: Mapping[str, list[Item]] | None = None) -> Expected:
    """Run the app over ``sources`` (records per source stream) and return the expected sink results.

    With ``given`` (the outputs of operators that ran elsewhere, by operator
    name), only the operators downstream of them run, from those outputs.
    """
    graph = app.graph()
    outputs: dict[str, list[Item]] = dict(given or {})
    run = set(graph.order) if given is None else {d for g in given for d in graph.descendants(g)} - set(given)
    expected = Expected()
    broken: dict[str, str] = {}
    for name in graph.order:
        if name not in run:
            continue
        op = graph.op(name)
        inputs = [item for up in op.inputs for item in outputs.get(up, [])]
        why = next((broken[up] for up in op.inputs if up in broken), None)
        if why is not None:
            broken[name] = why
        if op.kind is Kind.SOURCE:
            outputs[name] = list(sources.get(op.stream_name, []))
        elif op.record_level:
            outputs[name] = list(_apply(op, inputs, expected))
        elif op.kind is Kind.UNION:
            outputs[name] = inputs
        elif op.kind is Kind.WINDOW and op.window is not None:
            outputs[name] = [] if name in broken else _window(op, inputs, expected)
        elif op.kind is Kind.TRANSFORM:
            broken[name] = f"transform '{name}' is PySpark code, which only the hub's Spark runs"
            outputs[name] = []
        elif op.kind is Kind.SINK:
            outputs[name] = inputs
            if name in broken:
                expected.unchecked[name] = broken[name]
            else:
                expected.sinks[name] = inputs
                spec = _upstream_window(graph, name)
                # a map after the window may reshape its results: then they are checked as records
                if spec is not None and all(_shows_window(i.value, spec) for i in inputs):
                    expected.windowed[name] = spec
                elif spec is not None:
                    expected.reshaped.add(name)
        if name not in broken:
            expected.counts[name] = (len(inputs) if op.inputs else len(outputs[name]), len(outputs[name]))
    return expected


def _apply(op: Operator, items: Iterable[Item], expected: Expected) -> Iterable[Item]:
    for item in items:
        results: list[Any] | None = None
        try:
            results = list(apply(op, item.value))
        except Exception as exc:  # a user function failing on a record makes a dead letter, not a crash
            expected.fail(op, item.site, failure(op, exc), item.value)
        for value in results or ():
            yield Item(item.site, item.event_time, value)


def _shows_window(value: Any, spec: WindowSpec) -> bool:
    """Whether a result still names its window: its key, start and end."""
    return isinstance(value, dict) and {spec.key, "window_start", "window_end"} <= value.keys()


def _upstream_window(graph: OperatorGraph, sink: str) -> WindowSpec | None:
    """The nearest window upstream of ``sink`` through record-level operators only."""
    node = sink
    while True:
        preds = graph.predecessors(node)
        if len(preds) != 1:
            return None
        node = preds[0]
        op = graph.op(node)
        if op.window is not None:
            return op.window
        if not (op.record_level or op.kind is Kind.UNION):
            return None
