"""The analyse, plan and execute steps of the coordinator's MAPE loop.

Each check asks the analysis (:mod:`hub.control.analysis`) which apps a site
change or a drift calls to re-plan; each re-plan places the app again with
the current measurements (:mod:`hub.control.planning`), stamps the handovers of
what moves (:mod:`hub.control.handovers`), records why in the app's history
(:mod:`hub.control.plan_history`) and installs the new version
(:mod:`hub.control.deployments`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from hub.control import plan_history
from hub.control.analysis import Analysis
from hub.control.deployments import Deployments
from hub.control.handovers import HandoverControl
from hub.control.planning import Planner, basis, carry_ownership, load_app, plan_app
from hub.control.registry import SiteRegistry
from hub.control.site_health import capped_sites
from hub.control.state import AppRecord
from spanedge.app import App
from spanedge.errors import InvalidRollout
from spanedge.placement_settings import check_slo_ms, check_weights
from spanedge.plan import Plan
from spanedge.sites import Sites

log = logging.getLogger(__name__)


#: A re-plan's reason names at most this many changes; the rest are counted.
MOST_REASONS = 10


def reason_text(reasons: list[str], most: int = MOST_REASONS) -> str:
    """The reasons for a re-plan in one line: the first ``most`` distinct ones and how many more there were.

    A fleet-wide change (every site's link to the hub slower) would otherwise
    name a thousand links in one log line and in the app's history.
    """
    distinct = list(dict.fromkeys(reasons))
    shown = "; ".join(distinct[:most])
    return f"{shown}; and {len(distinct) - most} more" if len(distinct) > most else shown


class Replanner:
    """Places apps when they are deployed, and again when a site change or a drift calls for it.

    Attributes:
        registry: live site state.
        planner: places an app (tests pass a fake).
        analysis: which apps to re-plan, and why.
        handovers: stamps the handovers of what a plan moves, and says when a re-plan must wait for them.
        deployments: the deployed apps; its lock is held across a whole re-plan.
    """

    def __init__(
        self,
        registry: SiteRegistry,
        planner: Planner,
        analysis: Analysis,
        handovers: HandoverControl,
        deployments: Deployments,
        clock: Callable[[], float],
    ) -> None:
        """Re-plan with these parts."""
        self.registry = registry
        self.planner = planner
        self.analysis = analysis
        self.handovers = handovers
        self.deployments = deployments
        self._clock = clock
        self._lock = deployments.lock
        #: whether an app has a staged rollout in progress: its re-plans wait, a plain deploy is refused
        self.rolling: Callable[[str], bool] = lambda name: False

    def plan(self, app: App, owners: Plan | None, **options: Any) -> Plan:
        """Plan the next version of ``app``, stamp who owns each replica since when and hand over what moves.

        ``owners`` is the plan in force (None: a first deploy); ``options`` go to
        :func:`hub.control.planning.plan_app`. A spoke over its CPU budget is
        planned with the capacity it has.
        """
        version = owners.version + 1 if owners is not None else 1
        caps = self.analysis.capacities()
        planner = self.planner
        if caps:

            def planner(app: App, sites: Sites, **kwargs: Any) -> Plan:
                return self.planner(app, capped_sites(sites, caps), **kwargs)

        plan = carry_ownership(plan_app(planner, self.registry, app, version, **options), owners)
        return self.handovers.stamp(plan, owners, app)

    def deploy(
        self,
        source: str,
        filename: str,
        *,
        app_name: str | None,
        slo_ms: float | None,
        weights: Mapping[str, float] | None,
    ) -> tuple[AppRecord, dict[str, str]]:
        """Deploy (or redeploy) the app defined by ``source``; see :meth:`hub.control.coordinator.Coordinator.deploy`."""
        started = time.perf_counter()
        slo_ms = check_slo_ms(slo_ms)
        weights = check_weights(weights)
        app = load_app(source, filename, app_name)
        with self._lock:
            if self.rolling(app.name):
                msg = f"app {app.name!r} is rolling out a new version; wait for it to pass, or roll it back first"
                raise InvalidRollout(msg)
            deployed = self.deployments.get(app.name)
            old = deployed.record if deployed is not None else None
            owners = old.plan if old is not None else None
            plan = self.plan(app, owners, source=source, filename=filename, slo_ms=slo_ms, weights=weights)
            reason = plan_history.deploy_reason(old, source)
            state = self.registry.state_bytes(app.name, owners) if owners is not None else None
            entry = plan_history.history_entry(plan, self._clock(), reason, owners, state)
            request: dict[str, Any] = {"source": source, "filename": filename, "app_name": app_name, "slo_ms": slo_ms}
            request["weights"] = dict(weights) if weights else None
            record = plan_history.deployed_record(app, plan, old, entry, basis(self.registry, app), **request)
            status = self.deployments.install(app, record, owners, changed=True)
        log.info(
            "app %r %s: plan v%d (%.0f ms)", app.name, reason, plan.version, 1000 * (time.perf_counter() - started)
        )
        return record, status

    def check_sites(self) -> list[str]:
        """Re-plan the apps a site change concerns: a site over its CPU budget, gone, back or within budget again.

        A change waits, like a drift re-plan, while another spoke of the app is
        silent (not yet gone), and is retried at the next check.

        Returns:
            The names of the apps re-planned.
        """
        with self._lock:
            self.analysis.review(self.deployments.running())
            for site, at in sorted(self.handovers.returns.take().items()):
                self.deployments.back(site, at)
            pending = self.analysis.queued(self.deployments)
        replanned = []
        for name, reasons in sorted(pending.items()):
            with self._lock:
                deployed = self.deployments.get(name)
                current = deployed.record if deployed is not None else None
                if current is None or self.analysis.waits(name, current.plan):
                    continue
                forced = self.analysis.forced(name)
            outcome: AppRecord | None
            try:
                outcome = self.replan(name, reason_text(reasons), forced=forced)
            except Exception:
                log.exception("re-planning app %r failed; it keeps its current plan", name)
                outcome = current
            if outcome is None:
                continue  # it would drop a handover that is not over: the changes stay pending
            with self._lock:
                self.analysis.done(name)
            if outcome is not current:
                replanned.append(name)
        return replanned

    def drift(self, name: str) -> list[str]:
        """What moved beyond the threshold since app ``name`` was last planned, for people."""
        with self._lock:
            deployed = self.deployments[name]
        return self.analysis.drift(deployed.record, deployed.app)

    def check_drift(self) -> list[str]:
        """Re-plan every app whose inputs drifted and whose last plan is old enough.

        Returns:
            The names of the apps re-planned.
        """
        replanned = []
        for record in self.deployments.records():
            if not self.analysis.drift_due(record):
                continue
            reasons = self.drift(record.name)
            if reasons:
                try:
                    if self.replan(record.name, reason_text(reasons)) is None:
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
            if not forced and self.rolling(name):
                return None  # a staged rollout holds the plan: the change stays pending until it is over
            last_attempt = self.analysis.attempt(name)
            deployed = self.deployments[name]
            old, app = deployed.record, deployed.app
            request = {"source": old.source, "filename": old.filename, "slo_ms": old.slo_ms, "weights": old.weights}
            state = self.registry.state_bytes(name, old.plan)  # the same sizes for the planner and the history
            spread = self.registry.key_spread(name, old.plan)
            plan = self.plan(app, old.plan, previous=old.plan, state_bytes=state, key_spread=spread, **request)
            if not forced and self.handovers.blocks(name, old.plan, plan, app):
                self.analysis.withdraw(name, last_attempt)
                return None
            record, changed = plan_history.replanned(old, plan, self._clock(), reason, basis(self.registry, app), state)
            if forced:
                recovering = self.handovers.recovery.recover_carried(record, old.plan, new_version=not changed)
                record, changed = recovering, changed or recovering is not record
            self.deployments.install(app, record, old.plan if changed else None, changed=changed)
        took = 1000 * (time.perf_counter() - started)
        log.info("app %r re-planned (%s): v%d (%.0f ms)", name, record.history[-1].reason, record.plan.version, took)
        return record
