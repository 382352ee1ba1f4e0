"""The operator DAG as a networkx graph, and its validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from spanedge.errors import InvalidDataflow
from spanedge.operators import Kind, Operator
from spanedge.schema import fields
from spanedge.scope import Scope

if TYPE_CHECKING:
    import networkx as nx

# networkx is imported where a graph is built or walked, not with this module: an edge
# agent runs plans without ever building the DAG and saves the ~20 MB networkx costs.


def build_graph(app_name: str, ops: Mapping[str, Operator]) -> nx.DiGraph:
    """Return the DAG of an app's operators (node attribute ``op``) after validating it."""
    import networkx as nx

    graph = nx.DiGraph(app=app_name)
    for op in ops.values():
        graph.add_node(op.name, op=op)
    for op in ops.values():
        for upstream in op.inputs:
            if upstream not in ops:
                msg = f"operator {op.describe()} reads from unknown operator '{upstream}'"
                raise InvalidDataflow(msg)
            graph.add_edge(upstream, op.name)
    if not nx.is_directed_acyclic_graph(graph):
        cycle = " -> ".join(u for u, _ in nx.find_cycle(graph))
        msg = f"the dataflow has a cycle: {cycle}; streams must flow from sources to sinks"
        raise InvalidDataflow(msg)
    _check(graph, ops)
    return graph


def _check(graph: nx.DiGraph, ops: Mapping[str, Operator]) -> None:
    import networkx as nx

    sources = [n for n, d in graph.nodes(data="op") if d.kind is Kind.SOURCE]
    if not sources:
        msg = f"app '{graph.graph['app']}' has no source; add one with app.source('<stream>')"
        raise InvalidDataflow(msg)
    for name in nx.topological_sort(graph):
        op: Operator = graph.nodes[name]["op"]
        if op.kind is Kind.SINK and graph.out_degree(name):
            msg = f"sink {op.describe()} cannot feed other operators"
            raise InvalidDataflow(msg)
        if op.scope is Scope.LOCAL:
            for anc in nx.ancestors(graph, name):
                up: Operator = graph.nodes[anc]["op"]
                if up.hub_only:
                    msg = (
                        f"operator {op.describe()} is @local but reads from hub-only operator "
                        f"{up.describe()}; local operators must come before global ones: "
                        f"move {op.name!r} upstream of {up.name!r} or drop @local"
                    )
                    raise InvalidDataflow(msg)
        if op.window is not None:
            _check_window(graph, op)


def known_fields(graph: nx.DiGraph, name: str) -> dict[str, str] | None:
    """Return the declared fields of the records ``name`` emits, if known."""
    op: Operator = graph.nodes[name]["op"]
    if op.schema is not None:
        return fields(op.schema)
    if op.window is not None:
        spec = op.window
        out = {spec.key: "STRING", "window_start": "DOUBLE", "window_end": "DOUBLE"}
        out.update({field: "DOUBLE" for field, _ in spec.aggs})
        return out
    if op.kind in (Kind.FILTER, Kind.SINK) and op.inputs:
        return known_fields(graph, op.inputs[0])
    return None


def _check_window(graph: nx.DiGraph, op: Operator) -> None:
    assert op.window is not None
    available = known_fields(graph, op.inputs[0])
    if available is None:
        return
    wanted = [(op.window.key, "key")] + [
        (a.field, f"aggregation '{out}' ({a.describe()})") for out, a in op.window.aggs if a.field
    ]
    for field, role in wanted:
        if field not in available:
            msg = (
                f"window {op.describe()}: {role} uses field '{field}', which the records of "
                f"'{op.inputs[0]}' do not have (they have: {', '.join(sorted(available))}); "
                "fix the field name or the declared schema"
            )
            raise InvalidDataflow(msg)


def sources_of(graph: nx.DiGraph, name: str) -> set[str]:
    """Return the source streams ``name`` (transitively) reads from."""
    import networkx as nx

    nodes = nx.ancestors(graph, name) | {name}
    return {n for n in nodes if graph.nodes[n]["op"].kind is Kind.SOURCE}
