"""Retraining on drift: a site reports its scored features drifted, or its live error grew, and the hub trains anew.

Every site that predicts with a model reports, in its heartbeat
(``models``, :mod:`spanedge.models.drift`), the population stability index
of each feature it scored against the training statistics of the version in
force, and the live error where labels came. :class:`DriftWatch` reads the
sites' last heartbeats; when a site's report about the newest version sent
out crosses the model's ``max_psi`` or ``max_error``, the hub trains the next
version with the reason (``drift at <site>: ...``), which is sent out like any
version (:mod:`hub.models.link`). A model retrains at most once per
``min_retrain_s`` (:data:`MIN_RETRAIN_S`, or the hub's ``--min-replan-interval``
if shorter), and a training that fails is tried again after as long.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hub.models.distribution import predict_sites
from hub.models.link import ModelLink
from hub.models.service import ModelService, NoSpark, TrainingBusy
from hub.models.training import TrainingFailed
from spanedge.models.spec import ModelSpec
from spanedge.models.version import ModelVersion

log = logging.getLogger(__name__)

#: A model retrains on drift at most this often (seconds).
MIN_RETRAIN_S = 60.0


@dataclass(frozen=True)
class Drifted:
    """A site's report that calls for a new version of a model, and why."""

    app: str
    model: str
    site: str
    reason: str


def crossed(spec: ModelSpec, site: str, report: dict[str, float]) -> str | None:
    """Why ``site``'s ``report`` about a version of ``spec`` calls for a new one, or None."""
    worst = report.get("psi")
    if worst is not None and worst > spec.max_psi:
        feature = max((k for k in report if k.startswith("psi.")), key=lambda k: report[k], default="psi.?")[4:]
        return f"drift at {site}: PSI {worst:.3f} of '{feature}' over {spec.max_psi:g}"
    error = report.get("error")
    if error is not None and spec.max_error is not None and error > spec.max_error:
        return f"drift at {site}: live error {error:.3f} over {spec.max_error:g}"
    return None


class DriftWatch:
    """Finds the models whose sites report drift, and trains their next version.

    Args:
        service: trains the versions.
        link: the plans and heartbeats of the sites, and what sends versions out.
        clock: seconds since the epoch.
    """

    def __init__(
        self,
        service: ModelService,
        link: ModelLink,
        clock: Callable[[], float] = time.time,
        min_retrain_s: float = MIN_RETRAIN_S,
    ) -> None:
        """Watch the models of ``service``; retrain each at most every ``min_retrain_s`` seconds."""
        self.service = service
        self.link = link
        self.clock = clock
        self.min_retrain_s = min_retrain_s
        self._tried: dict[tuple[str, str], float] = {}

    def reports(self, app: str, model: str) -> dict[str, dict[str, float]]:
        """The last report of each site that predicts with ``app``'s ``model``, by site."""
        sites: set[str] = set()
        try:
            declared = self.service.app_of(app)
        except KeyError:
            return {}
        for plan in self.link.plans_of(app):
            sites |= predict_sites(declared, plan).get(model, set())
        out: dict[str, dict[str, float]] = {}
        for site in sorted(sites):
            beat = self.link.beat_of(site)
            report = beat.models.get(app, {}).get(model) if beat is not None else None
            if report is not None:
                out[site] = report
        return out

    def drifted(self, apps: Iterable[str]) -> list[Drifted]:
        """The models of ``apps`` a site reports drift of, about their newest version sent out, and due to retrain."""
        now = self.clock()
        out = []
        for app in apps:
            try:
                models = self.service.app_of(app).models
            except KeyError:
                continue
            for name, spec in models.items():
                current = self.link.distributor.latest_sent(app, name)
                tried = self._tried.get((app, name))
                if current is None or (tried is not None and now - tried < self.min_retrain_s):
                    continue
                if now - current.trained_at < self.min_retrain_s:
                    continue
                for site, report in self.reports(app, name).items():
                    reason = crossed(spec, site, report) if report.get("version") == current.version else None
                    if reason is not None:
                        out.append(Drifted(app, name, site, reason))
                        break
        return out

    def check(self, apps: Iterable[str]) -> list[ModelVersion]:
        """Train the next version of every model of ``apps`` whose sites report drift; return the versions made."""
        made = []
        for drift in self.drifted(apps):
            self._tried[(drift.app, drift.model)] = self.clock()
            log.warning("model %s of app %s: %s; training a new version", drift.model, drift.app, drift.reason)
            try:
                made.append(self.service.train(drift.app, drift.model, drift.reason))
            except (TrainingFailed, TrainingBusy, NoSpark) as exc:
                log.warning("retraining model %s of app %s on drift failed: %s", drift.model, drift.app, exc)
        return made
