"""Which of an app's hub windows a held-up site, or an old owner's owed records, hold back.

The holds keep an app's sealed log segments back from its window queries
while a live site's frontier trails (:mod:`hub.handover.frontiers`) or an old
owner still owes records before a switch (:mod:`hub.handover.holds`). A
window query reads only what flows, in the plan in force, into the replica
of its sink, so it waits only for what can reach it:

* the frontier of a site that runs a replica upstream of its sink, or that
  owes (or recomputes) a handover's part of one;
* a handover of a replica upstream of its sink.

Any other query is held from the event time where what it needs stops
(infinite: not held), so a slow site or a move of one window's chain leaves
the app's other hub windows at their usual pace. A sink the plan's flows do
not reach (a plan without them) waits for everything, as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from hub.handover.holds import start_of
from spanedge.plan import Handover, Plan


def upstream(plan: Plan, sink: str) -> frozenset[str]:
    """The replicas whose records flow into replica ``sink`` in ``plan``, ``sink`` included."""
    into: dict[str, list[str]] = {}
    for f in plan.flows:
        into.setdefault(f.dst, []).append(f.src)
    seen = {sink}
    todo = [sink]
    while todo:
        for src in into.get(todo.pop(), ()):
            if src not in seen:
                seen.add(src)
                todo.append(src)
    return frozenset(seen)


def feeders(plan: Plan, replicas: frozenset[str]) -> frozenset[str]:
    """The sites whose records can reach a query reading ``replicas``: those its windows wait for.

    The sites running one of them in ``plan`` (the hub aside), and the old
    owner and any recomputing site of a handover of one.
    """
    sites = {a.site for a in plan.assignments if a.replica in replicas and a.site != plan.hub}
    for h in plan.handovers:
        if h.replica in replicas:
            sites.update(s for s in (h.source, h.recoverer) if s is not None and s != plan.hub)
    return frozenset(sites)


def reader_starts(
    plan: Plan,
    sinks: Mapping[str, str],
    owed: Iterable[Handover],
    frontiers: Mapping[str, float],
) -> dict[str, float]:
    """Per window query's log reader, the event time from which it waits (infinite: nothing holds it back).

    Args:
        plan: the app's plan in force.
        sinks: each held reader's sink replica.
        owed: the handovers whose old owner has not delivered its part (:meth:`hub.handover.holds.HandoverHolds.owed`).
        frontiers: the live sites' frontiers (:meth:`hub.handover.frontiers.SiteFrontiers.live`).
    """
    owed = list(owed)
    out: dict[str, float] = {}
    for reader, sink in sinks.items():
        replicas = upstream(plan, sink)
        if replicas == {sink}:  # nothing flows into it in the plan: it waits for everything
            starts = [start_of(h) for h in owed] + list(frontiers.values())
        else:
            sites = feeders(plan, replicas)
            starts = [start_of(h) for h in owed if h.replica in replicas]
            starts += [f for site, f in frontiers.items() if site in sites]
        out[reader] = min(starts, default=math.inf)
    return out
