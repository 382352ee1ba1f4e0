"""Build the pipeline one site runs: from a plan, or from the app alone for tests."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from spanedge.app import App
from spanedge.operators import Kind
from spanedge.plan import Plan, split_replica
from spanedge.runtime.pipeline import Node, Pipeline
from spanedge.runtime.windows import WindowState


def _make_node(app: App, replica: str, group: str) -> Node:
    op = app.operators[split_replica(replica)[0]]
    return Node(replica, op, group, window=WindowState(op.window) if op.window is not None else None)


def from_plan(app: App, plan: Plan, site: str, *, retired: Collection[str] = (), **options: Any) -> Pipeline:
    """Build the pipeline of ``site`` from ``plan``.

    Source replicas feeding a replica here, or running here with a consumer at
    the hub, become source nodes; flows to the hub mark their source node
    ``to_hub``. A replica this site hands over in ``plan`` runs here too, for
    the windows starting before the switch time, unless it is in ``retired``
    (its part is done); the new owner of one runs it for the later windows.
    A source here keeps feeding a replica the hub hands over for as long as
    the hub needs (:func:`hub_feeds`).
    """
    placed = {a.replica: a for a in plan.assignments}
    owned = plan.handed_over(site)
    local = [
        a.replica
        for a in plan.assignments
        if a.site == site or (a.replica in owned and owned[a.replica][1] < math.inf and a.replica not in retired)
    ]
    local_set = set(local)
    nodes: dict[str, Node] = {}

    def group_of(replica: str) -> str:
        a = placed.get(replica)
        return (a.group if a is not None else split_replica(replica)[1]) or site

    def needed_source(flow_src: str) -> bool:
        op = app.operators.get(split_replica(flow_src)[0])
        return op is not None and op.kind is Kind.SOURCE

    order: list[str] = []
    for replica in local:
        for flow in plan.inputs(replica):
            if flow.src not in local_set and needed_source(flow.src) and flow.src not in order:
                order.append(flow.src)
    for replica in local:
        if replica not in order:
            order.append(replica)
    for replica in order:
        nodes[replica] = _make_node(app, replica, group_of(replica))
        node = nodes[replica]
        here = placed.get(replica)
        if here is not None and here.site == site:
            node.epoch = here.since
        if replica in owned:
            start_from, start_before, node.epoch = owned[replica]
            node.owns = (start_from, start_before)
            if node.window is not None:
                node.window.own(start_from, start_before)
    feeds = hub_feeds(app, plan)
    for replica in order:
        node = nodes[replica]
        at_hub = replica in placed and placed[replica].site == plan.hub
        until = -math.inf  # records (by origin) before this go to the hub
        for flow in plan.outputs(replica):
            dst = placed.get(flow.dst)
            if flow.dst in nodes:
                node.children.append(nodes[flow.dst])
            if dst is not None and dst.site == plan.hub and not (at_hub and flow.dst in nodes):
                until = math.inf  # (the old owner of a chain moving to the hub sends only the chain's end)
            elif flow.dst in feeds and replica not in feeds:
                until = max(until, feeds[flow.dst])
        if until > -math.inf:
            node.to_hub = True
            node.hub_before = until
    # a source here with nothing to feed (its consumers were offloaded elsewhere) is not subscribed
    kept = [n for n in nodes.values() if n.op.kind is not Kind.SOURCE or n.children or n.to_hub]
    return Pipeline(app, site, kept, **options)


def hub_feeds(app: App, plan: Plan) -> dict[str, float]:
    """Replicas the hub hands over to a spoke in ``plan``, with the event time their input goes to the hub before.

    As the old owner, the hub finishes the windows starting before the switch
    T. They need the records up to T plus the window's size, and its
    watermark must pass their ends plus the allowed lateness, which in Spark
    only records newer still do: their sources send records before T + 2 x
    size (or gap) + allowed lateness of the largest window moved at T. A
    record-level replica needs its input before T.
    """
    moving = [h for h in plan.handovers if h.source == plan.hub]
    margin: dict[float, float] = {}
    for h in moving:
        op = app.operators.get(split_replica(h.replica)[0])
        spec = op.window if op is not None else None
        span = 0.0 if spec is None else 2 * (spec.size or spec.gap or 0.0) + spec.allowed_lateness
        margin[h.switch_at] = max(margin.get(h.switch_at, 0.0), span)
    return {h.replica: h.switch_at + margin[h.switch_at] for h in moving}


def edge_part(app: App, site: str, **options: Any) -> Pipeline:
    """Build the pipeline an edge site runs when every operator that can run there does.

    Operators that are not hub-only and read only from such operators run
    here; their outputs read by the rest cross to the hub.
    """
    graph = app.graph()
    edge: dict[str, Node] = {}
    for name in graph.order:
        op = graph.op(name)
        if op.hub_only or any(u not in edge for u in op.inputs):
            continue
        replica = f"{name}@{site}"
        edge[name] = _make_node(app, replica, site)
    for name, node in edge.items():
        for succ in graph.successors(name):
            if succ in edge:
                node.children.append(edge[succ])
            else:
                node.to_hub = True
    return Pipeline(app, site, list(edge.values()), **options)
