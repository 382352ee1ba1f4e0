"""The placement problem: operator replicas, their rates, loads, candidate sites and edges.

Sources become one pinned replica ``"<stream>@<site>"`` per site that sources
the stream. An operator is *replicated* (one replica ``"<op>@<site>"`` per
source site upstream of it) if it is ``@local``, or if it is unscoped, is a
record-level operator, a union or a sink, and all its inputs are replicated.
A replicated replica reads the replicas of its inputs for the same source
site; every other operator is a singleton (its bare name) reading all
replicas of its inputs. A singleton that merges the streams of several source
sites runs at a hub.

Replicas that belong to the source site ``s`` (its *home*) and run at a spoke
all run at the same spoke: ``s`` itself, or a nearby spoke that reads ``s``'s
broker over the WAN. Hub-placed replicas all run at one hub, and everything
downstream of a hub-placed replica is hub-placed too.

The app's operators and their replicas are networkx DAGs
(:mod:`placement.graph`); replicas are ordered topologically, as the
operators are.

A re-plan starts from the :class:`Previous` plan: a spoke a replica ran at
stays among its candidates while it is within reach of its source site, so
keeping it there is always an option the solvers weigh.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from placement.devices import device_sites
from placement.graph import operator_dag, operators_in_order, replica_dag
from placement.latency import LatencyMatrix, nearest
from placement.models import fit_models
from spanedge.app import App
from spanedge.errors import InfeasiblePlacement, InvalidSites
from spanedge.operators import Kind, Operator
from spanedge.plan import KeyPart, Plan, replica_id
from spanedge.scope import Scope
from spanedge.sites import Sites, Tier

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import networkx as nx

#: A replica may be offloaded to at most this many other spokes...
OFFLOAD_NEIGHBOURS = 4
#: ...that are at most this far (ms) from its source site.
OFFLOAD_MS = 100.0


#: By default a re-plan keeps the previous plan unless the new one is this much better (relative).
HYSTERESIS = 0.05


@dataclass(frozen=True)
class Previous:
    """The plan a re-plan starts from, and what moving away from it costs.

    ``placement`` maps replica ids to the sites they ran at and ``hub`` is
    the hub they used; ``state_bytes`` is the state each replica holds (what
    a move ships; replicas not listed hold none). A new plan replaces this
    one only if its objective, migration included, is lower by more than
    ``hysteresis`` (relative). ``parts`` are the key parts of the replicas
    the previous plan split (:mod:`placement.split`); ``key_spread`` is how
    each window replica's records spread over the buckets of its key hash
    space, as the sites measured it (:func:`spanedge.keyrange.spread_of`;
    replicas not listed: assumed uniform).
    """

    placement: Mapping[str, str]
    hub: str | None = None
    state_bytes: Mapping[str, float] = field(default_factory=dict)
    hysteresis: float = HYSTERESIS
    parts: tuple[KeyPart, ...] = ()
    key_spread: Mapping[str, Mapping[int, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Reject a negative hysteresis or state size."""
        if not self.hysteresis >= 0:
            msg = f"hysteresis must be a number >= 0, got {self.hysteresis!r}"
            raise ValueError(msg)
        bad = [rid for rid, b in self.state_bytes.items() if not b >= 0]
        if bad:
            msg = f"state bytes must be numbers >= 0; got {self.state_bytes[bad[0]]!r} for replica {bad[0]!r}"
            raise ValueError(msg)

    @classmethod
    def of(
        cls,
        plan: Plan,
        state_bytes: Mapping[str, float] | None = None,
        hysteresis: float = HYSTERESIS,
        key_spread: Mapping[str, Mapping[int, float]] | None = None,
    ) -> Previous:
        """The previous placement of ``plan``."""
        placement = {a.replica: a.site for a in plan.assignments}
        return cls(placement, plan.hub, dict(state_bytes or {}), hysteresis, plan.parts, dict(key_spread or {}))

    def state(self, rid: str) -> float:
        """Bytes of state replica ``rid`` holds."""
        return float(self.state_bytes.get(rid, 0.0))


@dataclass
class Replica:
    """One instance of an operator, with its estimated load and where it may run.

    ``home`` is the source site whose spoke the replica follows (``None`` if it
    merges several sites' streams); ``group`` is the source site in the
    replica id (``None`` for singletons). ``rate_in``/``rate_out`` are
    records/s, ``bytes_out`` the bytes/s it emits, ``load`` the cores it uses.
    ``colocate`` names the replica a sink must share a site with; ``attached``
    lists the sinks that share this replica's site.
    """

    id: str
    op: Operator
    group: str | None
    home: str | None
    inputs: tuple[str, ...]
    rate_in: float
    rate_out: float
    record_bytes: float
    load: float
    candidates: tuple[str, ...] = ()
    colocate: str | None = None
    merged: frozenset[str] = frozenset()
    attached: tuple[str, ...] = ()

    @property
    def bytes_out(self) -> float:
        """Bytes per second this replica emits."""
        return self.rate_out * self.record_bytes

    @property
    def is_source(self) -> bool:
        """True for pinned source replicas."""
        return self.op.kind is Kind.SOURCE


@dataclass(frozen=True)
class Edge:
    """A replica-level edge: ``bytes_per_s`` it carries and the share of source-to-sink paths through it."""

    src: str
    dst: str
    rate: float
    bytes_per_s: float
    paths: float


@dataclass
class Problem:
    """Everything the solvers need, built by :func:`build_problem`.

    ``dag`` has a node per replica and an edge from each of its inputs; ``order`` is a topological order of it.
    """

    app: App
    sites: Sites
    latency: LatencyMatrix
    replicas: dict[str, Replica]
    edges: list[Edge]
    hubs: tuple[str, ...]
    spokes: tuple[str, ...]
    source_bytes: float
    reference_ms: float
    dag: nx.DiGraph[str]
    order: tuple[str, ...] = ()
    out_edges: dict[str, list[Edge]] = field(default_factory=dict)
    in_edges: dict[str, list[Edge]] = field(default_factory=dict)

    def is_hub(self, site: str) -> bool:
        """True if ``site`` is a hub."""
        return site in self._hub_set

    def __post_init__(self) -> None:
        self._hub_set = frozenset(self.hubs)
        for e in self.edges:
            self.out_edges.setdefault(e.src, []).append(e)
            self.in_edges.setdefault(e.dst, []).append(e)

    def load(self, rid: str) -> float:
        """Cores a decision replica and the sinks attached to it use."""
        r = self.replicas[rid]
        return r.load + sum(self.replicas[a].load for a in r.attached)

    def cpu(self, site: str) -> float:
        """CPU cores of ``site``."""
        return self.sites.sites[site].cpu

    def decisions(self) -> list[Replica]:
        """Replicas whose site is a decision (not sources, not co-located sinks), in topological order."""
        return [r for r in (self.replicas[i] for i in self.order) if not r.is_source and r.colocate is None]

    def at_hub(self, hub: str) -> Problem | None:
        """This problem with ``hub`` the only hub among the candidates, or ``None`` if a replica then has none."""
        others = self._hub_set - {hub}
        replicas = {}
        for rid, r in self.replicas.items():
            if r.is_source or others.isdisjoint(r.candidates):
                replicas[rid] = r
                continue
            kept = tuple(c for c in r.candidates if c not in others)
            if not kept:
                return None
            replicas[rid] = copy.copy(r)
            replicas[rid].candidates = kept
        return replace(self, replicas=replicas, hubs=(hub,), out_edges={}, in_edges={})

    def resolve(self, placement: dict[str, str]) -> dict[str, str]:
        """Complete a placement of the decisions with sources and co-located sinks."""
        full = dict(placement)
        for rid in self.order:
            r = self.replicas[rid]
            if r.is_source:
                full[rid] = r.candidates[0]
            elif r.colocate is not None:
                full[rid] = full[r.colocate]
        return full


def build_problem(
    app: App,
    sites: Sites,
    latency: LatencyMatrix,
    previous: Mapping[str, str] | None = None,
    shares: Mapping[str, float] | None = None,
) -> Problem:
    """Expand the app's DAG into replicas over ``sites`` and compute rates, loads, candidates and edges.

    ``previous`` maps replica ids to the sites a previous plan ran them at.
    ``shares`` gives the share of its keys a replica split by key keeps
    (:mod:`placement.split`): its rates and load, and so those of the
    replicas after it, scale by that share (keys are assumed uniform).
    """
    missing = [s for s in sites.sites if s not in latency.sites]
    if missing:
        msg = (
            f"the latency matrix knows nothing about site(s) {', '.join(missing)}; build it with "
            "LatencyMatrix.from_sites(sites).with_measurements(rows) so that declared links fill the gaps"
        )
        raise InvalidSites(msg)
    operators = operator_dag(app)
    hubs = tuple(s.name for s in sites.hubs)
    spokes = tuple(s.name for s in sites.spokes)
    replicas: dict[str, Replica] = {}
    of_op: dict[str, list[str]] = {}
    order: list[str] = []
    for op in operators_in_order(operators):
        made = _expand(op, sites, replicas, of_op)
        for r in made:
            share = (shares or {}).get(r.id)
            if share is not None:
                r.rate_in, r.rate_out, r.load = r.rate_in * share, r.rate_out * share, r.load * share
        of_op[op.name] = [r.id for r in made]
        for r in made:
            replicas[r.id] = r
            order.append(r.id)
    dag = replica_dag({rid: replicas[rid].inputs for rid in order})
    _candidates(replicas, order, sites, latency, hubs, spokes, previous or {})
    fit_models(replicas, order, sites)
    _colocate_sinks(replicas, order)
    _windows_apart(replicas, order, hubs, dag)
    _propagate(replicas, order, hubs, dag)
    _fit(replicas, order, sites, hubs)
    for rid in order:
        r = replicas[rid]
        if r.colocate is not None:
            host = replicas[r.colocate]
            r.candidates = host.candidates
            host.attached += (rid,)
    edges = _edges(replicas, order)
    source_bytes = sum(r.bytes_out for r in replicas.values() if r.is_source)
    homes = [r.candidates[0] for r in replicas.values() if r.is_source]
    ref = sum(min(latency.latency(s, h) for h in hubs) for s in homes) / max(len(homes), 1)
    return Problem(
        app=app,
        sites=sites,
        latency=latency,
        replicas=replicas,
        edges=edges,
        hubs=hubs,
        spokes=spokes,
        source_bytes=source_bytes or 1.0,
        reference_ms=ref if ref > 0 else 1.0,
        dag=dag,
        order=tuple(order),
    )


def _expand(op: Operator, sites: Sites, replicas: dict[str, Replica], of_op: dict[str, list[str]]) -> list[Replica]:
    if op.kind is Kind.SOURCE:
        stream = op.stream_name
        out = []
        for site in sites.sources_of(stream):
            b = site.streams[stream]
            out.append(
                Replica(
                    id=replica_id(op.name, site.name),
                    op=op,
                    group=site.name,
                    home=site.name,
                    inputs=(),
                    rate_in=b.rate,
                    rate_out=b.rate,
                    record_bytes=op.record_bytes or b.record_bytes,
                    load=0.0,
                    candidates=(site.name,),
                    merged=frozenset({site.name}),
                )
            )
        return out
    ups = [replicas[r] for name in op.inputs for r in of_op[name]]
    all_grouped = all(replicas[of_op[name][0]].group is not None for name in op.inputs if of_op[name])
    replicated = op.scope is Scope.LOCAL or (
        op.scope is Scope.ANY and (op.record_level or op.kind in (Kind.UNION, Kind.SINK)) and all_grouped
    )
    if replicated:
        bad = [u for u in ups if u.group is None and len(u.merged) > 1]
        if bad:
            msg = (
                f"operator {op.describe()} is @local but reads from {bad[0].op.describe()}, which "
                f"merges the streams of {len(bad[0].merged)} sites and so runs at a hub; "
                f"make {bad[0].op.name!r} @local too, or drop @local from {op.name!r}"
            )
            raise InfeasiblePlacement(msg)
        groups = list(dict.fromkeys(g for u in ups for g in sorted(u.merged)))
        out = []
        for g in groups:
            # The same source site's replicas, or a singleton fed by that site alone.
            ins = [u for u in ups if u.merged == {g}]
            out.append(_derived(op, replica_id(op.name, g), g, g, ins))
        return out
    merged = frozenset(g for u in ups for g in u.merged)
    return [_derived(op, op.name, None, next(iter(merged)) if len(merged) == 1 else None, ups)]


def _derived(op: Operator, rid: str, group: str | None, home: str | None, ins: Sequence[Replica]) -> Replica:
    rate_in = sum(u.rate_out for u in ins)
    in_bytes = sum(u.bytes_out for u in ins)
    record_bytes = op.record_bytes or (in_bytes / rate_in if rate_in > 0 else 200.0)
    return Replica(
        id=rid,
        op=op,
        group=group,
        home=home,
        inputs=tuple(u.id for u in ins),
        rate_in=rate_in,
        rate_out=op.output_rate(rate_in),
        record_bytes=record_bytes,
        load=op.cost * rate_in,
        merged=frozenset(g for u in ins for g in u.merged),
    )


def _candidates(
    replicas: dict[str, Replica],
    order: list[str],
    sites: Sites,
    latency: LatencyMatrix,
    hubs: tuple[str, ...],
    spokes: tuple[str, ...],
    previous: Mapping[str, str],
) -> None:
    """Give every replica its candidate sites.

    A source site's replicas may be offloaded to its nearest spokes (at most
    :data:`OFFLOAD_NEIGHBOURS`, within :data:`OFFLOAD_MS`) only where that can
    matter: when the site (or a spoke its tight neighbours offload to) may run
    out of CPU, or when the neighbour is cheaper or faster to reach a hub
    from, or when a replica of the site ran there in the ``previous`` plan.
    Otherwise moving the replicas there never lowers the objective.
    """
    demand: dict[str, float] = {}
    for r in replicas.values():
        if not r.is_source and r.home is not None and not r.op.hub_only:
            demand[r.home] = demand.get(r.home, 0.0) + r.load
    around: dict[str, list[str]] = {}
    for home in demand:  # the source sites with replicas that may run at a spoke
        others = [p for p in spokes if p != home]
        around[home] = nearest(latency, home, others, OFFLOAD_MS)[:OFFLOAD_NEIGHBOURS]
    tight = {h for h, d in demand.items() if d > sites.sites[h].cpu}
    devices = _device_rules(replicas, sites)
    unbound = {replicas[rid].home for rid, allowed in devices.items() if replicas[rid].home not in allowed}
    tight |= {h for h in demand if h in unbound}  # a sink must leave a site without its device: reach out
    tight |= {p for h in tight for p in around[h] if demand.get(p, 0.0) + demand[h] > sites.sites[p].cpu}
    ran: dict[str, set[str]] = {}
    for rid, site in previous.items():
        before = replicas.get(rid)
        if before is not None and before.home is not None:
            ran.setdefault(before.home, set()).add(site)
    near = {
        home: ps if home in tight else [p for p in ps if p in ran.get(home, ()) or _may_help(latency, hubs, home, p)]
        for home, ps in around.items()
    }
    for rid in order:
        r = replicas[rid]
        if r.is_source:
            continue
        op = r.op
        if op.hub_only or r.home is None:
            r.candidates = hubs
        elif op.scope is Scope.LOCAL:
            r.candidates = (r.home, *near[r.home])
        else:
            own = (r.home,) if sites.sites[r.home].tier is Tier.SPOKE else ()
            r.candidates = own + tuple(near[r.home]) + hubs
        if rid in devices:
            reach = tuple(c for c in r.candidates if c in devices[rid])
            if reach:
                r.candidates = reach
            else:  # placed as if it had none: where it runs, its values are dead letters that name the fix
                log.warning(
                    "sink %s writes to a device that only %s declare(s), none within %.0f ms of its source site %s; "
                    "its values there are dead letters until the device is declared under %s's devices: in "
                    "sites.yaml, or at a spoke near it",
                    op.describe(),
                    ", ".join(devices[rid]),
                    OFFLOAD_MS,
                    r.home,
                    r.home,
                )


def _device_rules(replicas: dict[str, Replica], sites: Sites) -> dict[str, tuple[str, ...]]:
    """The sites each sink replica writing to a device binding may run at (:func:`placement.devices.device_sites`)."""
    out: dict[str, tuple[str, ...]] = {}
    for rid, r in replicas.items():
        if r.op.kind is Kind.SINK and not r.is_source:
            allowed = device_sites(r.op, sites)
            if allowed is not None:
                out[rid] = allowed
    return out


def _may_help(latency: LatencyMatrix, hubs: tuple[str, ...], home: str, spoke: str) -> bool:
    """True if some hub is cheaper or faster to reach from ``spoke`` (via it) than from ``home``."""
    for h in hubs:
        if latency.cost(spoke, h) < latency.cost(home, h) - 1e-12:
            return True
        if latency.latency(home, spoke) + latency.latency(spoke, h) < latency.latency(home, h) - 1e-9:
            return True
    return False


def _propagate(replicas: dict[str, Replica], order: list[str], hubs: tuple[str, ...], dag: nx.DiGraph[str]) -> None:
    """Narrow candidates so that nothing runs at a spoke after a hub-only replica, or at a hub before a spoke-only one."""
    # A replica after a hub-only one is hub-only; one before a spoke-only one is spoke-only.
    for rid in order:
        r = replicas[rid]
        if r.is_source:
            continue
        if any(_hub_only(replicas[u], hubs) for u in r.inputs if not replicas[u].is_source):
            kept = tuple(c for c in r.candidates if c in hubs)
            _restrict(r, kept, "it reads from an operator that runs at a hub")
    for rid in reversed(order):
        r = replicas[rid]
        if r.is_source:
            continue
        spoke_only = [d for d in dag.successors(rid) if not any(c in hubs for c in replicas[d].candidates)]
        if spoke_only:
            kept = tuple(c for c in r.candidates if c not in hubs or c == r.home)
            _restrict(r, kept, f"{replicas[spoke_only[0]].op.describe()} after it must run at a spoke")


def _windows_apart(replicas: dict[str, Replica], order: list[str], hubs: tuple[str, ...], dag: nx.DiGraph[str]) -> None:
    """Keep a window with another window downstream off the hubs.

    Whatever runs after a hub replica runs at the hub too, and the hub cannot
    chain two windows in one Spark query (:meth:`hub.engine.compile.Compiler.check_windows`):
    each keeps its own watermark, and Spark refuses the query or fires nothing.
    """
    later_window: dict[str, str | None] = {}  # the first window downstream of each replica, if any
    for rid in reversed(order):
        found = None
        for d in dag.successors(rid):
            found = d if replicas[d].op.kind is Kind.WINDOW else later_window[d]
            if found is not None:
                break
        later_window[rid] = found
    for rid in order:
        r = replicas[rid]
        after = later_window[rid]
        if r.op.kind is not Kind.WINDOW or after is None or not any(c in hubs for c in r.candidates):
            continue
        why = (
            f"window {replicas[after].op.describe()} after it would run at the hub too, and the hub cannot chain "
            f"two windows in one Spark query; run {r.op.describe()} at the edge (scope='local') or compute both "
            "in one window"
        )
        _restrict(r, tuple(c for c in r.candidates if c not in hubs), why)


def _fit(replicas: dict[str, Replica], order: list[str], sites: Sites, hubs: tuple[str, ...]) -> None:
    """Drop spokes too small for a source site's spoke-only replicas from all that site's replicas.

    The spoke-placed replicas of a source site share one spoke, which must
    hold at least the replicas that cannot run at a hub. Left as is when no
    spoke fits, so that the diagnosis can name the site.
    """
    need: dict[str, float] = {}
    sinks: dict[str, float] = {}
    for rid in order:
        r = replicas[rid]
        if r.colocate is not None:
            sinks[r.colocate] = sinks.get(r.colocate, 0.0) + r.load
    for rid in order:
        r = replicas[rid]
        if not r.is_source and r.colocate is None and r.home is not None and not any(c in hubs for c in r.candidates):
            need[r.home] = need.get(r.home, 0.0) + r.load + sinks.get(rid, 0.0)
    for home, load in need.items():
        group = [replicas[rid] for rid in order if replicas[rid].home == home and not replicas[rid].is_source]
        small = {c for r in group for c in r.candidates if c not in hubs and sites.sites[c].cpu < load}
        if not small:
            continue
        pruned = {r.id: tuple(c for c in r.candidates if c not in small) for r in group}
        if all(pruned[r.id] for r in group):
            for r in group:
                r.candidates = pruned[r.id]


def _hub_only(r: Replica, hubs: tuple[str, ...]) -> bool:
    return all(c in hubs for c in r.candidates)


def _restrict(r: Replica, kept: tuple[str, ...], why: str) -> None:
    if not kept:
        msg = f"operator {r.op.describe()} (replica {r.id}) has nowhere to run: {why}; check the scopes along its path"
        raise InfeasiblePlacement(msg)
    r.candidates = kept


def _colocate_sinks(replicas: dict[str, Replica], order: list[str]) -> None:
    """Tie a sink with one input replica to that replica's site, narrowing the input's candidates."""
    for rid in order:
        r = replicas[rid]
        if r.op.kind is not Kind.SINK or len(r.inputs) != 1:
            continue
        up = replicas[r.inputs[0]]
        r.colocate = up.id
        allowed = r.candidates
        if r.op.scope is Scope.ANY:
            continue
        kept = tuple(c for c in up.candidates if c in allowed)
        if not kept and r.op.sink is not None and r.op.sink.hub_only:
            msg = (
                f"sink {r.op.describe()} is a {r.op.sink.kind} sink, which the hub writes, but its input "
                f"{up.op.describe()} can only run at {', '.join(up.candidates)}; a sink runs where its input "
                f"runs: feed it from an operator that runs at the hub (a @global_ map, or a window with "
                f"scope='global')"
            )
            raise InfeasiblePlacement(msg)
        if not kept:
            msg = (
                f"sink {r.op.describe()} is @{r.op.scope.value} but its input {up.op.describe()} "
                f"can only run at {', '.join(up.candidates)}; a sink runs where its input runs: "
                f"change the sink's scope or its input's"
            )
            raise InfeasiblePlacement(msg)
        up.candidates = kept
        r.candidates = kept


def _edges(replicas: dict[str, Replica], order: list[str]) -> list[Edge]:
    """Replica edges, each with the share of source-to-sink paths that run through it."""
    into: dict[str, float] = {}
    children: dict[str, list[str]] = {}
    for rid in order:
        r = replicas[rid]
        into[rid] = 1.0 if r.is_source else sum(into[u] for u in r.inputs)
        for u in r.inputs:
            children.setdefault(u, []).append(rid)
    out_of: dict[str, float] = {}
    for rid in reversed(order):
        kids = children.get(rid)
        out_of[rid] = sum(out_of[k] for k in kids) if kids else 1.0
    total = sum(out_of[rid] for rid in order if replicas[rid].is_source) or 1.0
    edges = []
    for rid in order:
        r = replicas[rid]
        for u in r.inputs:
            up = replicas[u]
            edges.append(Edge(u, rid, up.rate_out, up.bytes_out, into[u] * out_of[rid] / total))
    return edges
