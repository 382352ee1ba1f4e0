"""The coordinator: deploys, re-plans and removes apps.

It places apps with the measurements of the :class:`hub.control.registry.SiteRegistry`
(:mod:`hub.control.planning`), persists them, distributes their plans and hands them
to the Spark engine; it re-plans an app when a latency or a rate it was
planned with drifts beyond a relative threshold, at most once per minimum
interval (:mod:`hub.control.drift`), and when a spoke it runs at stays over its CPU
budget or falls silent past a grace period (:mod:`hub.control.site_health`), and keeps
the history of plan versions with the reason for each (:mod:`hub.control.plan_history`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

import orjson

from hub.control import plan_history
from hub.control.distribution import PlanDistributor, SiteApp, sites_of
from hub.control.drift import DriftPolicy, SilenceWatch
from hub.control.planning import Planner, basis, carry_ownership, default_planner, load_app, plan_app
from hub.control.registry import SiteRegistry
from hub.control.site_health import HealthPolicy, SiteHealth, capped_sites, planned_load, with_capacity
from hub.control.site_returns import SiteReturns, awaited
from hub.control.state import AppRecord, StateStore
from hub.handover.frontiers import SiteFrontiers, window_grid
from hub.handover.holds import DEFAULT_LIMIT_S, HandoverHolds, Mark
from hub.handover.settling import SettleWatch
from hub.handover.switches import DEFAULT_DELAY_S, DEFAULT_KEEP_S, postpone, stamp_handovers
from hub.ingest.seal_points import Closings, closing_points
from spanedge.app import App
from spanedge.errors import SpanEdgeError
from spanedge.plan import Plan
from spanedge.sites import Sites

HOLD_GONE_S = 60.0
"""Seconds past the grace period a gone site's frontier holds the hub's windows at most, awaiting the re-plan."""

log = logging.getLogger(__name__)


class Engine(Protocol):
    """The part of the Spark engine the coordinator drives."""

    def deploy(self, app: App, plan: Plan) -> Any:
        """Start or replace the hub query of ``app``."""
        ...

    def undeploy(self, name: str) -> Any:
        """Stop the hub query of app ``name``."""
        ...

    def unsettled(self, name: str, proposed: Plan | None = None) -> list[str]:
        """The hub queries of app ``name`` still writing a handover's share that ``proposed`` would stop, for people."""
        ...


class Coordinator:
    """Deploys, re-plans and removes apps; the REST API's backend.

    Deploying an app loads its source, places it with the current latency
    matrix and rates, starts its hub part on the engine (which also validates
    it), persists it and publishes the plan to the affected sites. All of that
    happens under one lock, so concurrent deploys and re-plans never interleave.

    Planning (:mod:`hub.control.planning`), drift (:mod:`hub.control.drift`), the plan history
    (:mod:`hub.control.plan_history`), distribution and storage live elsewhere; what stays
    here are the decisions that read and write the app records under that one lock.
    """

    def __init__(
        self,
        registry: SiteRegistry,
        *,
        planner: Planner = default_planner,
        distributor: PlanDistributor | None = None,
        engine: Engine | None = None,
        store: StateStore | None = None,
        drift_threshold: float = 0.5,
        min_replan_interval_s: float = 60.0,
        latency_floor_ms: float = 5.0,
        rate_floor: float = 1.0,
        handover_delay_s: float = DEFAULT_DELAY_S,
        handover_wait_s: float = DEFAULT_LIMIT_S,
        health: HealthPolicy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Wire the coordinator.

        Args:
            registry: live site state.
            planner: places an app (tests pass a fake).
            distributor: publishes plans to the sites (None: not distributed).
            engine: runs hub-placed operators (None: control plane only).
            store: persists deployed apps (None: in memory only).
            drift_threshold: relative change of a latency or rate that triggers a re-plan.
            min_replan_interval_s: an app is re-planned at most this often.
            latency_floor_ms: changes are relative to at least this latency, so 1→2 ms is no drift.
            rate_floor: changes are relative to at least this many records/s.
            handover_delay_s: event-time seconds from a re-plan to the switch of the replicas
                it moves between sites (at least the plan distribution delay; see :mod:`hub.handover.switches`).
            handover_wait_s: how long after a switch the hub's windows wait at most for a live
                old owner's last records (:mod:`hub.handover.holds`).
            health: when a spoke counts as over its CPU budget, recovered or gone (:mod:`hub.control.site_health`).
            clock: the time source (seconds; also the event-time clock of handovers).
        """
        self.registry = registry
        self.planner = planner
        self.distributor = distributor
        self.engine = engine
        self.store = store
        self.drift_policy = DriftPolicy(drift_threshold, min_replan_interval_s, latency_floor_ms, rate_floor)
        self._clock = clock
        self.handover_delay_s = handover_delay_s
        self._lock = threading.RLock()
        self._records: dict[str, AppRecord] = {}
        self._apps: dict[str, App] = {}
        self._attempts: dict[str, float] = {}
        self.health = SiteHealth(registry.sites, health or HealthPolicy())
        self._health_lock = threading.Lock()  # heartbeats never wait for a deploy holding the main lock
        self._pending: dict[str, list[str]] = {}  # site changes waiting to re-plan an app, per app
        # a gone site is re-planned around: it no longer holds the other sites' re-plans back
        self._silence = SilenceWatch(lambda site: self.registry.silent(site) and not self.gone(site))
        # a replica moved again before its last handover is over would lose the old side's part
        self._settle = SettleWatch(clock, handover_delay_s, self._hub_unsettled)
        self._forced: set[str] = set()  # apps with a site gone for good among their pending changes
        self.holds = HandoverHolds(handover_wait_s, clock=clock)  # hub windows waiting for an old owner's last records
        self.frontiers = SiteFrontiers()  # hub windows waiting for the slowest live site
        self._grids: dict[str, tuple[int, float, Closings]] = {}  # per app and plan version: its hub windows' ends
        self.returns = SiteReturns()  # sites gone for good whose return would finish their results

    # -- lifecycle -----------------------------------------------------------------------------

    def resume(self) -> list[str]:
        """Load the persisted apps, republish their plans and restart their hub parts.

        Returns:
            The names of the resumed apps. An app whose source no longer loads
            is skipped with a logged reason.
        """
        if self.store is None:
            return []
        with self._lock:
            for record, app in _loadable(self.store.load_apps()):
                self._records[record.name] = record
                self._apps[record.name] = app
            self.returns.expect(awaited(self._records.values()))
            sites = set().union(*(sites_of(r.plan) for r in self._records.values()))
            self._distribute(sites)
            if self.engine is not None:
                for name, record in self._records.items():
                    try:
                        self.engine.deploy(self._apps[name], record.plan)
                    except Exception:
                        log.exception("cannot restart the hub part of app %r; redeploy it", name)
            names = sorted(self._records)
        if names:
            log.info("resumed apps: %s", ", ".join(names))
        return names

    # -- deploy / delete -----------------------------------------------------------------------

    def _plan(self, app: App, owners: Plan | None, **options: Any) -> Plan:
        """Plan the next version of ``app``, stamp who owns each replica since when and hand over what moves.

        ``owners`` is the plan in force (None: a first deploy).
        """
        version = owners.version + 1 if owners is not None else 1
        with self._health_lock:
            caps = self.health.capacities()
        planner = self.planner
        if caps:

            def planner(app: App, sites: Sites, **kwargs: Any) -> Plan:
                return self.planner(app, capped_sites(sites, caps), **kwargs)

        plan = carry_ownership(plan_app(planner, self.registry, app, version, **options), owners)
        return stamp_handovers(plan, owners, app, self._clock(), delay=self.handover_delay_s)

    def deploy(
        self,
        source: str,
        filename: str = "app.py",
        *,
        app_name: str | None = None,
        slo_ms: float | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> tuple[AppRecord, dict[str, str]]:
        """Deploy (or redeploy) the app defined by ``source``.

        Returns:
            The app's record and the distribution status per site.

        Raises:
            InvalidDataflow, InvalidSites, InfeasiblePlacement: the app cannot be
                deployed; the message is the one the CLI prints.
        """
        started = time.perf_counter()
        app = load_app(source, filename, app_name)
        with self._lock:
            old = self._records.get(app.name)
            owners = old.plan if old is not None else None
            plan = self._plan(app, owners, source=source, filename=filename, slo_ms=slo_ms, weights=weights)
            reason = plan_history.deploy_reason(old, source)
            state = self.registry.state_bytes(app.name, owners) if owners is not None else None
            entry = plan_history.history_entry(plan, self._clock(), reason, owners, state)
            request: dict[str, Any] = {"source": source, "filename": filename, "app_name": app_name, "slo_ms": slo_ms}
            request["weights"] = dict(weights) if weights else None
            record = plan_history.deployed_record(app, plan, old, entry, basis(self.registry, app), **request)
            status = self._install(app, record, owners, changed=True)
        log.info(
            "app %r %s: plan v%d (%.0f ms)", app.name, reason, plan.version, 1000 * (time.perf_counter() - started)
        )
        return record, status

    def delete(self, name: str) -> dict[str, str]:
        """Remove app ``name`` from the engine, the store and the sites' plans.

        Raises:
            KeyError: no app of that name is deployed.
        """
        with self._lock:
            record = self._records.pop(name)
            self._apps.pop(name, None)
            self._attempts.pop(name, None)
            self._pending.pop(name, None)
            if self.engine is not None:
                self.engine.undeploy(name)
            if self.store is not None:
                self.store.delete_app(name)
            status = self._distribute(sites_of(record.plan))
        log.info("app %r deleted", name)
        return status

    def _install(self, app: App, record: AppRecord, replaced: Plan | None, *, changed: bool) -> dict[str, str]:
        """Make ``record`` the app's own; if its plan ``changed``, run it on the engine and publish it.

        The engine goes first, so an app it rejects is neither persisted nor sent to the sites.
        ``replaced`` is the plan ``record``'s plan replaced (None: a first deploy, or no change).
        """
        if changed and self.engine is not None:
            self.engine.deploy(app, record.plan)
            record = self._in_time(app, record, replaced)
        if changed and replaced is not None:
            record = self._at_risk(record)
        prior = self._records.get(app.name)
        # no new version (or a first deploy): the plan in force still replaced the one it did
        kept = replaced if replaced is not None else prior.replaced if prior is not None else None
        record = dataclasses.replace(record, replaced=kept)
        self._records[app.name] = record
        self._apps[app.name] = app
        if self.store is not None:
            self.store.save_app(record)
        if not changed:
            return {}
        return self._distribute(sites_of(record.plan) | (sites_of(replaced) if replaced is not None else set()))

    def _in_time(self, app: App, record: AppRecord, replaced: Plan | None) -> AppRecord:
        """``record`` with its switch postponed if deploying it on the engine took it too close (see ``postpone``).

        The engine then gets the new switch too: it only changes the shares the hub's queries write.
        """
        plan = postpone(record.plan, replaced, app, self._clock(), delay=self.handover_delay_s)
        if plan is record.plan or replaced is None or self.engine is None:
            return record
        was = min(h.switch_at for h in record.plan.handovers if h not in plan.handovers)
        now = min(h.switch_at for h in plan.handovers if h not in record.plan.handovers)
        log.warning(
            "app %r: deploying plan v%d on the engine took until %.1f s before its switch; the switch moves %.0f s "
            "later, so the sites get the plan in time",
            app.name,
            plan.version,
            was - self._clock(),
            now - was,
        )
        self.engine.deploy(app, plan)
        entry = dataclasses.replace(record.history[-1], moved=plan_history.moves(replaced, plan))
        return dataclasses.replace(record, plan=plan, history=[*record.history[:-1], entry])

    def _at_risk(self, record: AppRecord) -> AppRecord:
        """``record`` with the results its latest moves from sites gone for good may have lost, each logged.

        Where the replica's source site can recompute them from its spool, the
        plan's handover names it (``recoverer``, :mod:`edge_agent.recovery`).
        """
        entry = record.history[-1]
        plan = record.plan
        moved = plan_history.at_risk(
            entry.moved,
            self.gone,
            lambda site: self.frontiers.delivered(record.name, site),
            DEFAULT_KEEP_S,
            lambda move: self._recoverer(plan, move),
        )
        if moved == entry.moved:
            return record
        lost: dict[tuple[str, float | None, float, float], list[str]] = {}
        recovered: dict[tuple[str, float, float, str], list[str]] = {}
        for m in moved:
            if "recover_by" in m:
                lost.setdefault((m["from"], m.get("at_risk_from"), m["switch_at"], m["recover_by"]), []).append(
                    m["replica"]
                )
            elif "recovered_by" in m:
                recovered.setdefault((m["from"], m["at_risk_from"], m["switch_at"], m["recovered_by"]), []).append(
                    m["replica"]
                )
        for (site, since, switch, recover_by), replicas in lost.items():
            log.warning(
                "app %r: %s is gone: the results of %s %s up to the switch at %s are lost unless %s's agent comes "
                "back with its state directory by %s (its checkpoint and persistent session then finish them; the hub's "
                "windows that closed before it is back stay without them)",
                record.name,
                site,
                ", ".join(replicas),
                f"from {_utc(since)} (all before were delivered)" if since is not None else "not yet received",
                _utc(switch),
                site,
                _utc(recover_by),
            )
        for (site, since, switch, by), replicas in recovered.items():
            log.warning(
                "app %r: %s is gone: %s recomputes its results of %s from %s (all before were delivered) up to the "
                "switch at %s from the sensor messages it spooled; the hub's windows wait for them",
                record.name,
                site,
                by,
                ", ".join(replicas),
                _utc(since),
                _utc(switch),
            )
        self.returns.expect(m["from"] for m in moved if "recover_by" in m)
        fixed = {
            (m["replica"], m["from"], m["switch_at"]): (m["at_risk_from"], m["recovered_by"])
            for m in moved
            if "recovered_by" in m
        }
        plan = _with_recoveries(plan, fixed)
        return dataclasses.replace(
            record, plan=plan, history=[*record.history[:-1], dataclasses.replace(entry, moved=moved)]
        )

    def _recover_carried(self, record: AppRecord, before: Plan, *, new_version: bool) -> AppRecord:
        """``record`` with the handovers already under way from a site gone for good recovered where they can be.

        An old owner that died finishing its part of an earlier handover owes
        that part: unless the hub has it all, the replica's source site
        recomputes it like the part of a move the re-plan makes
        (:meth:`_at_risk`). Only handovers ``before`` (the plan replaced) listed
        count: the re-plan's own moves are :meth:`_at_risk`'s. The move in the history entry that made the
        handover gains ``at_risk_from`` and ``recovered_by``. With
        ``new_version`` (the placement did not change), the recovery alone
        makes a new plan version.
        """
        plan = record.plan
        fixed: dict[tuple[str, str, float], tuple[float, str]] = {}
        carried = {(h.replica, h.source, h.switch_at) for h in before.handovers}
        for h in plan.handovers:
            if h.recoverer is not None or h.keyed or h.source == plan.hub or not self.gone(h.source):
                continue
            if (h.replica, h.source, h.switch_at) not in carried:
                continue
            if self.holds.delivered(plan.app, h):
                continue
            since = self.frontiers.delivered(record.name, h.source)
            by = self._recoverer(plan, {"replica": h.replica, "from": h.source})
            if since is not None and by is not None:
                fixed[(h.replica, h.source, h.switch_at)] = (since, by)
        if not fixed:
            return record
        history = [
            dataclasses.replace(
                e,
                moved=[
                    {**m, "at_risk_from": fix[0], "recovered_by": fix[1]}
                    if (fix := fixed.get((m["replica"], m["from"], m.get("switch_at", math.nan)))) is not None
                    else m
                    for m in e.moved
                ],
            )
            for e in record.history
        ]
        parts: dict[tuple[str, str, float], list[str]] = {}
        for (replica, source, _switch), (since, by) in fixed.items():
            parts.setdefault((source, by, since), []).append(replica)
        for (source, by, since), replicas in parts.items():
            log.warning(
                "app %r: %s is gone before it had delivered its part of a handover: %s recomputes its results of %s "
                "from %s (all before were delivered) from the sensor messages it spooled; the hub's windows wait for them",
                record.name,
                source,
                by,
                ", ".join(sorted(replicas)),
                _utc(since),
            )
        plan = _with_recoveries(plan, fixed)
        if new_version:
            plan = dataclasses.replace(plan, version=plan.version + 1)
            summary = "; ".join(
                f"{by} recomputes {source}'s part of {len(r)} replicas" for (source, by, _), r in parts.items()
            )
            last = history[-1]
            reason = last.reason.removesuffix("; placement unchanged")
            history[-1] = dataclasses.replace(last, version=plan.version, changed=True, reason=f"{reason}; {summary}")
        return dataclasses.replace(record, plan=plan, history=history)

    def _recoverer(self, plan: Plan, move: Mapping[str, Any]) -> str | None:
        """The site that recomputes ``move``'s part from a gone site: the replica's source site, if a live spoke."""
        if "keys" in move:
            return None  # a key range: its old owner keeps the other keys' windows; not recovered
        a = next((a for a in plan.assignments if a.replica == move["replica"]), None)
        group = a.group if a is not None else None
        if group is None or group in (move["from"], plan.hub) or self.gone(group):
            return None
        return group

    def _distribute(self, sites: Iterable[str]) -> dict[str, str]:
        if self.distributor is None:
            return {}
        apps = {name: SiteApp(r.plan, r.source) for name, r in self._records.items()}
        return self.distributor.publish(apps, sites)

    # -- queries -------------------------------------------------------------------------------

    @property
    def app_count(self) -> int:
        """How many apps are deployed; never waits for a deploy in progress."""
        return len(self._records)

    def records(self) -> list[AppRecord]:
        """Deployed apps, by name."""
        with self._lock:
            return [self._records[n] for n in sorted(self._records)]

    def record(self, name: str) -> AppRecord:
        """The record of app ``name``; raise ``KeyError`` if it is not deployed."""
        with self._lock:
            return self._records[name]

    def plans_of(self, name: str) -> tuple[Plan, ...]:
        """The plan in force of app ``name`` and the one it replaced (if any; kept across restarts); none if unknown.

        Never waits for a deploy or re-plan in progress: the ingest asks for every batch a site
        publishes for another site (:func:`hub.ingest.publishers.from_plans`), and sees the plans before
        or after the change.
        """
        record = self._records.get(name)
        if record is None:
            return ()
        return (record.plan,) if record.replaced is None else (record.plan, record.replaced)

    # -- monitor and analyse -------------------------------------------------------------------

    def heartbeat(self, site: str, payload: bytes | Mapping[str, Any]) -> bool:
        """Take a heartbeat that arrived on ``site``'s topic: the registry records it, the site analysis reads it.

        Returns:
            True if the registry accepted it (see :meth:`hub.control.registry.SiteRegistry.heartbeat`).
        """
        data: Any = payload
        if isinstance(payload, bytes | bytearray):
            try:
                data = orjson.loads(payload)
            except orjson.JSONDecodeError:
                data = payload  # the registry rejects it with the reason
        if not self.registry.heartbeat(site, data):
            return False
        now = self._clock()
        with self._health_lock:
            self.health.observe(site, data, now)
        self.returns.heard(site, now)
        self.holds.observe(site, data)
        self.frontiers.observe(site, data)
        return True

    def window_holds(self, mark_of: Callable[[str], Mark]) -> dict[str, float | None]:
        """Per app, the event time from which its hub windows wait, or None.

        They wait for an old owner's last records (``mark_of(app)`` gives the
        last ``seq`` the app's log holds of a (site, stream, epoch), see
        :mod:`hub.handover.holds`) and for the slowest live site
        (:mod:`hub.handover.frontiers`), whichever is earlier.
        """
        holds: dict[str, float | None] = {}
        for r in self.records():
            starts = (
                self.holds.hold_from(r.plan, mark_of(r.name), partial(self._let_go, r.plan)),
                self.frontiers.hold_from(r.name, partial(self._let_go, r.plan)),
            )
            holds[r.name] = min((s for s in starts if s is not None), default=None)
        self._note_handed_over()
        return holds

    def _let_go(self, plan: Plan, site: str) -> bool:
        """Whether the hub's windows of ``plan`` stop waiting for gone ``site``'s frontier.

        A gone site that still runs another site's replicas in the plan in force,
        or owes its part of a handover, holds them until the re-plan around it
        hands those to their source site to recompute (:mod:`edge_agent.recovery`),
        which the handover holds then wait for; at most :data:`HOLD_GONE_S` past
        the grace period.
        """
        if not self.gone(site):
            return False
        guests = any(a.site == site and a.group not in (None, site) for a in plan.assignments)
        owes = any(
            h.source == site and h.recoverer is None and not self.holds.delivered(plan.app, h) for h in plan.handovers
        )
        if not guests and not owes:
            return True
        with self._health_lock:
            silent = self.health.silent_for(site, self._clock())
        return silent > self.health.policy.site_grace_s + HOLD_GONE_S

    def window_grid(self, name: str) -> float:
        """The grid the ends of app ``name``'s hub windows lie on (0: unknown app, or no window at the hub)."""
        return self._window_ends(name)[0]

    def window_closings(self, name: str) -> Closings:
        """Where app ``name``'s hub windows can close (:mod:`hub.ingest.seal_points`; none for an unknown app)."""
        return self._window_ends(name)[1]

    def _window_ends(self, name: str) -> tuple[float, Closings]:
        with self._lock:
            record, app = self._records.get(name), self._apps.get(name)
        if record is None or app is None:
            return 0.0, Closings()
        cached = self._grids.get(name)
        if cached is None or cached[0] != record.plan.version:
            cached = (record.plan.version, window_grid(app, record.plan), closing_points(app, record.plan))
            self._grids[name] = cached
        return cached[1], cached[2]

    def _note_handed_over(self) -> None:
        """Mark in each app's history the moves whose old owner has now delivered its part (the handover time)."""
        done = self.holds.take_delivered()
        if not done:
            return
        with self._lock:
            for app, replica, site, at in done:
                old = self._records.get(app)
                record = plan_history.handed_over(old, replica, site, at) if old is not None else None
                if record is None:
                    continue
                self._records[app] = record
                if self.store is not None:
                    self.store.save_app(record)
                log.info("app %r: %s handed over: the hub has its old owner %s's part", app, replica, site)

    def _note_back(self, site: str, at: float) -> None:
        """Mark in each app's history the moves away from ``site``, gone for good, as back at ``at``; log each app's."""
        for name, record in list(self._records.items()):
            record, marked = plan_history.back(record, site, at)
            if not marked:
                continue
            self._records[name] = record
            if self.store is not None:
                self.store.save_app(record)
            for recover_by in sorted({m["recover_by"] for m in marked}):
                replicas = ", ".join(m["replica"] for m in marked if m["recover_by"] == recover_by)
                outcome = (
                    "by %s: its checkpoint and persistent session finish the results of %s up to their switch; the "
                    "hub's windows that closed while it was gone stay without them"
                    if at <= recover_by
                    else "after %s: the results of %s up to their switch stay lost"
                )
                log.warning("app %r: %s is back at %s, " + outcome, name, site, _utc(at), _utc(recover_by), replicas)

    def gone(self, site: str) -> bool:
        """True while ``site`` counts as gone: silent for longer than the grace period."""
        with self._health_lock:
            return self.health.gone(site)

    def _hub_unsettled(self, name: str, proposed: Plan) -> list[str]:
        """The engine's queries of app ``name`` still writing a handover share ``proposed`` would stop (none without one)."""
        return self.engine.unsettled(name, proposed) if self.engine is not None else []

    def check(self) -> list[str]:
        """One round of the analyse step: sites over budget, gone or back, then drift.

        Returns:
            The names of the apps re-planned.
        """
        replanned = self.check_sites()
        return replanned + [n for n in self.check_drift() if n not in replanned]

    def check_sites(self) -> list[str]:
        """Re-plan the apps a site change concerns: a site over its CPU budget, gone, back or within budget again.

        A change waits, like a drift re-plan, while another spoke of the app is
        silent (not yet gone), and is retried at the next check.

        Returns:
            The names of the apps re-planned.
        """
        with self._lock:
            running = [(r.plan, self._apps[r.name]) for r in self._records.values()]
            with self._health_lock:
                changes = self.health.review(self._clock(), planned_load(running))
            for site, at in sorted(self.returns.take().items()):
                self._note_back(site, at)
            for change in changes:
                for record in self._records.values():
                    if change.everywhere or with_capacity(record.plan, change.site):
                        self._pending.setdefault(record.name, []).append(change.reason)
                        if not change.everywhere and self.gone(change.site):
                            self._forced.add(record.name)
            pending = {name: reasons for name, reasons in self._pending.items() if name in self._records}
        replanned = []
        for name, reasons in sorted(pending.items()):
            with self._lock:
                current = self._records.get(name)
                if current is None or self._silence.waits(name, current.plan):
                    continue
                forced = name in self._forced
            outcome: AppRecord | None
            try:
                outcome = self.replan(name, "; ".join(dict.fromkeys(reasons)), forced=forced)
            except Exception:
                log.exception("re-planning app %r failed; it keeps its current plan", name)
                outcome = current
            if outcome is None:
                continue  # it would drop a handover that is not over: the changes stay pending
            with self._lock:
                self._pending.pop(name, None)
                self._forced.discard(name)
            if outcome is not current:
                replanned.append(name)
        return replanned

    # -- drift ---------------------------------------------------------------------------------

    def drift(self, name: str) -> list[str]:
        """What moved beyond the threshold since app ``name`` was last planned, for people."""
        with self._lock:
            record, app = self._records[name], self._apps[name]
        return self.drift_policy.reasons(record.basis, basis(self.registry, app))

    def check_drift(self) -> list[str]:
        """Re-plan every app whose inputs drifted and whose last plan is old enough.

        Returns:
            The names of the apps re-planned.
        """
        replanned = []
        for record in self.records():
            last = max(plan_history.last_planned(record), self._attempts.get(record.name, 0))
            if not self.drift_policy.due(last, self._clock()) or self._silence.waits(record.name, record.plan):
                continue
            reasons = self.drift(record.name)
            if reasons:
                try:
                    if self.replan(record.name, "; ".join(reasons)) is None:
                        continue  # it would drop a handover that is not over: tried again at the next check
                except Exception:
                    log.exception("re-planning app %r failed; it keeps its current plan", record.name)
                    continue
                replanned.append(record.name)
        return replanned

    def replan(self, name: str, reason: str, *, forced: bool = False) -> AppRecord | None:
        """Place app ``name`` again with the current measurements; publish if the placement changed.

        The history records every re-plan with its reason, the new totals and
        baselines, and the replicas that moved; only a changed placement becomes
        a new plan version. Unless ``forced`` (a site gone for good), a plan
        that would drop a handover that is not over yet is not made: ``None``
        (:mod:`hub.handover.settling`), and the attempt does not count against the
        re-plan interval.
        """
        started = time.perf_counter()
        with self._lock:
            last_attempt = self._attempts.get(name)
            self._attempts[name] = self._clock()
            old, app = self._records[name], self._apps[name]
            request = {"source": old.source, "filename": old.filename, "slo_ms": old.slo_ms, "weights": old.weights}
            state = self.registry.state_bytes(name, old.plan)  # the same sizes for the planner and the history
            spread = self.registry.key_spread(name, old.plan)
            plan = self._plan(app, old.plan, previous=old.plan, state_bytes=state, key_spread=spread, **request)
            if not forced and self._settle.blocks(name, old.plan, plan, app):
                if last_attempt is None:
                    del self._attempts[name]
                else:
                    self._attempts[name] = last_attempt
                return None
            record, changed = plan_history.replanned(old, plan, self._clock(), reason, basis(self.registry, app), state)
            if forced:
                recovering = self._recover_carried(record, old.plan, new_version=not changed)
                record, changed = recovering, changed or recovering is not record
            self._install(app, record, old.plan if changed else None, changed=changed)
        took = 1000 * (time.perf_counter() - started)
        log.info("app %r re-planned (%s): v%d (%.0f ms)", name, record.history[-1].reason, record.plan.version, took)
        return record


def _with_recoveries(plan: Plan, fixed: Mapping[tuple[str, str, float], tuple[float, str]]) -> Plan:
    """``plan`` with each whole-replica handover keyed ``(replica, old owner, switch)`` in ``fixed`` recovered.

    ``fixed`` gives ``(recover_from, recoverer)`` (see :attr:`spanedge.plan.Handover.recoverer`).
    """
    handovers = tuple(
        dataclasses.replace(h, recover_from=fix[0], recoverer=fix[1])
        if (fix := fixed.get((h.replica, h.source, h.switch_at))) is not None and not h.keyed
        else h
        for h in plan.handovers
    )
    return plan if handovers == plan.handovers else dataclasses.replace(plan, handovers=handovers)


def _utc(t: float) -> str:
    """Event time ``t`` (epoch seconds) as UTC, to the millisecond."""
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds")


def _loadable(records: Iterable[AppRecord]) -> Iterator[tuple[AppRecord, App]]:
    """The persisted apps whose source still loads, each with its app; the others are skipped with a logged reason."""
    for record in records:
        try:
            app = load_app(record.source, record.filename, record.app_name)
        except SpanEdgeError as exc:
            log.error("cannot resume app %r: %s", record.name, exc)
            continue
        yield record, app
