"""Handovers: when a plan version moves replicas between spokes, the event time at which they switch.

A replica that moves from one spoke to another is split at a switch time T
(see :class:`spanedge.plan.Handover`): the old owner finishes the windows
starting before T, the new owner computes those starting at or after it. T
is a few seconds of event time after the re-plan, so the plan reaches both
sites (and the new owner subscribes to the replica's sources) before any
record of T's windows exists, and it is a multiple of the slide of every
moved window, so no tumbling window straddles it. Moves to or from the hub
are not handed over: the hub's windows live in Spark.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable

from spanedge.app import App
from spanedge.plan import Handover, Plan, split_replica

#: Event-time seconds between a re-plan and the switch: at least the time to distribute a plan.
DEFAULT_DELAY_S = 5.0
#: How long (s of event time past the switch) a plan keeps listing a handover, for an old owner still finishing.
DEFAULT_KEEP_S = 600.0


def switch_time(now: float, delay: float, periods: Iterable[float]) -> float:
    """The first time at least ``delay`` after ``now`` that is a multiple of every period in ``periods``."""
    steps = sorted({p for p in periods if p > 0}, reverse=True) or [1.0]
    largest = steps[0]
    t = math.ceil((now + delay) / largest) * largest
    for _ in range(10_000):
        if all(abs(t / p - round(t / p)) < 1e-9 for p in steps):
            return t
        t += largest
    return t  # periods without a common multiple in reach: aligned to the largest


def stamp_handovers(
    plan: Plan,
    previous: Plan | None,
    app: App,
    now: float,
    hubs: Collection[str],
    *,
    delay: float = DEFAULT_DELAY_S,
    keep: float = DEFAULT_KEEP_S,
) -> Plan:
    """Add to ``plan`` a handover for each replica it moves from one spoke to another.

    All the replicas of one plan version switch at the same time (a chain of
    record-level operators and windows stays consistent). Handovers of
    ``previous`` whose replica did not move again and whose switch is less
    than ``keep`` seconds ago stay listed, so an old owner that is still
    finishing (or restarting) keeps its part.
    """
    if previous is None:
        return plan
    before = {a.replica: a for a in previous.assignments}
    moved = [
        (a, before[a.replica])
        for a in plan.assignments
        if a.replica in before
        and before[a.replica].site != a.site
        and a.site not in hubs
        and before[a.replica].site not in hubs
    ]
    moved_now = {a.replica for a, _ in moved}
    kept = tuple(
        h
        for h in previous.handovers
        if h.replica not in moved_now and plan.site_of_or_none(h.replica) == h.target and h.switch_at > now - keep
    )
    if not moved:
        return plan if kept == plan.handovers else dataclasses.replace(plan, handovers=kept)
    periods = []
    for a, _ in moved:
        op = app.operators.get(split_replica(a.replica)[0])
        if op is not None and op.window is not None:
            periods.append(op.window.period)
    at = switch_time(now, delay, periods)
    fresh = tuple(Handover(a.replica, old.site, a.site, at, old.since) for a, old in moved)
    return dataclasses.replace(plan, handovers=kept + fresh)
