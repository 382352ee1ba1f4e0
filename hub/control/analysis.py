"""The analyse step of the coordinator's MAPE loop: which apps to re-plan, and why.

A spoke over its CPU budget, gone, back, within budget again or joined
(:mod:`hub.control.site_health`) queues a re-plan of the apps it concerns; a
latency or rate that drifted beyond the threshold (:mod:`hub.control.drift`)
calls one once the app's last plan is old enough. Either waits while another
spoke of the app is silent but not yet gone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from hub.control import plan_history
from hub.control.drift import DriftPolicy, SilenceWatch
from hub.control.planning import basis
from hub.control.registry import SiteRegistry
from hub.control.site_health import HealthPolicy, SiteHealth, planned_load, with_capacity
from hub.control.state import AppRecord
from spanedge.app import App
from spanedge.plan import Plan
from spanedge.sites import Site


class Analysis:
    """The sites' health, the site changes waiting to re-plan each app, and each app's drift and last attempt.

    Attributes:
        registry: live site state.
        drift_policy: what counts as drift, and how often an app may be re-planned.
        health: when a spoke counts as over its CPU budget, recovered or gone.
    """

    def __init__(
        self, registry: SiteRegistry, health: HealthPolicy, drift: DriftPolicy, clock: Callable[[], float]
    ) -> None:
        """Analyse the sites of ``registry`` with these policies."""
        self.registry = registry
        self.drift_policy = drift
        self.health = SiteHealth(registry.sites, health)
        self._clock = clock
        self._health_lock = threading.Lock()  # heartbeats never wait for a deploy holding the coordinator's lock
        self._pending: dict[str, list[str]] = {}  # site changes waiting to re-plan an app, per app
        self._forced: set[str] = set()  # apps with a site gone for good among their pending changes
        self._attempts: dict[str, float] = {}  # when each app's last re-plan was tried
        # a gone site is re-planned around: it no longer holds the other sites' re-plans back
        self._silence = SilenceWatch(lambda site: self.registry.silent(site) and not self.gone(site))

    # -- sites ---------------------------------------------------------------------------------

    def observe(self, site: str, beat: Mapping[str, Any], now: float) -> None:
        """Read a heartbeat of ``site`` received at ``now``."""
        with self._health_lock:
            self.health.observe(site, beat, now)

    def gone(self, site: str) -> bool:
        """True while ``site`` counts as gone: silent for longer than the grace period."""
        with self._health_lock:
            return self.health.gone(site)

    def add_spoke(self, site: Site) -> None:
        """Track the health of a spoke added since."""
        with self._health_lock:
            self.health.add_spoke(site)

    def join(self, site: str) -> None:
        """Note the first heartbeat of ``site``, added since: the next review re-plans the apps that read its streams."""
        known = self.registry.sites.sites.get(site)
        streams = known.streams if known is not None else {}
        with self._health_lock:
            self.health.join(site, streams)

    def revoke(self, site: str) -> None:
        """Count ``site`` gone for good: the next check re-plans the apps it runs replicas of, forced."""
        with self._health_lock:
            self.health.revoke(site, self._clock())

    def overdue(self, site: str, extra_s: float) -> bool:
        """True if ``site`` has been silent for longer than the grace period plus ``extra_s``."""
        with self._health_lock:
            silent = self.health.silent_for(site, self._clock())
        return silent > self.health.policy.site_grace_s + extra_s

    def capacities(self) -> dict[str, float]:
        """The CPU capacity each spoke over its budget is planned with (:meth:`hub.control.site_health.SiteHealth.capacities`)."""
        with self._health_lock:
            return self.health.capacities()

    # -- site changes --------------------------------------------------------------------------

    def review(self, running: Sequence[tuple[AppRecord, App]]) -> None:
        """Queue the re-plan reasons of the site changes since the last review for each app of ``running`` they concern."""
        with self._health_lock:
            changes = self.health.review(self._clock(), planned_load([(r.plan, app) for r, app in running]))
        for change in changes:
            for record, app in running:
                reads = not change.streams.isdisjoint(app.source_streams())
                if change.everywhere or reads or with_capacity(record.plan, change.site):
                    self._pending.setdefault(record.name, []).append(change.reason)
                    if not change.everywhere and self.gone(change.site):
                        self._forced.add(record.name)

    def queued(self, known: Container[str]) -> dict[str, list[str]]:
        """The reasons waiting to re-plan each app among ``known``."""
        return {name: reasons for name, reasons in self._pending.items() if name in known}

    def forced(self, name: str) -> bool:
        """True if a site gone for good is among the changes waiting to re-plan app ``name``."""
        return name in self._forced

    def done(self, name: str) -> None:
        """Drop the changes that waited to re-plan app ``name``: the re-plan took them."""
        self._pending.pop(name, None)
        self._forced.discard(name)

    def forget(self, name: str) -> None:
        """Forget app ``name``, deleted: its waiting changes and its last attempt."""
        self._attempts.pop(name, None)
        self._pending.pop(name, None)

    def waits(self, name: str, plan: Plan) -> bool:
        """True while a spoke that app ``name``'s ``plan`` uses is silent (heard once, not lately)."""
        return self._silence.waits(name, plan)

    # -- drift ---------------------------------------------------------------------------------

    def drift(self, record: AppRecord, app: App) -> list[str]:
        """What moved beyond the threshold since ``record`` was planned, for people."""
        return self.drift_policy.reasons(record.basis, basis(self.registry, app), self.registry.declared_latency)

    def drift_due(self, record: AppRecord) -> bool:
        """True if the app of ``record`` was last planned (or tried) long enough ago and no spoke of it is silent."""
        last = max(plan_history.last_planned(record), self._attempts.get(record.name, 0))
        return self.drift_policy.due(last, self._clock()) and not self._silence.waits(record.name, record.plan)

    def attempt(self, name: str) -> float | None:
        """Note a re-plan of app ``name`` tried now; return when the one before was (None: never)."""
        last = self._attempts.get(name)
        self._attempts[name] = self._clock()
        return last

    def withdraw(self, name: str, last: float | None) -> None:
        """Take back the attempt just noted: app ``name``'s last attempt is ``last`` again (None: never)."""
        if last is None:
            del self._attempts[name]
        else:
            self._attempts[name] = last
