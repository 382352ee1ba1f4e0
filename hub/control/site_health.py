"""The analyse step for sites: a spoke over its CPU budget for a sustained time, or silent past a grace period.

Heartbeats carry the agent's CPU use (``cpu_percent``: 100 is one core) and,
when its gateway gives SpanEdge less than ``sites.yaml`` declares, the budget
it has now (``cpu_budget``, cores). :class:`SiteHealth` turns them into
*capacity caps* that every plan is made with (:func:`capped_sites`), and into
:class:`SiteChange` events that tell the coordinator which apps to re-plan:

* **Overload.** A spoke whose CPU use exceeds its budget in every heartbeat
  for at least ``overload_for_s`` seconds and ``overload_beats`` heartbeats
  in a row (one heartbeat within budget starts the count again, so one noisy
  sample never moves anything) is capped at what it can carry: its budget
  times the planned load of the replicas it runs over the cores it measured
  for them. A re-plan with that capacity moves its movable replicas to other
  sites; over-budget heartbeats in the ``overload_for_s`` after that do not
  count (the old owner is finishing its windows). The cap is lifted once the site would carry its old load again
  within ``release`` of its budget (its CPU use now plus the measured cost of
  the load it gave away) for ``recover_for_s`` seconds in a row; the re-plan
  that follows may move replicas back, as the migration cost and hysteresis
  of the placement decide.
* **Gone.** A spoke heard from once and silent for longer than
  ``site_grace_s`` is capped at zero cores: nothing but its own sources is
  placed there, so what it ran moves elsewhere. When it is heard from again
  it rejoins with its capacity back.
* **Joined.** A spoke added with ``spanedge site add`` is planned nowhere until
  its agent's first heartbeat (:meth:`hub.control.coordinator.Coordinator.await_join`);
  then the apps that read its streams are re-planned, to take its data in.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from spanedge.app import App
from spanedge.plan import Plan, split_replica
from spanedge.sites import Site, Sites, Tier
from spanedge.wire.heartbeat import Heartbeat
from spanedge.wire.heartbeat import decode as decode_heartbeat

log = logging.getLogger(__name__)

#: Default seconds a spoke must stay over its CPU budget before its replicas move.
DEFAULT_OVERLOAD_FOR_S = 30.0
#: Default seconds a capped spoke must stay able to carry its old load before the cap is lifted.
DEFAULT_RECOVER_FOR_S = 60.0
#: Default seconds of silence after which a spoke counts as gone.
DEFAULT_SITE_GRACE_S = 180.0


@dataclass(frozen=True)
class HealthPolicy:
    """When a site counts as overloaded, recovered or gone.

    Attributes:
        overload_for_s: seconds of heartbeats all over budget before a site is capped.
        overload_beats: heartbeats in a row over budget before a site is capped.
        recover_for_s: seconds a capped site must stay able to carry its old load before the cap is lifted.
        release: fraction of the budget the old load must fit in to lift the cap (hysteresis).
        site_grace_s: seconds of silence after which a spoke counts as gone.
    """

    overload_for_s: float = DEFAULT_OVERLOAD_FOR_S
    overload_beats: int = 3
    recover_for_s: float = DEFAULT_RECOVER_FOR_S
    release: float = 0.8
    site_grace_s: float = DEFAULT_SITE_GRACE_S

    def __post_init__(self) -> None:
        """Reject settings that would never or always fire."""
        for name in ("overload_for_s", "recover_for_s", "site_grace_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                msg = f"{name} must be a finite number of seconds >= 0, got {value}"
                raise ValueError(msg)
        if self.overload_beats < 1:
            msg = f"overload_beats must be at least 1, got {self.overload_beats}"
            raise ValueError(msg)
        if not 0 < self.release <= 1:
            msg = f"release must be in (0, 1], got {self.release}"
            raise ValueError(msg)


@dataclass(frozen=True)
class SiteChange:
    """A site whose capacity changed: the apps to re-plan and why.

    Attributes:
        site: the site.
        reason: the re-plan's reason, for the plan history and the log.
        everywhere: re-plan every app (capacity came back), not only those running at ``site``.
        streams: re-plan the apps that read one of these streams too (the site joined and sources them).
    """

    site: str
    reason: str
    everywhere: bool = False
    streams: frozenset[str] = frozenset()


@dataclass
class _Run:
    """Heartbeats in a row on one side of the budget."""

    since: float
    beats: int = 0
    used: float = 0.0  # sum of the cores measured
    budget: float = 0.0  # the last budget

    @property
    def mean(self) -> float:
        return self.used / self.beats if self.beats else 0.0


@dataclass
class _Cap:
    """The capacity a site is planned with while overloaded: ``cores``, and its measured cost per planned core."""

    cores: float
    per_core: float  # measured cores per planned core when capped
    planned: float  # planned load at the site when capped


@dataclass
class _Site:
    declared: float
    last_seen: float | None = None
    over: _Run | None = None
    fits_since: float | None = None  # since when a capped site would carry its old load within its budget
    used: float = 0.0
    budget: float = 0.0
    cap: _Cap | None = None
    gone_since: float | None = None  # last heartbeat before it was declared gone
    back_since: float | None = None  # its first heartbeat after that
    settle_until: float = 0.0  # over-budget heartbeats before this (the moves of a new cap settling) do not count
    idle_logged: bool = False
    revoked: str | None = None  # the re-plan reason of a revocation, until a review takes it; "" after
    joined: SiteChange | None = None  # the re-plan of its first heartbeat after it was added, until a review takes it


@dataclass
class SiteHealth:
    """Overload and absence of the spokes, from their heartbeats; capacity caps for planning.

    Not thread-safe: the coordinator calls it under its lock.

    Attributes:
        sites: the declared sites.
        policy: the thresholds.
    """

    sites: Sites
    policy: HealthPolicy = field(default_factory=HealthPolicy)
    _state: dict[str, _Site] = field(init=False)

    def __post_init__(self) -> None:
        """Track every spoke."""
        self._state = {s.name: _Site(declared=s.cpu) for s in self.sites.sites.values() if s.tier is Tier.SPOKE}

    # -- the fleet -----------------------------------------------------------------------------

    def add_spoke(self, site: Site) -> None:
        """Track a spoke added since (``spanedge site add``)."""
        if site.tier is Tier.SPOKE:
            self._state.setdefault(site.name, _Site(declared=site.cpu))

    def revoke(self, name: str, now: float) -> None:
        """Count spoke ``name`` gone for good from ``now`` (``spanedge site revoke``): the next review re-plans without it."""
        state = self._state.get(name)
        if state is None or state.revoked is not None:
            return
        state.gone_since = state.last_seen if state.last_seen is not None else now
        state.back_since, state.over, state.cap, state.fits_since = None, None, None, None
        state.revoked = f"site {name} revoked: re-planned without it"

    def join(self, name: str, streams: Iterable[str]) -> None:
        """Note the first heartbeat of spoke ``name``, added since: the next review re-plans the apps reading ``streams``."""
        state = self._state.get(name)
        if state is None or state.revoked is not None:
            return
        state.joined = SiteChange(name, f"site {name} joined", streams=frozenset(streams))

    # -- monitor -------------------------------------------------------------------------------

    def observe(self, site: str, beat: Heartbeat | Mapping[str, Any], now: float) -> None:
        """Take one heartbeat of ``site`` (already accepted by the registry) received at ``now``."""
        state = self._state.get(site)
        if state is None or state.revoked is not None:
            return
        if not isinstance(beat, Heartbeat):
            beat = decode_heartbeat(beat)[0]
        state.last_seen = now
        if state.gone_since is not None and state.back_since is None:
            state.back_since = now
        used, budget = beat.cpu_percent, beat.cpu_budget
        if used is None:
            return
        cores, state.budget = used / 100.0, budget if budget is not None and budget > 0 else state.declared
        state.used = cores
        if cores <= state.budget:
            state.over = None
        elif now >= state.settle_until:
            state.over = state.over or _Run(now)
            _add(state.over, cores, state.budget)

    # -- analyse -------------------------------------------------------------------------------

    def review(self, now: float, planned: Mapping[str, float]) -> list[SiteChange]:
        """The sites whose capacity changes now; ``planned`` is the load (cores) the plans in force put at each site."""
        changes = []
        for name, state in self._state.items():
            change = (
                _joined(state)
                or self._absence(name, state, now)
                or self._load(name, state, now, planned.get(name, 0.0))
            )
            if change is not None:
                log.info("%s", change.reason)
                changes.append(change)
        return changes

    def _absence(self, name: str, state: _Site, now: float) -> SiteChange | None:
        if state.revoked is not None:
            reason, state.revoked = state.revoked, ""
            return SiteChange(name, reason) if reason else None
        if state.last_seen is None:
            return None
        if state.gone_since is not None:
            if state.back_since is not None:
                silent = state.back_since - state.gone_since
                state.gone_since = state.back_since = None
                reason = f"site {name} heard from again after {_span(silent)} silent: it rejoins"
                return SiteChange(name, reason, everywhere=True)
            return None
        silent = now - state.last_seen
        if silent > self.policy.site_grace_s:
            state.gone_since, state.over, state.fits_since = state.last_seen, None, None
            grace = _span(self.policy.site_grace_s)
            return SiteChange(name, f"site {name} silent for {_span(silent)} (grace {grace}): re-planned without it")
        return None

    def _load(self, name: str, state: _Site, now: float, planned: float) -> SiteChange | None:
        over, policy = state.over, self.policy
        if over is not None and over.beats >= policy.overload_beats and now - over.since >= policy.overload_for_s:
            if planned <= 0:
                if not state.idle_logged:
                    log.info("site %s is over its CPU budget but runs nothing the plans put there", name)
                    state.idle_logged = True
                return None
            per_core = over.mean / planned
            cores = over.budget / per_core
            if state.cap is not None and cores >= state.cap.cores:
                return None  # the plans already honour a lower cap
            state.cap, state.over, state.idle_logged = _Cap(cores, per_core, planned), None, False
            state.settle_until = now + policy.overload_for_s
            reason = (
                f"site {name} over its CPU budget: {_pct(over.mean)} of {_pct(over.budget)} for "
                f"{_span(now - over.since)}; planned with {cores:.3g} of {state.declared:.3g} cores"
            )
            return SiteChange(name, reason)
        cap = state.cap
        if cap is None:
            return None
        back = state.used + cap.per_core * max(0.0, cap.planned - planned)
        if over is not None or back > policy.release * state.budget:
            state.fits_since = None
            return None
        state.fits_since = now if state.fits_since is None else state.fits_since
        if now - state.fits_since < policy.recover_for_s:
            return None
        reason = (
            f"site {name} back within its CPU budget for {_span(now - state.fits_since)} "
            f"({_pct(state.used)} of {_pct(state.budget)}, {_pct(back)} with its old load): capacity restored"
        )
        state.cap, state.fits_since = None, None
        return SiteChange(name, reason, everywhere=True)

    # -- plan ----------------------------------------------------------------------------------

    def gone(self, site: str) -> bool:
        """True while ``site`` counts as gone (silent past the grace period, not heard from since)."""
        state = self._state.get(site)
        return state is not None and state.gone_since is not None

    def silent_for(self, site: str, now: float) -> float:
        """Seconds since the last heartbeat of ``site`` if it counts as gone, else 0."""
        state = self._state.get(site)
        return 0.0 if state is None or state.gone_since is None else max(0.0, now - state.gone_since)

    def capacities(self) -> dict[str, float]:
        """The cores each capped site is planned with: 0 for a gone site, what it can carry for an overloaded one."""
        caps = {}
        for name, state in self._state.items():
            if state.gone_since is not None:
                caps[name] = 0.0
            elif state.cap is not None:
                caps[name] = min(state.cap.cores, state.declared)
        return caps


def _joined(state: _Site) -> SiteChange | None:
    """The change of a spoke's first heartbeat after it was added, once."""
    change, state.joined = state.joined, None
    return change


def capped_sites(sites: Sites, caps: Mapping[str, float]) -> Sites:
    """``sites`` with the CPU of each site in ``caps`` replaced by its cap (the sites are not changed)."""
    if not caps:
        return sites
    updated = {
        name: msgspec.structs.replace(site, cpu=caps[name]) if name in caps else site
        for name, site in sites.sites.items()
    }
    return msgspec.structs.replace(sites, sites=updated)


def planned_load(plans: Iterable[tuple[Plan, App]]) -> dict[str, float]:
    """The cores the plans put at each site: every replica's cost per record times its planned input rate.

    The same estimate the placement uses (an operator's ``cost`` times the
    records/s of the flows into its replica).
    """
    load: dict[str, float] = {}
    for plan, app in plans:
        _add_plan_load(plan, app, load)
    return load


def _add_plan_load(plan: Plan, app: App, load: dict[str, float]) -> None:
    """Add the cores ``plan`` puts at each site to ``load``.

    A part of a replica split by key uses its keys' share of the window and
    runs the record-level replicas of its chain (:meth:`Plan.part_chain`) too.
    """
    rates: dict[str, float] = {}
    for flow in plan.flows:
        rates[flow.dst] = rates.get(flow.dst, 0.0) + flow.rate

    def cost(replica: str) -> float:
        op = app.operators.get(split_replica(replica)[0])
        return op.cost * rates.get(replica, 0.0) if op is not None else 0.0

    kept = {p.replica: 1.0 for p in plan.parts}
    for p in plan.parts:
        share = p.load_share
        kept[p.replica] -= share
        before, after = plan.part_chain(p.replica)
        load[p.site] = load.get(p.site, 0.0) + share * cost(p.replica) + sum(cost(r) for r in (*before, *after))
    for a in plan.assignments:
        load[a.site] = load.get(a.site, 0.0) + kept.get(a.replica, 1.0) * cost(a.replica)


def with_capacity(plan: Plan, site: str) -> bool:
    """True if ``plan`` runs a replica (or a part of one) at ``site`` or hands one over from it."""
    return (
        any(a.site == site for a in plan.assignments)
        or any(h.source == site for h in plan.handovers)
        or any(p.site == site for p in plan.parts)
    )


def _add(run: _Run, cores: float, budget: float) -> None:
    run.beats += 1
    run.used += cores
    run.budget = budget


def _pct(cores: float) -> str:
    """Cores as a CPU percentage (100% is one core), to three significant digits: ``180%``, ``1.25%``."""
    return f"{cores * 100:.3g}%"


def _span(seconds: float) -> str:
    """``45 s``, ``3 min`` or ``2 min 30 s``."""
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    minutes, rest = divmod(s, 60)
    return f"{minutes} min" + (f" {rest} s" if rest else "")


__all__ = [
    "HealthPolicy",
    "SiteChange",
    "SiteHealth",
    "capped_sites",
    "planned_load",
    "with_capacity",
]
