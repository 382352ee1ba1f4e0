"""Baseline placements, measured with the same cost model as the solver's plans.

* ``central``: every replica but the sources at one hub (the best one),
  ignoring scopes and capacities: ship all raw data to the cloud.
* ``local-first``: SpanEdge's own rule (Sajjad et al., SEC 2016): local
  groups at their source sites, everything else at the hub with the lowest
  maximum latency from the sites that feed it. Capacities are ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from placement.cost import Weights, objective
from placement.problem import Problem

BASELINES = ("central", "local-first")


def central(problem: Problem, weights: Weights) -> tuple[dict[str, str], str]:
    """Every non-source replica at the hub that gives the lowest objective."""
    best: tuple[float, dict[str, str], str] | None = None
    for hub in problem.hubs:
        placement = problem.resolve({r.id: hub for r in problem.decisions()})
        value = objective(problem, weights, placement)
        if best is None or value < best[0]:
            best = (value, placement, hub)
    assert best is not None
    return best[1], best[2]


def local_first(problem: Problem, weights: Weights) -> tuple[dict[str, str], str]:
    """Replicas that must run at a spoke at their source site, the rest at one hub.

    The hub is the one with the lowest maximum latency from the source sites
    whose data reaches hub-placed replicas (ties: lowest objective).
    """
    edge: dict[str, str] = {}
    for r in problem.decisions():
        if r.home is not None and not any(problem.is_hub(c) for c in r.candidates):
            edge[r.id] = r.home
    best: tuple[float, float, dict[str, str], str] | None = None
    for hub in problem.hubs:
        chosen = {r.id: edge.get(r.id, hub) for r in problem.decisions()}
        placement = problem.resolve(chosen)
        feeding = {placement[e.src] for e in problem.edges if placement[e.dst] == hub != placement[e.src]}
        worst = max((problem.latency.latency(s, hub) for s in feeding), default=0.0)
        key = (worst, objective(problem, weights, placement))
        if best is None or key < best[:2]:
            best = (key[0], key[1], placement, hub)
    assert best is not None
    return best[2], best[3]


RULES: dict[str, Callable[[Problem, Weights], tuple[dict[str, str], str]]] = {
    "central": central,
    "local-first": local_first,
}
