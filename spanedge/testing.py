"""Run the edge part of an app over lists of records, with no broker.

>>> from spanedge.testing import run_edge
>>> result = run_edge(app, {"readings": [{"unit": "u1", "ts": 0.0, "temp_f": 40.0}]}, site="truck-7")  # doctest: +SKIP
>>> result.sinks["local_stats"], result.to_hub["unit_stats"], result.dlq  # doctest: +SKIP

The edge agent's own runtime processes the records, so windows, watermarks,
late records and the dead-letter queue behave exactly as at a site. Time is
deterministic: event time comes from the records, and ``now`` fixes the
agent clock (arrival time and the far-future bound).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spanedge.wire.batch import Record

if TYPE_CHECKING:
    from spanedge.app import App
    from spanedge.plan import Plan
    from spanedge.sites import Sites


@dataclass(frozen=True)
class DeadLetter:
    """A record the edge could not process, or one that came too late."""

    reason: str
    operator: str
    payload: str


@dataclass
class EdgeResult:
    """What the edge part of an app produced.

    Attributes:
        sinks: values per local sink operator name.
        to_hub: records per stream (operator name) that would cross to the hub, in envelope form.
        dlq: dead letters (bad JSON, missing event time, a function that raised, far-future events).
        late: records that arrived after their windows fired.
        watermark: the watermark at the end (``inf`` after a flush).
        metrics: records in and out per replica.
    """

    sinks: dict[str, list[Any]] = field(default_factory=dict)
    to_hub: dict[str, list[Record]] = field(default_factory=dict)
    dlq: list[DeadLetter] = field(default_factory=list)
    late: list[DeadLetter] = field(default_factory=list)
    watermark: float = -math.inf
    metrics: dict[str, dict[str, int]] = field(default_factory=dict)

    def values(self, stream: str) -> list[Any]:
        """The values of the records that would cross to the hub on ``stream``."""
        return [r.value for r in self.to_hub.get(stream, [])]


def run_edge(
    app: App,
    records: Mapping[str, Iterable[Any]] | Iterable[tuple[str, Any]],
    *,
    site: str = "edge",
    plan: Plan | None = None,
    now: float | None = None,
    out_of_orderness: float = 0.0,
    max_future_skew: float | None = None,
    flush: bool = True,
) -> EdgeResult:
    """Run the operators an edge site would run over ``records``.

    Args:
        app: the app.
        records: per source stream, the sensor messages (dicts, or raw JSON text/bytes), processed
            stream after stream; or ``(stream, message)`` pairs, processed in the order given.
        site: the site name the records are attributed to.
        plan: run what this plan puts at ``site``; by default every operator that can run at the
            edge does (not hub-only and fed only by such operators).
        now: the agent clock in epoch seconds; arrival time for sources without ``time_field``
            and the reference for ``max_future_skew``. Without it the far-future check is off.
        out_of_orderness: seconds the watermark stays behind the newest event time.
        max_future_skew: events further ahead of ``now`` go to the DLQ (default 300 s with ``now``).
        flush: fire every open window at the end, as if event time had ended.
    """
    import time

    from spanedge.runtime import edge_part, from_plan

    clock = (lambda: now) if now is not None else time.time
    skew = max_future_skew if max_future_skew is not None else (300.0 if now is not None else math.inf)
    options: dict[str, Any] = {"out_of_orderness": out_of_orderness, "max_future_skew": skew, "clock": clock}
    pipeline = from_plan(app, plan, site, **options) if plan is not None else edge_part(app, site, **options)
    by_stream: dict[str, str] = {}
    for replica, node in pipeline.sources.items():
        name = node.op.stream_name
        if name not in by_stream or node.group == site:
            by_stream[name] = replica

    def target_of(stream: str) -> str:
        target = by_stream.get(stream)
        if target is None:
            known = ", ".join(sorted(by_stream)) or "none"
            msg = f"app '{app.name}' has no source stream {stream!r} running at the edge (streams: {known})"
            raise KeyError(msg)
        return target

    process, process_value = pipeline.process, pipeline.process_value
    raw_types = (bytes, str)
    if isinstance(records, Mapping):
        for stream, values in records.items():
            target = by_stream.get(stream)
            for value in values:
                if target is None:
                    target = target_of(stream)  # raises: an unknown stream with records
                if isinstance(value, raw_types):
                    process(target, value, now)
                else:
                    process_value(target, value, now)
    else:
        for stream, value in records:
            if isinstance(value, raw_types):
                process(target_of(stream), value, now)
            else:
                process_value(target_of(stream), value, now)
    if flush:
        pipeline.flush()
    out = pipeline.take()
    result = EdgeResult(watermark=pipeline.watermark, metrics=pipeline.metrics())
    for item in out.sinks:
        result.sinks.setdefault(item.operator, []).append(item.value)
    seqs: dict[tuple[str, str], int] = {}
    for r in out.to_hub:
        seq = seqs[(r.site, r.stream)] = seqs.get((r.site, r.stream), 0) + 1
        result.to_hub.setdefault(r.stream, []).append(Record(r.site, r.stream, seq, r.event_time, r.key, r.value))
    result.dlq = [DeadLetter(d.reason, d.operator, d.payload) for d in out.dlq]
    result.late = [DeadLetter(d.reason, d.operator, d.payload) for d in out.late]
    return result


def local_plan(app: App, sites: Sites, hub: str | None = None) -> Plan:
    """A plan that runs every edge-capable operator at each source site and the rest at the hub.

    Useful to run agents without the placement solver (tests, demos). Edge
    operators get one replica per site that sources one of their streams;
    the others are singletons at ``hub`` (the first hub of ``sites`` by default).
    """
    from spanedge.operators import Kind

    streams = {op.stream_name for op in app.operators.values() if op.kind is Kind.SOURCE}
    sources = {stream: [s.name for s in sites.sources_of(stream)] for stream in streams}
    return site_plan(app, sources, hub or sites.hubs[0].name)


def site_plan(app: App, sources: Mapping[str, Sequence[str]], hub: str, edge: Collection[str] | None = None) -> Plan:
    """A plan that runs the edge operators at each site sourcing their streams and the rest at ``hub``.

    Args:
        app: the app.
        sources: per source stream, the sites that source it.
        hub: the site the other operators run at, as singletons.
        edge: the operators that get one replica per source site (each fed only by sources and
            such operators); by default every operator that is not hub-only and reads only from them.
    """
    from spanedge.operators import Kind
    from spanedge.plan import Assignment, Flow, Plan, SolverInfo, Totals

    graph = app.graph()
    groups: dict[str, list[str]] = {}  # edge operator -> source sites it has replicas at
    for name in graph.order:
        op = graph.op(name)
        at_edge = name in edge if edge is not None else not op.hub_only
        if op.kind is Kind.SOURCE:
            groups[name] = list(sources.get(op.stream_name, ()))
        elif at_edge and op.inputs and all(u in groups for u in op.inputs):
            groups[name] = sorted({g for u in op.inputs for g in groups[u]})
    assignments: list[Assignment] = []
    for name in graph.order:
        if name in groups:
            assignments.extend(Assignment(f"{name}@{g}", name, g, g, "edge") for g in groups[name])
        else:
            assignments.append(Assignment(name, name, None, hub, "hub"))
    flows: list[Flow] = []
    for u, v in graph.edges:
        if u in groups and v in groups:
            flows.extend(Flow(f"{u}@{g}", f"{v}@{g}", 1.0, 100.0) for g in groups[u] if g in groups[v])
        elif u in groups:
            flows.extend(Flow(f"{u}@{g}", v, 1.0, 100.0) for g in groups[u])
        else:
            flows.append(Flow(u, v, 1.0, 100.0))
    return Plan(
        app=app.name,
        version=1,
        hub=hub,
        assignments=tuple(assignments),
        flows=tuple(flows),
        totals=Totals(0.0, 0.0, 0.0, 0.0),
        solver=SolverInfo("local-first (spanedge.testing)", "feasible", 0.0),
        app_file=f"{app.name}.py",
    )


__all__ = ["DeadLetter", "EdgeResult", "local_plan", "run_edge", "site_plan"]
