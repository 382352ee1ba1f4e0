"""The deployed apps: each one's loaded app and record, and the install, removal and publishing of their plans.

A plan version is installed in one order: the engine first (it validates the
hub's part, so an app it rejects is neither persisted nor sent), its switch
postponed if that took too long, the moves from sites gone for good marked
(:mod:`hub.control.recovery`), then the record is persisted
(:class:`hub.control.state.StateStore`) and the plans of every site concerned
are published (:class:`hub.control.distribution.PlanDistributor`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from hub.control import plan_history
from hub.control.distribution import PlanDistributor, SiteApp, sites_of
from hub.control.handovers import HandoverControl
from hub.control.planning import load_app
from hub.control.recovery import log_back
from hub.control.site_returns import awaited
from hub.control.state import AppRecord, StateStore
from hub.handover.frontiers import window_grid
from hub.ingest.seal_points import Closings, closing_points
from spanedge.app import App
from spanedge.errors import SpanEdgeError
from spanedge.plan import Plan

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


@dataclass(frozen=True)
class Deployment:
    """One deployed app: the app its source defines and its record (plan in force, plan replaced, history)."""

    app: App
    record: AppRecord

    @property
    def plans(self) -> tuple[Plan, ...]:
        """The plan in force and the one it replaced (if any)."""
        record = self.record
        return (record.plan,) if record.replaced is None else (record.plan, record.replaced)


class Deployments:
    """The deployed apps by name, with the engine, the store and the distributor their plans go to.

    ``lock`` serialises every change; the coordinator holds it across a whole deploy or re-plan.

    Attributes:
        handovers: postpones a switch deploying took too close and marks moves from gone sites.
        distributor: publishes plans to the sites (None: not distributed).
        engine: runs hub-placed operators (None: control plane only).
        store: persists deployed apps (None: in memory only).
        lock: held while the deployed apps change.
    """

    def __init__(
        self,
        handovers: HandoverControl,
        *,
        distributor: PlanDistributor | None = None,
        engine: Engine | None = None,
        store: StateStore | None = None,
    ) -> None:
        """Hold no app yet."""
        self.handovers = handovers
        self.distributor = distributor
        self.engine = engine
        self.store = store
        self.lock = threading.RLock()
        self._apps: dict[str, Deployment] = {}
        self._grids: dict[str, tuple[int, float, Closings]] = {}  # per app and plan version: its hub windows' ends
        # per app in a staged rollout: the new version's entry and the sites given it (hub.control.rollout)
        self._candidates: dict[str, tuple[SiteApp, frozenset[str]]] = {}

    # -- queries -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """How many apps are deployed; never waits for a change in progress."""
        return len(self._apps)

    def __contains__(self, name: object) -> bool:
        """Whether an app of that name is deployed."""
        return name in self._apps

    def get(self, name: str) -> Deployment | None:
        """The deployment of app ``name`` (None if it is not deployed)."""
        return self._apps.get(name)

    def __getitem__(self, name: str) -> Deployment:
        """The deployment of app ``name``; raise ``KeyError`` if it is not deployed."""
        return self._apps[name]

    def records(self) -> list[AppRecord]:
        """Deployed apps, by name."""
        with self.lock:
            return [self._apps[n].record for n in sorted(self._apps)]

    def running(self) -> list[tuple[AppRecord, App]]:
        """Each deployed app's record with its app, in the order they were deployed."""
        return [(d.record, d.app) for d in self._apps.values()]

    def plans_of(self, name: str) -> tuple[Plan, ...]:
        """The plan in force of app ``name`` and the one it replaced; none if unknown. Never waits for a change."""
        deployment = self._apps.get(name)
        return () if deployment is None else deployment.plans

    def window_ends(self, name: str) -> tuple[float, Closings]:
        """The grid app ``name``'s hub windows end on, and where they can close (0 and none for an unknown app)."""
        with self.lock:
            deployment = self._apps.get(name)
        if deployment is None:
            return 0.0, Closings()
        record, app = deployment.record, deployment.app
        cached = self._grids.get(name)
        if cached is None or cached[0] != record.plan.version:
            cached = (record.plan.version, window_grid(app, record.plan), closing_points(app, record.plan))
            self._grids[name] = cached
        return cached[1], cached[2]

    # -- changes -------------------------------------------------------------------------------

    def install(self, app: App, record: AppRecord, replaced: Plan | None, *, changed: bool) -> dict[str, str]:
        """Make ``record`` the app's own; if its plan ``changed``, run it on the engine and publish it.

        ``replaced`` is the plan ``record``'s plan replaced (None: a first deploy, or no change).

        Returns:
            The distribution status per site (none if nothing changed).
        """
        with self.lock:
            if changed and self.engine is not None:
                self.engine.deploy(app, record.plan)
                later = self.handovers.postponed(app, record, replaced)
                if later is not record:
                    self.engine.deploy(app, later.plan)
                    record = later
            if changed and replaced is not None:
                record = self.handovers.recovery.at_risk(record)
            prior = self._apps.get(app.name)
            # no new version (or a first deploy): the plan in force still replaced the one it did
            kept = replaced if replaced is not None else prior.record.replaced if prior is not None else None
            record = dataclasses.replace(record, replaced=kept)
            self._put(app, record)
            if not changed:
                return {}
            return self.distribute(sites_of(record.plan) | (sites_of(replaced) if replaced is not None else set()))

    def remove(self, name: str) -> dict[str, str]:
        """Remove app ``name`` from the engine, the store and the sites' plans.

        Raises:
            KeyError: no app of that name is deployed.
        """
        with self.lock:
            record = self._apps.pop(name).record
            self._candidates.pop(name, None)
            if self.engine is not None:
                self.engine.undeploy(name)
            if self.store is not None:
                self.store.delete_app(name)
            return self.distribute(sites_of(record.plan))

    def update(self, record: AppRecord) -> None:
        """Replace the record of deployed app ``record.name`` (its plan or history) and persist it."""
        with self.lock:
            self._put(self._apps[record.name].app, record)

    def _put(self, app: App, record: AppRecord) -> None:
        self._apps[app.name] = Deployment(app, record)
        if self.store is not None:
            self.store.save_app(record)

    def distribute(self, sites: Iterable[str]) -> dict[str, str]:
        """Publish the plan messages of ``sites`` from every deployed app; the status per site.

        A site given an app's new version in a staged rollout (:meth:`offer`) gets
        that version's entry, the others the deployed one.
        """
        if self.distributor is None:
            return {}
        apps = {name: SiteApp(d.record.plan, d.record.source) for name, d in self._apps.items()}
        if not self._candidates:
            return self.distributor.publish(apps, sites)
        groups: dict[tuple[str, ...], list[str]] = {}
        for site in sorted(set(sites)):
            key = tuple(n for n, (_, given) in sorted(self._candidates.items()) if site in given and n in apps)
            groups.setdefault(key, []).append(site)
        status: dict[str, str] = {}
        for names, members in groups.items():
            mine = apps | {n: self._candidates[n][0] for n in names}
            status.update(self.distributor.publish(mine, members))
        return status

    def offer(self, name: str, candidate: SiteApp, sites: Iterable[str]) -> None:
        """Give ``sites`` the version ``candidate`` of app ``name`` in their plan messages from now on (none: withdraw it).

        Nothing is published: the caller persists its step, then calls :meth:`distribute`.
        """
        with self.lock:
            given = frozenset(sites)
            if given:
                self._candidates[name] = (candidate, given)
            else:
                self._candidates.pop(name, None)

    def candidate_sites(self, name: str) -> frozenset[str]:
        """The sites given app ``name``'s new version in a staged rollout (none outside one)."""
        offered = self._candidates.get(name)
        return offered[1] if offered is not None else frozenset()

    # -- restart -------------------------------------------------------------------------------

    def resume(self) -> list[str]:
        """Load the persisted apps, republish their plans (freshly issued) and restart their hub parts.

        Returns:
            The names of the resumed apps. An app whose source no longer loads
            is skipped with a logged reason.
        """
        if self.store is None:
            return []
        with self.lock:
            for record, app in _loadable(self.store.load_apps()):
                self._apps[record.name] = Deployment(app, record)
            self.handovers.returns.expect(awaited(d.record for d in self._apps.values()))
            # every site sent a plan before too, so each gets a fresh one (an empty one where no app runs)
            known = set(self.distributor.versions) if self.distributor is not None else set()
            self.distribute(known.union(*(sites_of(d.record.plan) for d in self._apps.values())))
            if self.engine is not None:
                for name, deployment in self._apps.items():
                    try:
                        self.engine.deploy(deployment.app, deployment.record.plan)
                    except Exception:
                        log.exception("cannot restart the hub part of app %r; redeploy it", name)
            names = sorted(self._apps)
        if names:
            log.info("resumed apps: %s", ", ".join(names))
        return names

    # -- the history of moves ------------------------------------------------------------------

    def handed_over(self, done: Iterable[tuple[str, str, str, float]]) -> None:
        """Mark in each app's history the moves ``(app, replica, old owner, at)`` whose old owner delivered its part."""
        with self.lock:
            for name, replica, site, at in done:
                deployment = self._apps.get(name)
                record = (
                    plan_history.handed_over(deployment.record, replica, site, at) if deployment is not None else None
                )
                if deployment is None or record is None:
                    continue
                self._put(deployment.app, record)
                log.info("app %r: %s handed over: the hub has its old owner %s's part", name, replica, site)

    def back(self, site: str, at: float) -> None:
        """Mark in each app's history the moves away from ``site``, gone for good, as back at ``at``; log each app's."""
        with self.lock:
            for name, deployment in list(self._apps.items()):
                record, marked = plan_history.back(deployment.record, site, at)
                if marked:
                    self._put(deployment.app, record)
                    log_back(name, site, at, marked)


def _loadable(records: Iterable[AppRecord]) -> Iterator[tuple[AppRecord, App]]:
    """The persisted apps whose source still loads, each with its app; the others are skipped with a logged reason."""
    for record in records:
        try:
            app = load_app(record.source, record.filename, record.app_name)
        except SpanEdgeError as exc:
            log.error("cannot resume app %r: %s", record.name, exc)
            continue
        yield record, app
