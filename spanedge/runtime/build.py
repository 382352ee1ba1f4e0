"""Build the pipeline one site runs: from a plan, or from the app alone for tests."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from typing import Any

from spanedge.app import App
from spanedge.errors import InvalidPlan
from spanedge.keyrange import recovery_epoch
from spanedge.operators import Kind, WindowKind
from spanedge.plan import Handover, Plan, split_replica
from spanedge.runtime.operators import WINDOW_TIME_OFFSET
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
    (its part is done); the new owner of one runs it for the later windows
    (a session window moved to or from the hub: split by record time).
    A source here keeps feeding a replica the hub hands over for as long as
    the hub needs (:func:`hub_feeds`), and the old owner of a replica it
    hands to the hub keeps running it past the switch for the hub's windows
    downstream (:func:`spoke_feeds`). A window whose keys are divided
    between sites (:meth:`Plan.shares`) keeps only the keys and windows of
    this site's shares; where it runs as a part, the record-level replicas
    before it run too, only to feed it, and those after it on its results.

    Raises:
        InvalidPlan: a replica that is not a window is divided by key.
    """
    placed = {a.replica: a for a in plan.assignments}
    owned = plan.handed_over(site)
    keyed = plan.shares(site, retired)
    divided = plan.keyed()
    wanted = {
        a.replica
        for a in plan.assignments
        if a.replica in keyed
        or (a.replica not in divided and a.site == site)
        or (a.replica in owned and owned[a.replica][1] < math.inf and a.replica not in retired)
    }
    shadow = _part_chains(plan, site, keyed, wanted)
    runs_on = spoke_feeds(app, plan)
    local = [a.replica for a in plan.assignments if a.replica in wanted]
    nodes: dict[str, Node] = {}

    def group_of(replica: str) -> str:
        a = placed.get(replica)
        return (a.group if a is not None else split_replica(replica)[1]) or site

    own_sources = _sources(app, plan, [r for r in local if r not in shadow], wanted)
    part_sources = [s for s in _sources(app, plan, [r for r in local if r in shadow], wanted) if s not in own_sources]
    shadow.update(part_sources)  # subscribed only to feed a part
    order = own_sources + part_sources + local
    for replica in order:
        nodes[replica] = node = _make_node(app, replica, group_of(replica))
        node.shadow = replica in shadow
        here = placed.get(replica)
        if here is not None and here.site == site:
            node.epoch = here.since
        if replica in owned:
            start_from, start_before, node.epoch = owned[replica]
            past = runs_on.get(replica, start_before)
            if past > start_before:  # it feeds the hub's windows downstream past the switch
                node.switch_at, start_before = start_before, past
            node.owns = (start_from, start_before)
            if node.window is not None:
                node.window.own(start_from, start_before, sessions_by_record_time=_via_hub(plan, site, replica))
    _own_keys(plan, site, keyed, nodes)
    _wire(app, plan, site, nodes)
    # a source here with nothing to feed (its consumers were offloaded elsewhere) is not subscribed
    kept = [n for n in nodes.values() if n.op.kind is not Kind.SOURCE or n.children or n.to_hub]
    return Pipeline(app, site, kept, **options)


def recovery_part(app: App, plan: Plan, site: str, dead: str, **options: Any) -> Pipeline | None:
    """The part of gone site ``dead`` that source site ``site`` recomputes in ``plan`` (None: none).

    It is the old owner's part of each handover away from ``dead`` that
    ``plan`` gives ``site`` to recover (:meth:`Plan.recoveries`), as ``dead``
    would have run it (the replicas of ``site``'s group it hands over and the
    sources feeding them), but owning only the origins from the handover's
    ``recover_from`` on: everything before was delivered. Its records to the
    hub carry :func:`spanedge.keyrange.recovery_epoch` of the gone site's epoch.
    """
    moves = {h.replica: h for h in plan.recoveries(site) if h.source == dead}
    if not moves:
        return None
    plain = dataclasses.replace(
        plan, handovers=tuple(dataclasses.replace(h, recover_from=None, recoverer=None) for h in plan.handovers)
    )
    whole = from_plan(app, plain, dead, **options)
    kept = {n.replica: n for n in whole.nodes if n.replica in moves}
    for node in list(kept.values()):
        for flow in plan.inputs(node.replica):
            source = next((n for n in whole.nodes if n.replica == flow.src and n.op.kind is Kind.SOURCE), None)
            if source is not None and source.group == site:
                kept[source.replica] = source
    lead = _result_lead({n.replica: n for n in whole.nodes if n.replica in kept}.values())
    for node in kept.values():
        node.children = [c for c in node.children if c.replica in kept]
        h = moves.get(node.replica)
        if h is None or node.owns is None or h.recover_from is None:
            continue
        node.epoch = recovery_epoch(h.epoch)
        # recover_from bounds the results' event times; ownership goes by origin (a window's start)
        start = h.recover_from - lead[node.replica] + (WINDOW_TIME_OFFSET if lead[node.replica] else 0.0)
        node.owns = (max(node.owns[0], start), node.owns[1])
        if node.window is not None:
            node.window.own(*node.owns, sessions_by_record_time=_via_hub(plain, dead, node.replica))
    nodes = [n for n in whole.nodes if n.replica in kept]
    return Pipeline(app, site, nodes, **options)


def _result_lead(nodes: Collection[Node]) -> dict[str, float]:
    """Per node (in topological order), how far its results' event times may lie past their origin.

    A window's result carries its window's end (less :data:`WINDOW_TIME_OFFSET`)
    and its start as origin, so the lead is its size (a session's: its gap);
    a record-level node takes the lead of the window before it, if any.
    """
    lead: dict[str, float] = {n.replica: 0.0 for n in nodes}
    for node in nodes:
        if node.window is not None:
            spec = node.window.spec
            lead[node.replica] = (spec.gap if spec.kind is WindowKind.SESSION else spec.size) or 0.0
        for child in node.children:
            if child.replica in lead and child.window is None:
                lead[child.replica] = max(lead[child.replica], lead[node.replica])
    return lead


def _via_hub(plan: Plan, site: str, replica: str) -> bool:
    """Whether the handover of ``replica`` that ``site`` takes part in has the hub at one end.

    The hub cuts sessions by their end, so on such a move the spoke's side
    splits them by record time (see :meth:`WindowState.own`). The last
    handover of the replica at ``site`` counts, as in :meth:`Plan.handed_over`.
    """
    ends = [(h.source, h.target) for h in plan.handovers if h.replica == replica and site in (h.source, h.target)]
    return bool(ends) and plan.hub in ends[-1]


def _sources(app: App, plan: Plan, replicas: list[str], local: set[str]) -> list[str]:
    """The source replicas feeding ``replicas`` that do not run here otherwise, in order."""
    order: list[str] = []
    for replica in replicas:
        for flow in plan.inputs(replica):
            op = app.operators.get(split_replica(flow.src)[0])
            if flow.src not in local and op is not None and op.kind is Kind.SOURCE and flow.src not in order:
                order.append(flow.src)
    return order


def _part_chains(plan: Plan, site: str, keyed: dict[str, Any], wanted: set[str]) -> set[str]:
    """Add to ``wanted`` the replicas the parts at ``site`` run with them; return those that only feed a part.

    A part runs where its replica's assignment does not; the replicas of its
    source site before it run here only to feed it (their results go nowhere
    else, and their dead letters are the assignment's site's), those after it
    on its own results.
    """
    shadow: set[str] = set()
    for replica in keyed:
        if plan.assignment(replica).site == site:
            continue
        before, after = plan.part_chain(replica)
        shadow.add(replica)
        shadow.update(r for r in before if r not in wanted)
        wanted.update(before + after)
    return shadow


def _own_keys(plan: Plan, site: str, keyed: dict[str, Any], nodes: dict[str, Node]) -> None:
    """Give the windows divided by key their shares, and the replicas after a part the part's epoch."""
    for replica, shares in keyed.items():
        node = nodes[replica]
        if node.window is None:
            msg = (
                f"plan of app '{plan.app}' divides replica {replica} by key, but only windows have keys; "
                "regenerate the plan with spanedge deploy"
            )
            raise InvalidPlan(msg)
        node.window.own_shares(shares)
        node.epoch = shares[0].epoch
        if plan.assignment(replica).site != site:
            for after in plan.part_chain(replica)[1]:
                if nodes[after].owns is None and plan.site_of(after) != site:  # here only for the part
                    nodes[after].epoch = node.epoch


def _wire(app: App, plan: Plan, site: str, nodes: dict[str, Node]) -> None:
    """Connect each node to its successors here and mark those whose records go to the hub.

    A source's records go to the hub from its own site only: a spoke that
    subscribes to another site's source (to run replicas offloaded to it)
    leaves the hub's copy to that site.
    """
    placed = {a.replica: a for a in plan.assignments}
    feeds = hub_feeds(app, plan)
    for replica, node in nodes.items():
        at_hub = replica in placed and placed[replica].site == plan.hub
        foreign = node.op.kind is Kind.SOURCE and replica in placed and placed[replica].site != site
        until = -math.inf  # records (by origin) before this go to the hub
        for flow in plan.outputs(replica):
            dst = placed.get(flow.dst)
            if flow.dst in nodes:
                node.children.append(nodes[flow.dst])
            if dst is not None and dst.site == plan.hub and not (at_hub and flow.dst in nodes):
                until = math.inf  # (the old owner of a chain moving to the hub sends only the chain's end)
            elif flow.dst in feeds and replica not in feeds:
                until = max(until, feeds[flow.dst])
        # a record-level replica or source that only feeds a part here sends nothing (a part's window does)
        if until > -math.inf and not foreign and not (node.shadow and node.window is None):
            node.to_hub = True
            node.hub_before = until


def hub_feeds(app: App, plan: Plan) -> dict[str, float]:
    """Replicas the hub hands over to a spoke in ``plan``, with the event time their input goes to the hub before.

    As the old owner, the hub finishes the windows starting before the switch
    T, the moved replica's and those downstream of it (which read the moved
    replica's results of windows starting up to their own size past T). A
    window needs the records up to its end, and the hub's watermark must pass
    its end plus the allowed lateness, which in Spark only records newer
    still do: the sources send records before T plus, for the moved replica
    and each window downstream of it, twice its size (or gap) and its allowed
    lateness, the largest such sum over the replicas moved at T. A
    record-level replica with no window downstream needs its input before T.
    """
    moving = [h for h in plan.handovers if h.source == plan.hub]
    spans = _spans(app, moving, itself=True)
    margin: dict[float, float] = {}
    for h in moving:
        margin[h.switch_at] = max(margin.get(h.switch_at, 0.0), spans[h.replica])
    return {h.replica: h.switch_at + margin[h.switch_at] for h in moving}


def spoke_feeds(app: App, plan: Plan) -> dict[str, float]:
    """Replicas spokes hand over to the hub in ``plan`` with windows downstream, and the origin their old owner stops at.

    The hub's query of the old placement finishes the windows starting before
    the switch T, those downstream of the moved replica included, from the
    old owner's results: a window starting before T needs the results up to
    its end, and the hub's watermark must pass that end plus the allowed
    lateness. So the old owner runs the moved replica on past T, by twice
    the size (or gap) plus the allowed lateness of each window downstream
    that does not move with it, summed; its part of the handover is still
    the origins before T (:meth:`Pipeline.delivered`), its own sinks and
    those moving with it keep to that part, and the hub's old query writes
    only its share of the results.
    """
    moving = [h for h in plan.handovers if h.target == plan.hub and h.source != plan.hub]
    spans = _spans(app, moving, itself=False)
    return {h.replica: h.switch_at + spans[h.replica] for h in moving if spans[h.replica] > 0}


def _spans(app: App, moving: list[Handover], *, itself: bool) -> dict[str, float]:
    """Per moved replica, the summed span of the windows downstream of it (and with ``itself``, its own).

    Without ``itself``, only the windows downstream that do not move with it
    (at the same site) count. A window's span is twice its size (or gap) plus
    its allowed lateness.
    """
    graph = app.graph()
    moved = [split_replica(m.replica) for m in moving]
    spans: dict[str, float] = {}
    for h in moving:
        name, group = split_replica(h.replica)
        names = ({name} if itself else set()) | (set(graph.descendants(name)) if name in graph else set())
        if not itself:
            names -= {n for n, g in moved if g == group}
        specs = [spec for n in names if (spec := graph.op(n).window) is not None]
        spans[h.replica] = sum(2 * (spec.size or spec.gap or 0.0) + spec.allowed_lateness for spec in specs)
    return spans


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
