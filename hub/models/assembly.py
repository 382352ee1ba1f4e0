"""The hub's model service, wired to the plans, the heartbeats and the control connection (:func:`hub_models`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hub.models.distribution import ModelDistributor
from hub.models.drift import MIN_RETRAIN_S, DriftWatch
from hub.models.link import ModelLink
from hub.models.registry import ModelRegistry
from hub.models.service import ModelService
from spanedge.app import App


def hub_models(hub: Any, app_of: Callable[[str], App]) -> ModelService:
    """The model service of a :class:`hub.server.Hub`, each new version sent out where its plans predict with it.

    Versions are kept under ``<state_dir>/models`` and signed with the hub's plan key; before each plan
    message goes out (``hub.distributor.before_send``) the service starts reading the logs of the apps with
    models (their labelled records are kept from the first one on) and the link runs.
    """
    registry = ModelRegistry(Path(hub.state_dir) / "models", hub.config.plan_key)
    spark = (lambda: hub.engine.spark) if hub.engine is not None else None
    service = ModelService(registry, app_of, Path(hub.state_dir) / "ingest", spark)
    link = ModelLink(ModelDistributor(registry, hub.control.publish_all), app_of)
    link.plans_of = hub.coordinator.plans_of
    link.beat_of = hub.registry.last_heartbeat
    service.on_trained = link.release
    service.link = link
    watch = DriftWatch(service, link, min_retrain_s=min(MIN_RETRAIN_S, float(hub.config.min_replan_interval_s)))
    service.drift_check, service.drift_reports = watch.check, watch.reports
    service.check_every_s = min(60.0, float(hub.config.check_interval_s))

    def before_send(apps: Mapping[str, Any]) -> dict[str, str]:
        service.follow(list(apps))
        return link.sync(apps)

    hub.distributor.before_send = before_send
    return service
