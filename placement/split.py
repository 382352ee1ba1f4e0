"""Scale-out by key: a keyed window split in two across two spokes when no single site can carry it.

When no placement fits, the planner tries splitting one keyed window
replica that only spokes may run (a ``@local`` window of one source site)
in two ranges of its key hash space (:mod:`spanedge.keyrange`), cut where
its records divide evenly as its sites measured them (the replica's
``key_spread``; the middle of the key space when nothing was measured).
The replica's own site keeps the keys below the cut and runs as placed by
the integer program, with its share of the window's records and of the
load of the record-level replicas after it; a *part* at another spoke owns
the keys from the cut. The part runs the window over its keys, the
record-level replicas after it over its results, and the record-level
replicas of the same source site before it again, only to feed itself: its
load is theirs plus its share of the rest, reserved from its spoke's CPU
before the program is solved. A replica whose records cannot be divided
(one key carries nearly all of them) is not split. The part reads the
source site's stream over the link to its spoke, and its results leave
from there; the objective counts both like any crossing.

The search tries the heaviest splittable windows, each at every spoke it
may run at (the previous part's spoke first), and keeps the cheapest split
that fits. A merge back is the planner's ordinary plan once one site can
carry the replica again (see :func:`placement.planner.solve`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from placement.cost import Weights, edge_cost, objective
from placement.graph import reachable
from placement.latency import LatencyMatrix
from placement.problem import Previous, Problem, build_problem
from spanedge.app import App
from spanedge.errors import InfeasiblePlacement
from spanedge.keyrange import KEY_SPACE, describe, even_cut, share_below
from spanedge.operators import Kind
from spanedge.plan import KeyPart, SolverInfo
from spanedge.sites import Sites

#: The first key of the part's range when nothing is known of how the records spread over the keys.
SPLIT_AT = KEY_SPACE // 2
#: A cut leaving either site less than this share of the records is no split (one key carries the replica).
MIN_SHARE = 0.1
#: How many splittable windows the search tries, heaviest first.
MAX_TRIED = 2

#: Places a problem: its complete placement, hub and solver info; raises InfeasiblePlacement.
Place = Callable[[Problem], tuple[dict[str, str], str, SolverInfo]]


@dataclass(frozen=True)
class Split:
    """A placement with one replica split by key: the problem it was solved on, its placement and the part."""

    problem: Problem
    placement: dict[str, str]
    hub: str
    info: SolverInfo
    part: KeyPart
    extra_objective: float
    extra_wan: float
    score: float  # the objective of the placement, the part's traffic included


def chain(problem: Problem, rid: str) -> tuple[list[str], list[str]] | None:
    """The replicas a part of ``rid`` runs with it: ``(before, after)``, or ``None`` if it cannot be split.

    ``before``: the replicas of its source site feeding it, which must be
    record-level (or unions); ``after``: those it feeds at a spoke, which
    must be record-level or sinks. A replica after it that may run at a
    spoke but is not its source site's (a singleton) cannot take a part's
    results, and neither can a window: then the replica is not split.
    """
    replicas = problem.replicas
    group = replicas[rid].group

    def joins(other: str, kind: Kind) -> bool:
        r = replicas[other]
        return r.group == group and (r.op.record_level or r.op.kind is kind)

    before = reachable(problem.dag, rid, lambda u: not replicas[u].is_source, upstream=True)
    after = reachable(problem.dag, rid, lambda d: not all(problem.is_hub(c) for c in replicas[d].candidates))
    if not all(joins(u, Kind.UNION) for u in before) or not all(joins(d, Kind.SINK) for d in after):
        return None
    order = {r: i for i, r in enumerate(problem.order)}
    return sorted(before, key=order.__getitem__), sorted(after, key=order.__getitem__)


def splittable(problem: Problem) -> list[str]:
    """Keyed windows of one source site that only spokes may run and that can be split, heaviest first."""
    found = [
        r.id
        for r in problem.decisions()
        if r.op.window is not None
        and r.group is not None
        and len(r.candidates) > 1
        and not any(problem.is_hub(c) for c in r.candidates)
        and chain(problem, r.id) is not None
    ]
    return sorted(found, key=lambda rid: -problem.load(rid))


@dataclass(frozen=True)
class Cut:
    """Where a replica's keys are cut in two: the part owns ``[at, KEY_SPACE)``, the replica's own site the rest.

    ``kept`` is the share of the replica's records its own site keeps (the
    part takes the rest: :attr:`spanedge.plan.KeyPart.share`); ``measured``
    says whether the sites' key spread gave it (or the keys were assumed
    uniform).
    """

    at: int
    kept: float
    measured: bool


def cut_of(rid: str, previous: Previous | None) -> Cut | None:
    """Where to cut ``rid``'s keys: the previous plan's cut while it still divides the records, else the even cut.

    None if the measured records cannot be divided (either side would take
    less than :data:`MIN_SHARE`).
    """
    spread = previous.key_spread.get(rid) if previous is not None else None
    earlier = [p for p in previous.parts if p.replica == rid] if previous is not None else []
    if not spread:
        at = earlier[0].keys_from if earlier else SPLIT_AT
        return Cut(at, at / KEY_SPACE, measured=False)
    if earlier:
        below = share_below(spread, earlier[0].keys_from)
        if below is not None and MIN_SHARE <= below <= 1 - MIN_SHARE:
            return Cut(earlier[0].keys_from, below, measured=True)
    even = even_cut(spread)
    if even is None or not MIN_SHARE <= even[1] <= 1 - MIN_SHARE:
        return None
    return Cut(even[0], even[1], measured=True)


def part_load(problem: Problem, rid: str, kept: float) -> float:
    """Cores a part of ``rid`` uses: the replicas before it whole, itself and those after it for its keys.

    ``kept`` is the share of the records the replica's own site keeps.
    """
    links = chain(problem, rid)
    assert links is not None
    before, after = links
    own = problem.replicas[rid].load + sum(problem.replicas[d].load for d in after)
    return sum(problem.replicas[u].load for u in before) + (1 - kept) * own


def part_traffic(
    problem: Problem, weights: Weights, placement: dict[str, str], rid: str, site: str, kept: float
) -> tuple[float, float]:
    """The objective and WAN bytes/s a part at ``site`` adds to a placement of ``problem`` (solved with shares).

    The part reads its sources' streams whole and sends what leaves its
    chain, the other share of what the replica's own site (keeping ``kept``) sends.
    """
    links = chain(problem, rid)
    assert links is not None
    before, after = links
    here = {rid, *before, *(d for d in after if placement[d] == placement[rid])}
    scale = (1 - kept) / kept
    cost = wan = 0.0
    for member in here:
        for e in problem.in_edges.get(member, ()):
            if problem.replicas[e.src].is_source and placement[e.src] != site:
                cost += edge_cost(problem, weights, e, placement[e.src], site)
                wan += e.bytes_per_s
        for e in problem.out_edges.get(member, ()):
            if e.dst not in here and placement[e.dst] != site:
                cost += scale * edge_cost(problem, weights, e, site, placement[e.dst])
                wan += scale * e.bytes_per_s
    return cost, wan


def capped(sites: Sites, site: str, cpu: float) -> Sites:
    """``sites`` with ``site``'s CPU set to ``cpu`` (what is left once a part's load is reserved)."""
    updated = {**sites.sites, site: msgspec.structs.replace(sites.sites[site], cpu=cpu)}
    return msgspec.structs.replace(sites, sites=updated)


def search(
    app: App,
    sites: Sites,
    matrix: LatencyMatrix,
    weights: Weights,
    problem: Problem,
    place: Place,
    previous: Previous | None = None,
) -> Split | None:
    """The cheapest placement with one keyed window split in two by key that fits, or ``None``.

    ``problem`` is the unsplit problem (found infeasible); ``place`` solves a
    problem. With ``previous``, the spoke of its part of a replica is tried
    first and kept unless another split is better by more than the hysteresis.
    """
    before = previous.placement if previous is not None else None
    earlier = {p.replica: p.site for p in previous.parts} if previous is not None else {}
    options: list[Split] = []
    for rid in splittable(problem)[:MAX_TRIED]:
        cut = cut_of(rid, previous)
        if cut is None:
            continue
        need = part_load(problem, rid, cut.kept)
        replica = problem.replicas[rid]
        spokes = sorted(replica.candidates, key=lambda s: (s != earlier.get(rid), replica.candidates.index(s)))
        for site in spokes:
            left = sites.sites[site].cpu - need
            if left <= 0:
                continue
            split = build_problem(app, capped(sites, site, left), matrix, before, shares={rid: cut.kept})
            try:
                placement, hub, info = place(split)
            except InfeasiblePlacement:
                continue
            if placement[rid] == site:
                continue  # both halves at one site: that is no split
            cost, wan = part_traffic(split, weights, placement, rid, site, cut.kept)
            score = objective(split, weights, placement) + cost
            records = f", {1 - cut.kept:.0%} of its records as measured" if cut.measured else ""
            reason = (
                f"split by key: no spoke within reach carries '{replica.op.name}' of {replica.home} "
                f"({problem.load(rid):.3g} cores) with the rest of its site's operators; "
                f"{describe(cut.at, KEY_SPACE)} here{records} ({need:.3g} cores), the others at {placement[rid]}"
            )
            share = round(1 - cut.kept, 4) if cut.measured else None
            part = KeyPart(rid, site, cut.at, KEY_SPACE, reason=reason, share=share)
            options.append(Split(split, placement, hub, info, part, cost, wan, score))
        if options:
            break
    if not options:
        return None
    # ties go to a split that leaves the replica's own site where it was (or at its source site)
    stay = {rid: (before or {}).get(rid, problem.replicas[rid].home) for rid in {s.part.replica for s in options}}
    best = min(options, key=lambda s: (round(s.score, 9), s.placement[s.part.replica] != stay[s.part.replica]))
    if previous is not None:
        kept = [s for s in options if earlier.get(s.part.replica) == s.part.site]
        if kept and kept[0].score <= best.score * (1 + previous.hysteresis):
            return kept[0]
    return best
