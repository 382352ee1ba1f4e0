"""What ties model versions to the plans: a trained version goes to the sites that predict with it.

:meth:`ModelLink.release` sends each new version (given by
:attr:`hub.models.service.ModelService.on_trained`) to the sites where the
app's plans put a predict of it; :meth:`ModelLink.sync` runs before the plans
are sent (:attr:`hub.control.distribution.PlanDistributor.before_send`), so a
site a new plan gives a predict gets the newest version before the plan.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from hub.models.distribution import ModelDistributor, predict_sites, release_to_plans
from spanedge.app import App
from spanedge.errors import SpanEdgeError
from spanedge.models.version import ModelVersion
from spanedge.plan import Plan
from spanedge.wire.heartbeat import Heartbeat

log = logging.getLogger(__name__)


class ModelLink:
    """Sends model versions where the plans need them.

    Args:
        distributor: signs and publishes the versions.
        app_of: the loaded app of a deployed app's name (``KeyError`` if none).

    Attributes:
        plans_of: the plans in force of an app (the current one and the one it replaces); none by default.
        beat_of: the last heartbeat of a site (None: none yet), for the event time it reported done.
        clock: seconds since the epoch.
    """

    def __init__(self, distributor: ModelDistributor, app_of: Callable[[str], App]) -> None:
        """Wire the link; set :attr:`plans_of` and :attr:`beat_of` to the coordinator's."""
        self.distributor = distributor
        self.app_of = app_of
        self.plans_of: Callable[[str], tuple[Plan, ...]] = lambda name: ()
        self.beat_of: Callable[[str], Heartbeat | None] = lambda site: None
        self.clock: Callable[[], float] = time.time

    def complete_of(self, site: str, app: str) -> float | None:
        """The event time ``site`` last reported done for ``app`` (None: unknown)."""
        beat = self.beat_of(site)
        return beat.complete.get(app) if beat is not None else None

    def release(self, version: ModelVersion) -> ModelVersion:
        """Send a new version to the sites of its app's plans; return it with its switch time."""
        app = self.app_of(version.app)
        return release_to_plans(
            self.distributor,
            version,
            app,
            self.plans_of(version.app),
            lambda site: self.complete_of(site, version.app),
            self.clock(),
        )

    def sync(self, apps: Mapping[str, Any]) -> dict[str, str]:
        """Give every site of ``apps`` (values with a ``plan``) the newest version of each model it predicts with."""
        result: dict[str, str] = {}
        for entry in apps.values():
            plan: Plan = entry.plan
            try:
                app = self.app_of(plan.app)
            except (KeyError, SpanEdgeError) as exc:
                log.warning("app %s does not load here (%s); its model versions are not sent", plan.app, exc)
                continue
            if not app.models:
                continue
            for key, status in self.distributor.sync(plan.app, predict_sites(app, plan)).items():
                result[f"{plan.app}/{key}"] = status
        return result
