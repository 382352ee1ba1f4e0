"""Handovers: when a plan version moves replicas between sites, the event time at which they switch.

A replica that moves from one site to another (spoke to spoke, spoke to hub
or hub to spoke) is split at a switch time T (see
:class:`spanedge.plan.Handover`): the old owner finishes the windows
starting before T, the new owner computes those starting at or after it. T
is a few seconds of event time after the re-plan (and the largest gap of the
moved session windows more), so the plan reaches every site (and the new
owner subscribes to the replica's sources) before any record of T's windows
exists, and it is a multiple of the period of every moved window (and, when
the hub is at one end of a move, of every window downstream of a moved
replica), so no tumbling window straddles it.

A keyed replica split in parts by key range (:class:`spanedge.plan.KeyPart`),
or merged back, hands over only the keys that change site, at the same
switch time and with the same rule: each window belongs to the owner of
its key and its start.

A source site new to the app (a site that joined: :class:`spanedge.plan.Join`)
switches at the same time: the hub's windows take its records from T on.

At the hub a move or a join changes the Spark query of the sinks downstream of the
moved replica or of the new site's replicas; :func:`before_placement` gives the placement the query of the
old side is compiled from while both run (see :mod:`hub.handover.cutoffs`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Collection, Iterable

from spanedge.app import App
from spanedge.operators import WindowKind, WindowSpec
from spanedge.plan import Handover, Join, Plan, split_replica

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
    *,
    delay: float = DEFAULT_DELAY_S,
    keep: float = DEFAULT_KEEP_S,
) -> Plan:
    """Add to ``plan`` a handover for each replica it moves from one site to another (the hub included).

    All the replicas of one plan version switch at the same time (a chain of
    record-level operators and windows stays consistent), and so do the
    source sites new to the app (a join each). Handovers of
    ``previous`` whose replica did not move again and whose switch is less
    than ``keep`` seconds ago stay listed, so an old owner that is still
    finishing (or restarting) keeps its part; so do its joins of sites the
    plan still reads.
    """
    if previous is None:
        return plan
    plan = carry_parts(plan, previous)
    before = {a.replica: a for a in previous.assignments}
    divided = {p.replica for p in (*plan.parts, *previous.parts)}
    moved = [
        (a, before[a.replica])
        for a in plan.assignments
        if a.replica in before and a.replica not in divided and before[a.replica].site != a.site
    ]
    keyed = [
        m
        for r in sorted(divided)
        if r in before and plan.site_of_or_none(r) is not None
        for m in key_moves(previous, plan, r)
    ]
    moved_now = {a.replica for a, _ in moved} | {r for r, *_ in keyed}
    kept = tuple(
        h
        for h in previous.handovers
        if h.replica not in moved_now and _owner(plan, h.replica, h.keys_from) == h.target and h.switch_at > now - keep
    )
    sources = plan.source_sites()
    joined = sources - previous.source_sites()
    kept_joins = tuple(j for j in previous.joins if j.site in sources and j.switch_at > now - keep)
    if not moved and not keyed and not joined:
        if kept == plan.handovers and kept_joins == plan.joins:
            return plan
        return dataclasses.replace(plan, handovers=kept, joins=kept_joins)
    via_hub = bool(joined) or any(plan.hub in (a.site, old.site) for a, old in moved)
    operators = {split_replica(r)[0] for r in moved_now} | joined_operators(plan, joined)
    at = _switch_at(app, operators, now, delay, via_hub=via_hub)
    fresh = tuple(Handover(a.replica, old.site, a.site, at, old.since) for a, old in moved)
    fresh += tuple(Handover(r, source, target, at, epoch, lo, hi) for r, source, target, epoch, lo, hi in keyed)
    joins = kept_joins + tuple(Join(site, at) for site in sorted(joined))
    return dataclasses.replace(plan, handovers=kept + fresh, joins=joins)


def joined_operators(plan: Plan, sites: Collection[str]) -> set[str]:
    """The operators of ``plan``'s replicas that read the streams of ``sites`` (their source sites)."""
    return {a.operator for a in plan.assignments if a.group in sites}


def postpone(plan: Plan, previous: Plan | None, app: App, now: float, *, delay: float = DEFAULT_DELAY_S) -> Plan:
    """``plan`` with the switch of the handovers (and joins) it adds moved later if that switch is now less than ``delay`` away.

    A plan is stamped before the hub deploys it on Spark, and the sites get it
    only after that; on a loaded hub, starting the queries of a move to or
    from the hub has taken 8.5 s against the 5 s delay. A switch that comes
    before the sites have the plan loses what was published in between (the
    new owner had not subscribed yet), so the hub checks again once its own
    part is deployed. The new switch is found as :func:`stamp_handovers`
    finds it, from ``now``.
    """
    if previous is None:
        return plan
    earlier = {_plain(h) for h in previous.handovers}
    fresh = [h for h in plan.handovers if _plain(h) not in earlier]  # a recovery added later is no new move
    joins = [j for j in plan.joins if j not in previous.joins]
    switches = [h.switch_at for h in fresh] + [j.switch_at for j in joins]
    if not switches or min(switches) >= now + delay:
        return plan
    via_hub = bool(joins) or any(plan.hub in (h.source, h.target) for h in fresh)
    operators = {split_replica(h.replica)[0] for h in fresh} | joined_operators(plan, {j.site for j in joins})
    at = _switch_at(app, operators, now, delay, via_hub=via_hub)
    later = tuple(dataclasses.replace(h, switch_at=at) if h in fresh else h for h in plan.handovers)
    joined = tuple(dataclasses.replace(j, switch_at=at) if j in joins else j for j in plan.joins)
    return dataclasses.replace(plan, handovers=later, joins=joined)


def _plain(h: Handover) -> Handover:
    """``h`` without a recovery (:attr:`Handover.recoverer`)."""
    return h if h.recoverer is None else dataclasses.replace(h, recover_from=None, recoverer=None)


def _switch_at(app: App, operators: set[str], now: float, delay: float, *, via_hub: bool) -> float:
    """The switch of a move of ``operators``: ``delay`` plus their longest session gap after ``now``, aligned.

    Aligned to their windows' periods and, when the move goes through the hub, to those downstream.
    """
    return switch_time(now, delay + _session_gap(app, operators), _periods(app, operators, downstream=via_hub))


def carry_parts(plan: Plan, previous: Plan) -> Plan:
    """Stamp each key part of ``plan`` with the version its site took it over at.

    A part at the site (and with the keys) ``previous`` ran it keeps its
    ``since``; a new one gets ``plan.version``, so its records to the hub
    are numbered in an epoch of their own.
    """
    if not plan.parts:
        return plan
    earlier = {(p.replica, p.site, p.keys_from, p.keys_before): p.since for p in previous.parts}
    parts = tuple(
        dataclasses.replace(p, since=earlier.get((p.replica, p.site, p.keys_from, p.keys_before), plan.version))
        for p in plan.parts
    )
    return plan if parts == plan.parts else dataclasses.replace(plan, parts=parts)


def key_moves(previous: Plan, plan: Plan, replica: str) -> list[tuple[str, str, str, int, int, int]]:
    """The key ranges of ``replica`` whose site changes: ``(replica, source, target, epoch, from, before)``.

    Adjacent ranges moving between the same two sites in the same epoch are one.
    """
    old, new = previous.owners(replica), plan.owners(replica)
    cuts = sorted({k for lo, hi, *_ in (*old, *new) for k in (lo, hi)})
    moves: list[tuple[str, str, str, int, int, int]] = []
    for lo, hi in itertools.pairwise(cuts):
        source, epoch = next((site, e) for a, b, site, e in old if a <= lo < b)
        target = next(site for a, b, site, _ in new if a <= lo < b)
        if source == target:
            continue
        last = moves[-1] if moves else None
        if last is not None and last[1:4] == (source, target, epoch) and last[5] == lo:
            moves[-1] = (*last[:5], hi)
        else:
            moves.append((replica, source, target, epoch, lo, hi))
    return moves


def _owner(plan: Plan, replica: str, key: int) -> str | None:
    """The site that owns ``key`` of ``replica`` in ``plan`` (``None`` if the plan has no such replica)."""
    if plan.site_of_or_none(replica) is None:
        return None
    return next((site for lo, hi, site, _ in plan.owners(replica) if lo <= key < hi), None)


def _session_gap(app: App, operators: Collection[str]) -> float:
    """The largest gap of the session windows among ``operators`` (0 if none).

    A session belongs to the owner of its start, so the new owner, which
    subscribes when it gets the plan, must see the last record before the
    switch of every session open across it: the switch comes that much later.
    """
    specs = (app.operators[n].window for n in operators if n in app.operators)
    return max((s.gap or 0.0 for s in specs if s is not None and s.kind is WindowKind.SESSION), default=0.0)


def _periods(app: App, operators: Collection[str], *, downstream: bool) -> list[float]:
    """The periods of the windows among ``operators`` and, with ``downstream``, of those downstream of them.

    A window downstream of a move to or from the hub is computed on both
    sides of the switch while the hub runs the two queries of a handover;
    with T on its period too, none of its tumbling windows mixes records of
    both sides. Moves between spokes leave T off those periods: a hub window
    ending exactly at T would close on the new owner's records while the old
    owner's last ones may still be on their way.
    """
    return [spec.period for spec in concerned_windows(app, operators, downstream=downstream)]


def concerned_windows(app: App, operators: Collection[str], *, downstream: bool) -> list[WindowSpec]:
    """The windows among ``operators`` and, with ``downstream``, those downstream of them (by operator name)."""
    graph = app.graph()
    names = {n for n in operators if n in graph}
    for name in list(names) if downstream else ():
        names |= graph.descendants(name)
    specs = (graph.op(n).window for n in sorted(names))
    return [spec for spec in specs if spec is not None]


def hub_moves(plan: Plan) -> tuple[Handover, ...]:
    """The handovers of ``plan`` with the hub at one end."""
    return tuple(h for h in plan.handovers if plan.hub in (h.source, h.target))


def before_placement(plan: Plan) -> tuple[Plan, float] | None:
    """The placement the hub ran before the latest switch of ``plan``'s moves to or from the hub and joins, and that switch.

    The replicas that move at that switch sit at their old owners, and the
    replicas of the sites that join at it are left out (with their flows and
    key parts); the rest is ``plan``'s (without handovers and joins). ``None``
    if nothing moves to or from the hub and no site joins. A plan that lists
    moves or joins of several switch times (a replica moved again before an
    earlier handover was dropped) splits at the latest.
    """
    moves = hub_moves(plan)
    switches = [h.switch_at for h in moves] + [j.switch_at for j in plan.joins]
    if not switches:
        return None
    at = max(switches)
    back = {h.replica: h.source for h in moves if h.switch_at == at}
    joined = {j.site for j in plan.joins if j.switch_at == at}
    gone = {a.replica for a in plan.assignments if a.group in joined}
    assignments = tuple(
        dataclasses.replace(a, site=back[a.replica]) if a.replica in back else a
        for a in plan.assignments
        if a.replica not in gone
    )
    flows = tuple(f for f in plan.flows if f.src not in gone and f.dst not in gone)
    parts = tuple(p for p in plan.parts if p.replica not in gone)
    return dataclasses.replace(plan, assignments=assignments, flows=flows, parts=parts, handovers=(), joins=()), at
