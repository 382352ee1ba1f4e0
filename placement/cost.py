"""The cost model every solver and baseline is measured with.

The objective is dimensionless, so that its two weights are comparable::

    objective = traffic × Σ_crossing(bytes/s × link cost) / source bytes/s
              + latency × mean source-to-sink path latency / reference ms

The traffic term is 1.0 when as many bytes cross the WAN (at cost 1) as all
sources emit, i.e. when every raw record is shipped once. The reference
latency is the mean, over source replicas, of the latency from the source's
site to its nearest hub, so the latency term is 1.0 when a path costs one
direct hop to the hub. The mean over paths is linear in the edges (each edge
weighs the share of source-to-sink paths through it), which keeps the
integer program small; the worst path is checked against the SLO afterwards.

A re-plan adds the cost of moving replicas away from the previous plan::

    migration = migration weight × Σ_moved(state bytes × link cost) / (source bytes/s × horizon)

that is, the state a move ships is counted like traffic spread over
:data:`MIGRATION_HORIZON_S` seconds of the sources' output.
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.problem import Edge, Previous, Problem
from spanedge.placement_settings import WEIGHTS, check_weight, check_weights
from spanedge.plan import Totals


@dataclass(frozen=True)
class Weights:
    """Weights of the objective's terms: WAN traffic, mean path latency and migration in a re-plan.

    Each is checked by :func:`spanedge.placement_settings.check_weight` (from 0 to
    :data:`~spanedge.placement_settings.MAX_WEIGHT`), raising :class:`~spanedge.errors.InvalidSettings`.
    """

    traffic: float = 1.0
    latency: float = 1.0
    migration: float = 1.0

    def __post_init__(self) -> None:
        for name in WEIGHTS:
            object.__setattr__(self, name, check_weight(getattr(self, name), f"objective weight {name}"))

    @classmethod
    def of(cls, weights: object) -> Weights:
        """The weights a mapping names (None or a missing name: the default), by :func:`check_weights`' rule."""
        return cls(**(check_weights(weights) or {}))


def edge_cost(problem: Problem, weights: Weights, edge: Edge, a: str, b: str) -> float:
    """The objective's share of ``edge`` when its ends run at ``a`` and ``b``."""
    if a == b:
        return 0.0
    m = problem.latency
    traffic = edge.bytes_per_s * m.cost(a, b) / problem.source_bytes
    latency = edge.paths * m.latency(a, b) / problem.reference_ms
    return weights.traffic * traffic + weights.latency * latency


#: Moved state counts as traffic spread over this many seconds of the sources' output.
MIGRATION_HORIZON_S = 60.0


def move_cost(problem: Problem, weights: Weights, state_bytes: float, a: str, b: str) -> float:
    """The objective's share of moving a replica holding ``state_bytes`` from ``a`` to ``b``."""
    if a == b or state_bytes <= 0:
        return 0.0
    shipped = state_bytes * problem.latency.cost(a, b) / (problem.source_bytes * MIGRATION_HORIZON_S)
    return weights.migration * shipped


def moved_state(problem: Problem, previous: Previous, rid: str) -> float:
    """The state bytes that move with decision replica ``rid``: its own and its attached sinks'."""
    r = problem.replicas[rid]
    return previous.state(rid) + sum(previous.state(a) for a in r.attached)


def moves(problem: Problem, previous: Previous, placement: dict[str, str]) -> list[str]:
    """The replicas of ``problem`` that ``placement`` runs elsewhere than ``previous`` did, in plan order."""
    return [
        rid
        for rid in problem.order
        if rid in previous.placement
        and not problem.replicas[rid].is_source
        and previous.placement[rid] != placement[rid]
    ]


def migration(problem: Problem, weights: Weights, previous: Previous, placement: dict[str, str]) -> float:
    """The migration term of ``placement`` against ``previous`` (0 if nothing moves)."""
    total = 0.0
    for r in problem.decisions():
        before = previous.placement.get(r.id)
        if before is not None:
            total += move_cost(problem, weights, moved_state(problem, previous, r.id), before, placement[r.id])
    return total


def objective(problem: Problem, weights: Weights, placement: dict[str, str]) -> float:
    """The objective of a complete placement (every replica, sources and sinks included)."""
    return sum(edge_cost(problem, weights, e, placement[e.src], placement[e.dst]) for e in problem.edges)


def evaluate(problem: Problem, weights: Weights, placement: dict[str, str]) -> Totals:
    """Totals of a complete placement: WAN bytes/s, worst and mean path latency, objective, hub cores."""
    m = problem.latency
    wan = 0.0
    mean = 0.0
    reach: dict[str, float] = {}
    for rid in problem.order:
        ins = problem.in_edges.get(rid, ())
        reach[rid] = max((reach[e.src] + m.latency(placement[e.src], placement[rid]) for e in ins), default=0.0)
    for e in problem.edges:
        a, b = placement[e.src], placement[e.dst]
        if a != b:
            wan += e.bytes_per_s
            mean += e.paths * m.latency(a, b)
    worst = max((reach[r] for r in problem.order if r not in problem.out_edges), default=0.0)
    hub_cpu = sum(r.load for r in problem.replicas.values() if problem.is_hub(placement[r.id]))
    return Totals(
        wan_bytes_per_s=wan,
        worst_latency_ms=worst,
        mean_latency_ms=mean,
        objective=objective(problem, weights, placement),
        hub_cpu=hub_cpu,
    )


def site_loads(problem: Problem, placement: dict[str, str]) -> dict[str, float]:
    """Cores used at each site by a complete placement."""
    loads = dict.fromkeys(problem.sites.sites, 0.0)
    for r in problem.replicas.values():
        loads[placement[r.id]] += r.load
    return loads
