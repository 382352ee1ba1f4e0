"""The graphs placement works on, as networkx graphs.

The operator DAG of an app (:func:`operator_dag`), the DAG of its replicas
(:func:`replica_dag`) and the site graph (:func:`site_graph`: an edge per
known link, weighted by its latency).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from spanedge.app import App
from spanedge.errors import MissingExtra
from spanedge.operators import Operator

try:
    import networkx as nx
except ModuleNotFoundError as exc:
    # The light core (`pip install spanedge`) has no networkx; say which extra brings it.
    raise MissingExtra(exc.name or "networkx", "placement") from None

#: Weight of a path's cost against its latency (ms) when ranking paths: only ties in latency see it.
COST_TIE = 1e-12


class Link(Protocol):
    """What the site graph knows of a link."""

    @property
    def latency_ms(self) -> float:
        """Latency in ms."""

    @property
    def bandwidth_mbps(self) -> float:
        """Bandwidth in Mbit/s."""

    @property
    def cost(self) -> float:
        """Relative cost per byte."""


def operator_dag(app: App) -> nx.DiGraph[str]:
    """The app's operators as a DAG: a node per operator name (the operator as ``op``), an edge per input.

    Raises:
        InvalidDataflow: the dataflow is not valid (a cycle, an unknown input, ...).
    """
    app.graph()  # the core's checks, with messages that name the operators
    ops = app.operators
    dag: nx.DiGraph[str] = nx.DiGraph(app=app.name)
    dag.add_nodes_from((name, {"op": op}) for name, op in ops.items())
    dag.add_edges_from((up, name) for name, op in ops.items() for up in op.inputs)
    return dag


def operators_in_order(dag: nx.DiGraph[str]) -> Iterator[Operator]:
    """The operators of an :func:`operator_dag`, each after its inputs (ties in the order they were added)."""
    for name in nx.topological_sort(dag):
        op: Operator = dag.nodes[name]["op"]
        yield op


def replica_dag(inputs: Mapping[str, Sequence[str]]) -> nx.DiGraph[str]:
    """A DAG of replicas: a node per replica id, in the order of ``inputs``, and an edge from each of its inputs."""
    dag: nx.DiGraph[str] = nx.DiGraph()
    dag.add_nodes_from(inputs)
    dag.add_edges_from((u, rid) for rid, ins in inputs.items() for u in ins)
    return dag


def reachable(dag: nx.DiGraph[str], start: str, through: Callable[[str], bool], *, upstream: bool = False) -> set[str]:
    """The nodes reachable from ``start`` over nodes that pass ``through`` (against the edges if ``upstream``)."""
    graph = dag.reverse(copy=False) if upstream else dag
    view = nx.subgraph_view(graph, filter_node=lambda n: n == start or through(n))
    found: set[str] = nx.descendants(view, start)
    return found


def breadth_first(dag: nx.DiGraph[str], start: str) -> Iterator[str]:
    """The nodes downstream of ``start``, nearest first, then in the order of the edges."""
    return (node for _, node in nx.bfs_edges(dag, start))


def site_graph(sites: Iterable[str], links: Mapping[tuple[str, str], Link]) -> nx.DiGraph[str]:
    """Sites as nodes and an edge per link between two sites, with the link as ``link``.

    The edge weight ``rank`` is the latency plus :data:`COST_TIE` times the
    cost, so of equally fast paths the cheaper one is the shortest. Links of
    infinite latency or cost carry no path.
    """
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(sites)
    for (a, b), link in links.items():
        rank = link.latency_ms + COST_TIE * link.cost
        if a != b and rank < math.inf:
            graph.add_edge(a, b, link=link, rank=rank)
    return graph


def fastest_paths(graph: nx.DiGraph[str], source: str) -> dict[str, tuple[float, float, float]]:
    """Latency, bandwidth and cost of the fastest path from ``source`` to every other site it reaches.

    A path's latency and cost are the sums over its hops, its bandwidth the
    narrowest hop. Of paths equally fast and cheap, the widest wins.
    """
    before, rank = nx.dijkstra_predecessor_and_distance(graph, source, weight="rank")
    links = graph.adj
    best: dict[str, tuple[float, float, float]] = {source: (0.0, math.inf, 0.0)}
    for site in rank:  # in the order Dijkstra settled them: each after those before it on its paths
        if site == source:
            continue
        options = []
        for prev in before[site]:
            if prev in best:  # not a site settled later at the same rank (a link of rank 0)
                link: Link = links[prev][site]["link"]
                latency, bandwidth, cost = best[prev]
                options.append(
                    (latency + link.latency_ms, float(min(bandwidth, link.bandwidth_mbps)), cost + link.cost)
                )
        best[site] = options[0] if len(options) == 1 else max(options, key=lambda o: o[1])
    del best[source]
    return best
