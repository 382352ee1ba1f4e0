"""A fast heuristic placement: the integer program's always-feasible fallback.

For each hub: give every source site a spoke for its local operators (its own
site if it has room, else the nearest spoke with room), start every other
replica at the hub, then move chains of replicas to their spoke while that
lowers the objective and fits, and finally while the hub is over capacity.
The best hub wins.
"""

from __future__ import annotations

from placement.constraints import EPS
from placement.cost import Weights, edge_cost, objective
from placement.problem import Problem, Replica


class _State:
    """A placement under construction for one hub."""

    def __init__(self, problem: Problem, weights: Weights, hub: str) -> None:
        self.p = problem
        self.w = weights
        self.hub = hub
        self.full: dict[str, str] = {}
        self.free = {s: problem.cpu(s) for s in problem.sites.sites}
        self.spoke: dict[str, str] = {}

    def put(self, r: Replica, site: str) -> None:
        old = self.full.get(r.id)
        load = self.p.load(r.id)
        if old is not None:
            self.free[old] += load
        self.free[site] -= load
        self.full[r.id] = site
        for a in r.attached:
            self.full[a] = site

    def cost_around(self, ids: set[str]) -> float:
        seen: set[tuple[str, str]] = set()
        total = 0.0
        for rid in ids:
            for e in (*self.p.in_edges.get(rid, ()), *self.p.out_edges.get(rid, ())):
                if (e.src, e.dst) in seen:
                    continue
                seen.add((e.src, e.dst))
                total += edge_cost(self.p, self.w, e, self.full[e.src], self.full[e.dst])
        return total

    def chain(self, r: Replica, spoke: str) -> list[Replica] | None:
        """``r`` and its hub-placed ancestors, all of which must be able to move to ``spoke``."""
        out: list[Replica] = []
        stack = [r]
        seen = {r.id}
        while stack:
            cur = stack.pop()
            if not self.p.is_hub(self.full[cur.id]):
                continue
            if spoke not in cur.candidates:
                return None
            out.append(cur)
            for u in cur.inputs:
                up = self.p.replicas[u]
                if up.id not in seen and not up.is_source:
                    seen.add(up.id)
                    stack.append(up)
        return out

    def try_move(self, group: list[Replica], site: str, force: bool = False) -> bool:
        need = sum(self.p.load(r.id) for r in group)
        if need > self.free[site] + EPS:
            return False
        ids = {r.id for r in group} | {a for r in group for a in r.attached}
        before = self.cost_around(ids)
        old = {r.id: self.full[r.id] for r in group}
        for r in group:
            self.put(r, site)
        if force or self.cost_around(ids) < before - 1e-12:
            return True
        for r in group:
            self.put(r, old[r.id])
        return False


def greedy(problem: Problem, weights: Weights) -> tuple[dict[str, str], str] | None:
    """Return a valid complete placement and its hub, or ``None`` if the heuristic finds none."""
    best: tuple[float, dict[str, str], str] | None = None
    for hub in problem.hubs:
        found = _for_hub(problem, weights, hub)
        if found is None:
            continue
        value = objective(problem, weights, found)
        if best is None or value < best[0] - 1e-12:
            best = (value, found, hub)
    return None if best is None else (best[1], best[2])


def _for_hub(problem: Problem, weights: Weights, hub: str) -> dict[str, str] | None:
    st = _State(problem, weights, hub)
    for rid in problem.order:
        r = problem.replicas[rid]
        if r.is_source:
            st.full[rid] = r.home or r.candidates[0]
            for a in r.attached:
                st.full[a] = st.full[rid]
            st.free[st.full[rid]] -= problem.load(rid)
    decisions = problem.decisions()
    must: dict[str, list[Replica]] = {}
    for r in decisions:
        if hub not in r.candidates:
            spokes = [c for c in r.candidates if not problem.is_hub(c)]
            if not spokes or r.home is None:
                return None
            must.setdefault(r.home, []).append(r)
    homes = sorted(
        {r.home for r in decisions if r.home is not None},
        key=lambda h: -sum(problem.load(r.id) for r in must.get(h, ())),
    )
    for home in homes:
        group = must.get(home, [])
        options = _spoke_options(problem, decisions, home, group)
        need = sum(problem.load(r.id) for r in group)
        chosen = next((c for c in options if st.free[c] + EPS >= need), None)
        if chosen is None:
            if group:
                return None
            continue
        st.spoke[home] = chosen
        for r in group:
            st.put(r, chosen)
    for r in decisions:
        if r.id not in st.full:
            st.put(r, hub)
    if st.free[hub] < -EPS and not _relieve_hub(st, decisions):
        return None
    for _ in range(3):
        improved = False
        for r in decisions:
            if r.home is None or r.home not in st.spoke:
                continue
            chain = st.chain(r, st.spoke[r.home])
            if chain and st.try_move(chain, st.spoke[r.home]):
                improved = True
        if not improved:
            break
    return st.full


def _spoke_options(problem: Problem, decisions: list[Replica], home: str, group: list[Replica]) -> list[str]:
    """Spokes a source site's replicas may share, nearest first."""
    members = group or [r for r in decisions if r.home == home and not all(problem.is_hub(c) for c in r.candidates)]
    common: set[str] | None = None
    for r in members:
        spokes = {c for c in r.candidates if not problem.is_hub(c)}
        common = spokes if common is None else common & spokes
    ordered = sorted(common or (), key=lambda c: (c != home, problem.latency.latency(home, c), c))
    return ordered


def _relieve_hub(st: _State, decisions: list[Replica]) -> bool:
    """Move chains from the hub to their spokes, heaviest first, until the hub fits."""
    while st.free[st.hub] < -EPS:
        moves: list[tuple[list[Replica], str]] = []
        for r in decisions:
            if r.home is not None and r.home in st.spoke and st.p.is_hub(st.full[r.id]):
                chain = st.chain(r, st.spoke[r.home])
                if chain:
                    moves.append((chain, st.spoke[r.home]))
        if not moves:
            return False
        moves.sort(key=lambda m: -sum(st.p.load(r.id) for r in m[0]))
        if not any(st.try_move(chain, site, force=True) for chain, site in moves):
            return False
    return True
