"""Running a whole app over records, offline: the edge part per site, then the hub part over every site's output.

The operators the placement replicates per source site (``@local`` ones, and
unscoped record-level operators, unions and sinks fed only by such) run at
each site of the input in the edge agent's runtime (:func:`spanedge.testing.run_edge`),
so watermarks, late records and dead letters behave as at a site, and every
open window fires at the end. The others run once, over the records all sites
would send to the hub, as the simulator's reference computes them
(:func:`simulate.reference.evaluate`): every record counts, whatever its order.
PySpark ``transform`` functions are not run; the operators after one are
reported as not evaluated.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from simulate.reference import Item, evaluate
from spanedge.app import App
from spanedge.dag import OperatorGraph
from spanedge.errors import InvalidDataflow
from spanedge.operators import Kind
from spanedge.plan import split_replica
from spanedge.runtime.outputs import excerpt
from spanedge.scope import Scope

#: The name of the hub in the preview's plan: not a valid site name, so no site of the input is mistaken for it.
HUB = "(hub)"


@dataclass(frozen=True)
class Count:
    """One operator's records in and out, dead letters and late records; ``None`` counts: not evaluated."""

    name: str
    kind: str
    part: str
    """``edge`` (one replica per site) or ``hub`` (once, over every site's records)."""
    records_in: int | None
    records_out: int | None
    dead_letters: int = 0
    late: int = 0


@dataclass(frozen=True)
class Letter:
    """A dead letter or a late record: the operator, where (a site or ``hub``), why, and an excerpt of the record."""

    operator: str
    site: str
    reason: str
    payload: str


@dataclass
class SinkResults:
    """What a sink received, as ``(site, value)`` pairs (site ``hub`` at the hub), or why it was not evaluated."""

    name: str
    part: str
    results: list[tuple[str, Any]] = field(default_factory=list)
    unevaluated: str | None = None


@dataclass
class Preview:
    """What an app did with the records of a file."""

    app: str
    sites: list[str]
    records: int
    operators: list[Count]
    sinks: list[SinkResults]
    dead_letters: list[Letter]
    late: list[Letter]
    cpu_seconds: float = 0.0
    """The process CPU time the run took (user and system, every thread of this process)."""

    @property
    def cpu_per_record(self) -> float | None:
        """CPU seconds per input record, ``None`` without records."""
        return self.cpu_seconds / self.records if self.records else None


def per_site(graph: OperatorGraph) -> set[str]:
    """The operators the placement runs one replica of per source site, sources included.

    Raises:
        InvalidDataflow: a ``@local`` operator reads from one that runs once, over several sites' records.
    """
    out: set[str] = set()
    for name in graph.order:
        op = graph.op(name)
        once = next((u for u in op.inputs if u not in out), None)
        replicated = op.record_level or op.kind in (Kind.UNION, Kind.SINK)
        if op.scope is Scope.LOCAL and once is not None:
            msg = (
                f"operator {op.describe()} is @local but reads from {graph.op(once).describe()}, which runs once "
                f"over every site's records; make {once!r} @local too, or drop @local from {name!r}"
            )
            raise InvalidDataflow(msg)
        if op.kind is Kind.SOURCE or op.scope is Scope.LOCAL or (op.scope is Scope.ANY and replicated and once is None):
            out.add(name)
    return out


@dataclass
class _Edge:
    """What the sites' agents did: records in and out per operator, sink values, records for the hub, letters."""

    metrics: dict[str, dict[str, int]] = field(default_factory=dict)
    sinks: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)
    to_hub: dict[str, list[Item]] = field(default_factory=dict)
    dead: list[Letter] = field(default_factory=list)
    late: list[Letter] = field(default_factory=list)


def run(app: App, records: Mapping[str, Sequence[tuple[str, Any]]], out_of_orderness: float) -> Preview:
    """Run ``app`` over ``records`` (per site, ``(stream, record)`` pairs in order) and say what each operator did."""
    import spanedge.runtime
    import spanedge.testing  # noqa: F401 - imported before the CPU clock starts, so no run pays for it

    started = time.process_time()
    graph = app.graph()
    edge = per_site(graph)
    sites = _run_edge(app, graph, edge, records, out_of_orderness)
    expected = evaluate(app, {}, sites.to_hub) if len(edge) < len(graph) else None
    dead = list(sites.dead)
    if expected is not None:
        dead += [Letter(f.operator, "hub", f.reason, _excerpt(f.value)) for f in expected.failures]
    letters = Counter(d.operator for d in dead)
    late = Counter(d.operator for d in sites.late)
    counts: list[Count] = []
    sinks: list[SinkResults] = []
    for name in graph.order:
        op = graph.op(name)
        if name in edge:
            seen = sites.metrics.get(name, {"in": 0, "out": 0})
            counts.append(Count(name, op.kind.value, "edge", seen["in"], seen["out"], letters[name], late[name]))
            if op.kind is Kind.SINK:
                sinks.append(SinkResults(name, "edge", sites.sinks.get(name, [])))
            continue
        assert expected is not None
        n_in, n_out = expected.counts.get(name, (None, None))
        counts.append(Count(name, op.kind.value, "hub", n_in, n_out, letters[name]))
        if op.kind is Kind.SINK:
            got = [("hub", item.value) for item in expected.sinks.get(name, [])]
            sinks.append(SinkResults(name, "hub", got, expected.unchecked.get(name)))
    total = sum(len(pairs) for pairs in records.values())
    cpu = time.process_time() - started
    return Preview(app.name, list(records), total, counts, sinks, dead, sites.late, cpu)


def _run_edge(
    app: App,
    graph: OperatorGraph,
    edge: set[str],
    records: Mapping[str, Sequence[tuple[str, Any]]],
    out_of_orderness: float,
) -> _Edge:
    """Run the operators in ``edge`` at each site over its records, as its agent would."""
    from spanedge.testing import run_edge, site_plan

    sources: dict[str, list[str]] = {}
    for site, pairs in records.items():
        for stream in dict.fromkeys(s for s, _ in pairs):
            sources.setdefault(stream, []).append(site)
    plan = site_plan(app, sources, HUB, edge)
    out = _Edge(to_hub={n: [] for n in edge if any(s not in edge for s in graph.successors(n))})
    for site, pairs in records.items():
        result = run_edge(app, pairs, site=site, plan=plan, out_of_orderness=out_of_orderness)
        for replica, counts in result.metrics.items():
            total = out.metrics.setdefault(split_replica(replica)[0], {"in": 0, "out": 0})
            total["in"] += counts["in"]
            total["out"] += counts["out"]
        for sink, values in result.sinks.items():
            out.sinks.setdefault(sink, []).extend((site, v) for v in values)
        for stream, sent in result.to_hub.items():
            out.to_hub.setdefault(stream, []).extend(Item(r.site, r.event_time, r.value) for r in sent)
        out.dead += [Letter(d.operator, site, d.reason, d.payload) for d in result.dlq]
        out.late += [Letter(d.operator, site, d.reason, d.payload) for d in result.late]
    return out


def _excerpt(value: Any) -> str:
    """A bounded excerpt of a record's JSON, as in a dead letter."""
    return str(excerpt(orjson.dumps(value, default=str))["excerpt"])
