"""Why each replica runs where it runs: one short reason per assignment.

The paths a reason follows are walked on the replica DAG (:attr:`placement.problem.Problem.dag`).
"""

from __future__ import annotations

from placement.cost import Weights, edge_cost, site_loads
from placement.graph import breadth_first, reachable
from placement.problem import Problem, Replica
from spanedge.operators import Kind
from spanedge.scope import Scope


def fmt_bytes(value: float) -> str:
    """Format bytes/s for people: ``'1.2 kB/s'``."""
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} B/s"


def reasons(problem: Problem, weights: Weights, placement: dict[str, str], hub: str, method: str) -> dict[str, str]:
    """A reason for every replica of a complete placement."""
    loads = site_loads(problem, placement)
    out: dict[str, str] = {}
    for rid in problem.order:
        r = problem.replicas[rid]
        out[rid] = _reason(problem, weights, placement, hub, method, r, loads)
    return out


def _reason(
    p: Problem,
    weights: Weights,
    placement: dict[str, str],
    hub: str,
    method: str,
    r: Replica,
    loads: dict[str, float],
) -> str:
    site = placement[r.id]
    if r.is_source:
        return f"source: stream '{r.op.stream_name}' arrives at {site} ({r.rate_out:.3g} records/s, {fmt_bytes(r.bytes_out)})"
    if r.colocate is not None:
        return f"sink: runs where its input '{r.colocate}' runs"
    if method == "central":
        return f"baseline central: every operator at hub {hub}, scopes and capacities ignored"
    if method == "local-first":
        if p.is_hub(site):
            return f"baseline local-first: non-local operators at hub {hub}, the lowest max latency from its inputs"
        return "baseline local-first: local operators at their source site"
    spoke_ok = any(not p.is_hub(c) for c in r.candidates)
    hub_ok = any(p.is_hub(c) for c in r.candidates)
    if p.is_hub(site):
        if not spoke_ok:
            return _hub_only(p, r, hub)
        return _at_hub(p, weights, placement, r, loads, hub)
    if not hub_ok:
        why = "scope @local" if r.op.scope is Scope.LOCAL else _spoke_only(p, r)
        if site == (r.home or site) and r.op.scope is Scope.LOCAL:
            return "scope @local: at its source site"
    else:
        why = _at_edge(p, weights, placement, r, hub)
    home = r.home or site
    if site == home:
        return f"{why}; at its source site" if not hub_ok else why
    latency = p.latency.latency(home, site)
    need = sum(p.load(q.id) for q in p.decisions() if q.home == home and placement[q.id] == site)
    if need > p.cpu(home):
        return (
            f"capacity: {home} is full ({p.cpu(home):.3g} cores, its local operators need {need:.3g}), "
            f"offloaded to {site} ({latency:.0f} ms); {why}"
        )
    return f"{why}; offloaded from {home} to {site} ({latency:.0f} ms), the objective's choice"


def _hub_only(p: Problem, r: Replica, hub: str) -> str:
    if r.op.scope is Scope.LOCAL:
        return "scope @local: at its source site (a hub)"
    if r.op.kind is Kind.TRANSFORM:
        return f"transform: a PySpark function, runs at hub {hub}"
    if r.op.scope is Scope.GLOBAL:
        return f"scope @global_: runs at hub {hub}"
    if r.home is None:
        return f"merges the streams of {len(r.merged)} sites: runs at hub {hub}"
    ups = [u for u in r.inputs if not p.replicas[u].is_source and p.is_hub(p.replicas[u].candidates[0])]
    if ups:
        return f"reads from '{ups[0]}', which runs at a hub: runs at hub {hub}"
    return f"runs at hub {hub}"


def _spoke_only(p: Problem, r: Replica) -> str:
    """Name the nearest downstream replica that must run at a spoke."""
    for rid in breadth_first(p.dag, r.id):
        down = p.replicas[rid]
        if down.op.scope is Scope.LOCAL or (down.colocate is None and not any(p.is_hub(c) for c in down.candidates)):
            return f"feeds '{rid}', which must run at a spoke, and nothing returns from a hub to a spoke"
    return "must run at a spoke"


def _at_edge(p: Problem, weights: Weights, placement: dict[str, str], r: Replica, hub: str) -> str:
    into = sum(p.replicas[u].bytes_out for u in r.inputs)
    if r.bytes_out < into:
        return f"objective: at the edge it cuts WAN traffic {fmt_bytes(into)} -> {fmt_bytes(r.bytes_out)}"
    return _spoke_only(p, r) if not any(p.is_hub(c) for c in r.candidates) else _delta(p, weights, placement, r, hub)


def _at_hub(
    p: Problem, weights: Weights, placement: dict[str, str], r: Replica, loads: dict[str, float], hub: str
) -> str:
    into = sum(p.replicas[u].bytes_out for u in r.inputs)
    if r.bytes_out > into:
        return (
            f"objective: its output ({fmt_bytes(r.bytes_out)}) exceeds its input ({fmt_bytes(into)}); "
            "at the hub the larger stream stays off the WAN"
        )
    at_hub = [u for u in r.inputs if not p.replicas[u].is_source and p.is_hub(placement[u])]
    if at_hub:
        return f"follows its input '{at_hub[0]}', which runs at the hub (nothing returns from the hub to a spoke)"
    spoke = next((c for c in r.candidates if not p.is_hub(c)), None)
    if spoke is not None and loads[spoke] + p.load(r.id) > p.cpu(spoke):
        return f"capacity: {spoke} has no room ({p.cpu(spoke) - loads[spoke]:.3g} cores free, needs {p.load(r.id):.3g})"
    return _delta(p, weights, placement, r, hub)


def _closure(p: Problem, placement: dict[str, str], r: Replica, down: bool) -> list[Replica]:
    """``r`` with its spoke-placed descendants (``down``) or its hub-placed ancestors: what must move with it."""

    def moves(rid: str) -> bool:
        q = p.replicas[rid]
        return not q.is_source and q.colocate is None and p.is_hub(placement[rid]) != down

    return [r, *(p.replicas[rid] for rid in reachable(p.dag, r.id, moves, upstream=not down))]


def _delta(p: Problem, weights: Weights, placement: dict[str, str], r: Replica, hub: str) -> str:
    """Describe what the valid move of ``r`` between its spoke and the hub would cost."""
    site = placement[r.id]
    if p.is_hub(site):
        used = {placement[q.id] for q in p.decisions() if q.home == r.home and not p.is_hub(placement[q.id])}
        target = next(iter(used)) if used else (r.home or site)
        group = _closure(p, placement, r, down=False)
    else:
        target = hub
        group = _closure(p, placement, r, down=True)
    if any(target not in q.candidates for q in group):
        return f"objective: the other candidates are ruled out by its neighbours' sites ({target} is not allowed)"
    ids = {q.id for q in group} | {a for q in group for a in q.attached}
    edges = {(e.src, e.dst): e for rid in ids for e in (*p.in_edges.get(rid, ()), *p.out_edges.get(rid, ()))}

    def around(where: str) -> tuple[float, float, float]:
        moved = {k: (where if k in ids else placement[k]) for e in edges.values() for k in (e.src, e.dst)}
        wan = sum(e.bytes_per_s for e in edges.values() if moved[e.src] != moved[e.dst])
        latency = sum(e.paths * p.latency.latency(moved[e.src], moved[e.dst]) for e in edges.values())
        cost = sum(edge_cost(p, weights, e, moved[e.src], moved[e.dst]) for e in edges.values())
        return cost, wan, latency

    here, there = around(site), around(target)
    what = "moving it" if len(group) == 1 else f"moving it and {len(group) - 1} more with it"
    if abs(there[0] - here[0]) < 1e-9:
        tail = "" if p.is_hub(site) else "; stays near its source"
        return f"objective: {what} to {target} would cost the same{tail}"
    return (
        f"objective: {what} to {target} would be {there[0] - here[0]:+.3g} worse "
        f"(WAN traffic {fmt_bytes(here[1])} -> {fmt_bytes(there[1])}, mean latency {there[2] - here[2]:+.1f} ms)"
    )
