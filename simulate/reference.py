"""The expected sink results of an app, computed in plain Python from what the sensors sent.

Record-level operators run the user's functions; tumbling and sliding windows
are evaluated per key (per source site for ``@local`` windows) with the
built-in aggregations or the app's custom ones; session windows per key close
after ``gap`` seconds without a record. Hub ``transform`` functions are not
evaluated: sinks behind them are reported as unchecked.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from spanedge.aggregations import Agg
from spanedge.app import App
from spanedge.operators import Kind, Operator, WindowKind, WindowSpec
from spanedge.scope import Scope

#: A window's results carry the event time ``window_end`` less this, as in the agents and the hub,
#: so that a downstream window puts them in the window that contains their upstream window.
WINDOW_TIME_OFFSET = 0.001


@dataclass(frozen=True, slots=True)
class Item:
    """A record in the reference run: its source site, event time and value."""

    site: str
    event_time: float
    value: Any


@dataclass
class Expected:
    """Expected results per sink; ``unchecked`` names sinks the reference cannot evaluate."""

    sinks: dict[str, list[Item]] = field(default_factory=dict)
    windowed: dict[str, WindowSpec] = field(default_factory=dict)
    unchecked: dict[str, str] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def _aggregate(agg: Agg, values: list[dict[str, Any]]) -> Any:
    if agg.func == "count" and agg.custom is None:
        return len(values)
    column = [v.get(agg.field) for v in values if isinstance(v, dict)] if agg.field else values
    if agg.custom is not None:
        acc = agg.custom.zero()
        for x in column:
            acc = agg.custom.add(acc, x)
        return agg.custom.result(acc)
    numbers = [float(x) for x in column if isinstance(x, int | float) and not isinstance(x, bool)]
    if not numbers:
        return None
    if agg.func == "sum":
        return math.fsum(numbers)
    if agg.func == "mean":
        return math.fsum(numbers) / len(numbers)
    if agg.func == "min":
        return min(numbers)
    if agg.func == "max":
        return max(numbers)
    msg = f"unknown aggregation {agg.func!r}"
    raise ValueError(msg)


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


def _window(op: Operator, items: list[Item]) -> list[Item]:
    spec = op.window
    assert spec is not None
    per_site = op.scope is Scope.LOCAL
    groups: dict[tuple[str, Any, float], list[Item]] = defaultdict(list)
    keyed = [i for i in items if isinstance(i.value, dict) and spec.key in i.value]
    if spec.kind is WindowKind.SESSION:
        for (site, key), members in _by_key(keyed, spec.key, per_site).items():
            start = last = None
            for item in sorted(members, key=lambda i: i.event_time):
                if last is None or item.event_time - last >= (spec.gap or 1.0):
                    start = item.event_time
                last = item.event_time
                assert start is not None
                groups[(site, key, start)].append(item)
    else:
        for item in keyed:
            for start in window_starts(spec, item.event_time):
                groups[(item.site if per_site else "", item.value[spec.key], start)].append(item)
    out = []
    for (site, key, start), members in sorted(groups.items(), key=lambda kv: (kv[0][2], str(kv[0][1]))):
        if spec.kind is WindowKind.SESSION:
            end = max(m.event_time for m in members) + (spec.gap or 1.0)
        else:
            end = round(start + (spec.size or 0.0), 6)
        value: dict[str, Any] = {spec.key: key, "window_start": start, "window_end": end}
        for name, agg in spec.aggs:
            value[name] = _aggregate(agg, [m.value for m in members])
        out.append(Item(site or members[0].site, end - WINDOW_TIME_OFFSET, value))
    return out


def _by_key(items: list[Item], key: str, per_site: bool) -> dict[tuple[str, Any], list[Item]]:
    out: dict[tuple[str, Any], list[Item]] = defaultdict(list)
    for item in items:
        out[(item.site if per_site else "", item.value[key])].append(item)
    return out


def evaluate(app: App, sources: dict[str, list[Item]]) -> Expected:
    """Run the app over ``sources`` (records per source stream) and return the expected sink results."""
    graph = app.graph()
    outputs: dict[str, list[Item]] = {}
    expected = Expected()
    broken: dict[str, str] = {}
    for name in nx.topological_sort(graph):
        op: Operator = graph.nodes[name]["op"]
        inputs = [item for up in op.inputs for item in outputs.get(up, [])]
        why = next((broken[up] for up in op.inputs if up in broken), None)
        if why is not None:
            broken[name] = why
        if op.kind is Kind.SOURCE:
            outputs[name] = list(sources.get(op.stream or name, []))
        elif op.record_level:
            outputs[name] = list(_apply(op, inputs, expected))
        elif op.kind is Kind.UNION:
            outputs[name] = inputs
        elif op.kind is Kind.WINDOW and op.window is not None:
            outputs[name] = [] if name in broken else _window(op, inputs)
        elif op.kind is Kind.TRANSFORM:
            broken[name] = f"transform '{name}' runs PySpark code the reference does not evaluate"
            outputs[name] = []
        elif op.kind is Kind.SINK:
            if name in broken:
                expected.unchecked[name] = broken[name]
            else:
                expected.sinks[name] = inputs
                spec = _upstream_window(graph, name)
                if spec is not None:
                    expected.windowed[name] = spec
    return expected


def _apply(op: Operator, items: Iterable[Item], expected: Expected) -> Iterable[Item]:
    for item in items:
        results: list[Any] | None = None
        try:
            results = list(op.apply(item.value))
        except Exception:  # a user function failing on a record makes a dead letter, not a crash
            expected.errors[item.site] += 1
        for value in results or ():
            yield Item(item.site, item.event_time, value)


def _upstream_window(graph: nx.DiGraph, sink: str) -> WindowSpec | None:
    """The nearest window upstream of ``sink`` through record-level operators only."""
    node = sink
    while True:
        preds = list(graph.predecessors(node))
        if len(preds) != 1:
            return None
        node = preds[0]
        op: Operator = graph.nodes[node]["op"]
        if op.window is not None:
            return op.window
        if not (op.record_level or op.kind is Kind.UNION):
            return None
