"""The coordinator: deploys, re-plans and removes apps; the REST API's backend.

It wires the hub's MAPE loop from parts that own their state: heartbeats
feed the registry, the site analysis and the handovers (monitor); the
analysis says which apps to re-plan and why (:mod:`hub.control.analysis`); the
replanner places an app on deploy and again when a check calls for it
(:mod:`hub.control.replanning`); the deployed apps install each plan version on
the engine, the store and the sites (:mod:`hub.control.deployments`); the
handovers of what moves are stamped and followed until they are over
(:mod:`hub.control.handovers`). A site added with ``spanedge site add`` is
planned nowhere until its agent's first heartbeat (:meth:`Coordinator.await_join`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from hub.control.analysis import Analysis
from hub.control.deployments import Deployments, Engine
from hub.control.distribution import PlanDistributor
from hub.control.drift import DriftPolicy
from hub.control.handovers import HandoverControl
from hub.control.planning import Planner, default_planner
from hub.control.registry import SiteRegistry
from hub.control.replanning import Replanner
from hub.control.rollout.metrics import HubErrors
from hub.control.rollout.records import RolloutStore
from hub.control.rollout.runner import RolloutRunner
from hub.control.site_health import HealthPolicy
from hub.control.state import AppRecord, Documents, StateStore
from hub.handover.frontiers import SiteFrontiers
from hub.handover.holds import DEFAULT_LIMIT_S, HandoverHolds, Mark
from hub.handover.switches import DEFAULT_DELAY_S
from hub.ingest.seal_points import Closings
from spanedge.logsafe import escaped
from spanedge.plan import Plan

log = logging.getLogger(__name__)


class Coordinator:
    """Deploys, re-plans and removes apps under one lock, so deploys and re-plans never interleave.

    Attributes:
        registry: live site state.
        analysis: which apps to re-plan and why (site health, pending site changes, drift).
        handovers: the handovers of the deployed apps (switches, holds, frontiers, settling).
        deployments: the deployed apps, with the engine, store and distributor their plans go to.
        replanner: places an app on deploy and again when a check calls for it.
        rollouts: the staged rollouts of new app versions (:mod:`hub.control.rollout.runner`).
        on_join: called with a site and the time of its first heartbeat when a site
            :meth:`await_join` named joins (the enrolment keeps it in the fleet file).
    """

    def __init__(
        self,
        registry: SiteRegistry,
        *,
        planner: Planner = default_planner,
        distributor: PlanDistributor | None = None,
        engine: Engine | None = None,
        store: StateStore | None = None,
        documents: Documents | None = None,
        drift_threshold: float = 0.5,
        min_replan_interval_s: float = 60.0,
        latency_floor_ms: float = 5.0,
        rate_floor: float = 1.0,
        handover_delay_s: float = DEFAULT_DELAY_S,
        handover_wait_s: float = DEFAULT_LIMIT_S,
        health: HealthPolicy | None = None,
        hub_errors: HubErrors | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Wire the coordinator.

        Args:
            registry: live site state.
            planner: places an app (tests pass a fake).
            distributor: publishes plans to the sites (None: not distributed).
            engine: runs hub-placed operators (None: control plane only).
            store: persists deployed apps (None: in memory only).
            documents: keeps the rollouts in the shared database (``--ha``) rather than in ``store``'s directory.
            drift_threshold: relative change of a latency or rate that triggers a re-plan.
            min_replan_interval_s: an app is re-planned at most this often.
            latency_floor_ms: changes are relative to at least this latency, so 1→2 ms is no drift.
            rate_floor: changes are relative to at least this many records/s.
            handover_delay_s: event-time seconds from a re-plan to the switch of the replicas it moves (at least
                the plan distribution delay; see :mod:`hub.handover.switches`).
            handover_wait_s: how long after a switch the hub's windows wait for a live old owner (:mod:`hub.handover.holds`).
            health: when a spoke counts as over its CPU budget, recovered or gone (:mod:`hub.control.site_health`).
            hub_errors: counts of what the hub's operators raised on by origin site, for the ``hub_errors`` gate.
            clock: the time source (seconds; also the event-time clock of handovers).
        """
        self.registry = registry
        self._clock = clock
        drift = DriftPolicy(drift_threshold, min_replan_interval_s, latency_floor_ms, rate_floor)
        self.analysis = Analysis(registry, health or HealthPolicy(), drift, clock)
        self.handovers = HandoverControl(
            clock,
            gone=self.analysis.gone,
            overdue=self.analysis.overdue,
            hub_unsettled=self._hub_unsettled,
            delay_s=handover_delay_s,
            wait_s=handover_wait_s,
        )
        self.deployments = Deployments(self.handovers, distributor=distributor, engine=engine, store=store)
        self.replanner = Replanner(registry, planner, self.analysis, self.handovers, self.deployments, clock)
        rollouts = RolloutStore(store.root, documents) if store is not None else None
        self.rollouts = RolloutRunner(self.deployments, registry, self.replanner.plan, rollouts, clock, hub_errors)
        self.replanner.rolling = self.rollouts.rolling
        self.on_join: Callable[[str, float], None] | None = None
        self._lock = self.deployments.lock

    # -- the parts' state, by its usual names ---------------------------------------------------

    @property
    def planner(self) -> Planner:
        """Places an app (tests pass a fake); may be replaced."""
        return self.replanner.planner

    @planner.setter
    def planner(self, planner: Planner) -> None:
        self.replanner.planner = planner

    @property
    def engine(self) -> Engine | None:
        """The engine that runs hub-placed operators (None: control plane only); may be set once it runs."""
        return self.deployments.engine

    @engine.setter
    def engine(self, engine: Engine | None) -> None:
        self.deployments.engine = engine

    def _hub_unsettled(self, name: str, proposed: Plan) -> list[str]:
        """The engine's queries of app ``name`` still writing a handover share ``proposed`` would stop (none without one)."""
        return self.engine.unsettled(name, proposed) if self.engine is not None else []

    @property
    def handover_delay_s(self) -> float:
        """Event-time seconds from a re-plan to the switch of the replicas it moves."""
        return self.handovers.delay_s

    @property
    def holds(self) -> HandoverHolds:
        """Hub windows waiting for an old owner's last records."""
        return self.handovers.holds

    @property
    def frontiers(self) -> SiteFrontiers:
        """Hub windows waiting for the slowest live site."""
        return self.handovers.frontiers

    # -- lifecycle -----------------------------------------------------------------------------

    def resume(self) -> list[str]:
        """Load the persisted apps, republish their plans and restart their hub parts.

        Returns:
            The names of the resumed apps. An app whose source no longer loads
            is skipped with a logged reason.
        """
        self.rollouts.load()  # before the plans go out: the sites of a rollout keep the version they were given
        return self.deployments.resume()

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
            InvalidSettings: ``slo_ms`` or ``weights`` is out of its range
                (:mod:`spanedge.placement_settings`), before the source is loaded.
            InvalidDataflow, InvalidSites, InfeasiblePlacement: the app cannot be
                deployed; the message is the one the CLI prints.
        """
        return self.replanner.deploy(source, filename, app_name=app_name, slo_ms=slo_ms, weights=weights)

    def delete(self, name: str) -> dict[str, str]:
        """Remove app ``name`` from the engine, the store and the sites' plans.

        Raises:
            KeyError: no app of that name is deployed.
        """
        with self._lock:
            if name not in self.deployments:
                raise KeyError(name)
            self.analysis.forget(name)
            status = self.deployments.remove(name)
        log.info("app %r deleted", name)
        return status

    # -- queries -------------------------------------------------------------------------------

    @property
    def app_count(self) -> int:
        """How many apps are deployed; never waits for a deploy in progress."""
        return len(self.deployments)

    def records(self) -> list[AppRecord]:
        """Deployed apps, by name."""
        return self.deployments.records()

    def app_names(self) -> list[str]:
        """The names of the deployed apps."""
        return [r.name for r in self.records()]

    def record(self, name: str) -> AppRecord:
        """The record of app ``name``; raise ``KeyError`` if it is not deployed."""
        with self._lock:
            return self.deployments[name].record

    def plans_of(self, name: str) -> tuple[Plan, ...]:
        """The plan in force of app ``name`` and the one it replaced (if any; kept across restarts); none if unknown.

        Never waits for a deploy or re-plan in progress: the ingest asks for every batch a site
        publishes for another site (:func:`hub.ingest.publishers.from_plans`), and sees the plans before
        or after the change.
        """
        return self.deployments.plans_of(name)

    def window_grid(self, name: str) -> float:
        """The grid the ends of app ``name``'s hub windows lie on (0: unknown app, or no window at the hub)."""
        return self.deployments.window_ends(name)[0]

    def window_closings(self, name: str) -> Closings:
        """Where app ``name``'s hub windows can close (:mod:`hub.ingest.seal_points`; none for an unknown app)."""
        return self.deployments.window_ends(name)[1]

    def gone(self, site: str) -> bool:
        """True while ``site`` counts as gone: silent for longer than the grace period."""
        return self.analysis.gone(site)

    # -- monitor -------------------------------------------------------------------------------

    def heartbeat(self, site: str, payload: bytes | Mapping[str, Any]) -> bool:
        """Take a heartbeat that arrived on ``site``'s topic: the registry records it, the site analysis reads it.

        Returns:
            True if the registry accepted it (see :meth:`hub.control.registry.SiteRegistry.heartbeat`).
        """
        if site in self.registry.revoked:
            log.warning("ignoring a heartbeat of revoked site '%s' ('spanedge site revoke')", escaped(site))
            return False
        data: Any = payload
        if isinstance(payload, bytes | bytearray):
            try:
                data = orjson.loads(payload)
            except orjson.JSONDecodeError:
                data = payload  # the registry rejects it with the reason
        joins = site in self.registry.joining
        if not self.registry.heartbeat(site, data):
            return False
        now = self._clock()
        if joins:
            self._join(site, now)
        self.analysis.observe(site, data, now)
        self.handovers.observe(site, data, now)
        self.rollouts.observe(site, data, now)
        return True

    def await_join(self, site: str) -> None:
        """Plan ``site`` (added with ``spanedge site add``) nowhere until its agent is heard.

        Its first heartbeat makes it a site like the others: the next check
        re-plans the apps that read its streams, with the reason ``site <site>
        joined``; the hub's windows take its data from the switch of that plan
        (:class:`spanedge.plan.Join`).
        """
        self.registry.joining.add(site)

    def _join(self, site: str, now: float) -> None:
        self.registry.joining.discard(site)
        self.analysis.join(site)
        log.info("site %s joined: its agent's first heartbeat; the apps that read its streams are re-planned", site)
        if self.on_join is not None:
            try:
                self.on_join(site, now)
            except Exception:
                log.exception("recording that site %s joined failed; it joins again after a hub restart", site)

    def window_holds(self, mark_of: Callable[[str], Mark]) -> dict[str, float | None]:
        """Per app, the event time from which its hub windows wait, or None.

        They wait for an old owner's last records (``mark_of(app)`` gives the
        last ``seq`` the app's log holds of a (site, stream, epoch), see
        :mod:`hub.handover.holds`) and for the slowest live site
        (:mod:`hub.handover.frontiers`), whichever is earlier.
        """
        holds = {r.name: self.handovers.window_hold(r.name, r.plan, mark_of(r.name)) for r in self.records()}
        done = self.handovers.take_delivered()
        if done:
            self.deployments.handed_over(done)
        return holds

    def reader_holds(self, name: str, mark: Mark, sinks: Mapping[str, str]) -> dict[str, float]:
        """Per window query's log reader of app ``name``, the event time from which it waits (infinite: not held).

        See :meth:`hub.control.handovers.Handovers.reader_holds`; an unknown app holds nothing.
        """
        try:
            plan = self.record(name).plan
        except KeyError:
            return {}
        return self.handovers.reader_holds(name, plan, mark, sinks)

    # -- analyse, plan and execute (hub.control.replanning) -----------------------------------

    def check(self) -> list[str]:
        """One round of the analyse step: sites over budget, gone or back, then drift.

        Returns:
            The names of the apps re-planned.
        """
        replanned = self.check_sites()
        return replanned + [n for n in self.check_drift() if n not in replanned]

    def check_sites(self) -> list[str]:
        """Re-plan the apps a site change concerns (:meth:`hub.control.replanning.Replanner.check_sites`)."""
        return self.replanner.check_sites()

    def check_drift(self) -> list[str]:
        """Re-plan every app whose inputs drifted and whose last plan is old enough; the names of those re-planned."""
        return self.replanner.check_drift()

    def drift(self, name: str) -> list[str]:
        """What moved beyond the threshold since app ``name`` was last planned, for people."""
        return self.replanner.drift(name)

    def replan(self, name: str, reason: str, *, forced: bool = False) -> AppRecord | None:
        """Place app ``name`` again with the current measurements (:meth:`hub.control.replanning.Replanner.replan`)."""
        return self.replanner.replan(name, reason, forced=forced)
