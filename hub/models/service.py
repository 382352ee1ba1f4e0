"""Training on demand and on schedule from the records the hub holds for a model's ``train_on`` stream.

The records are those of the model's history (:mod:`hub.models.history`,
under ``<state_dir>/models/<app>/<model>/history/``), which the service
fills from the app's ingest log (:mod:`hub.models.feed`) at each check of the
schedule and before each training; the log itself keeps only what its
readers have not consumed yet. One model trains at a time per hub.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hub.models import feed
from hub.models.history import Bounds, History
from hub.models.registry import ModelRegistry
from hub.models.training import TrainingFailed, train
from spanedge.app import App
from spanedge.errors import SpanEdgeError
from spanedge.models.spec import ModelSpec
from spanedge.models.version import ModelVersion

log = logging.getLogger(__name__)


class TrainingBusy(RuntimeError):
    """Another training runs; try again when it ends."""


class NoSpark(RuntimeError):
    """This hub runs without Spark, so it cannot train."""


class ModelService:
    """The models of the deployed apps: their specs, versions and trainings.

    Args:
        registry: where versions are kept.
        app_of: the loaded :class:`~spanedge.app.App` of a deployed app (``KeyError`` if none).
        ingest_dir: ``<state_dir>/ingest``, the apps' ingest logs.
        spark: the SparkSession to train with (None: no training).
        clock: seconds since the epoch.

    Attributes:
        on_trained: given each new version once it is stored; it returns the version as it was sent out
            (with its switch time, :mod:`hub.models.distribution`). None: versions are only stored.
        link: the :class:`hub.models.link.ModelLink` sending the versions out, if any (for where each runs).
        drift_check: trains the models of the given apps whose sites report drift (:class:`hub.models.drift.DriftWatch`);
            run after the schedule, at each check.
        check_every_s: seconds between two checks of the schedule and of drift (:meth:`start_training`).
        drift_reports: per ``(app, model)``, the last drift report of each site that predicts with it.
    """

    def __init__(
        self,
        registry: ModelRegistry,
        app_of: Callable[[str], App],
        ingest_dir: Path,
        spark: Callable[[], Any] | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Wire the service."""
        self.registry = registry
        self.app_of = app_of
        self.ingest_dir = Path(ingest_dir)
        self.spark = spark
        self.clock = clock
        self._training = threading.Lock()
        self._feeding = threading.Lock()  # the histories change and are read under it
        self._histories: dict[tuple[str, str], History] = {}
        self.on_trained: Callable[[ModelVersion], ModelVersion] | None = None
        self.link: Any = None  # what sends the versions out (hub.models.link.ModelLink), if anything
        self.drift_check: Callable[[list[str]], list[ModelVersion]] | None = None
        self.check_every_s = 60.0
        self._newest: dict[tuple[str, str], tuple[int, float]] = {}  # per model: newest number, its trained_at
        self.drift_reports: Callable[[str, str], dict[str, dict[str, float]]] = lambda app, model: {}

    def spec(self, app: str, model: str) -> ModelSpec:
        """The declaration of ``app``'s ``model``; ``KeyError`` saying what exists if there is none."""
        models = self.app_of(app).models
        if model not in models:
            msg = f"app '{app}' has no model '{model}' (it has: {', '.join(models) or 'none'})"
            raise KeyError(msg)
        return models[model]

    def history(self, app: str, model: str) -> History:
        """The labelled history of ``app``'s ``model``, with the bounds it declares now."""
        spec = self.spec(app, model)
        bounds = Bounds(spec.history, spec.history_rows)
        held = self._histories.get((app, model))
        if held is None:
            held = self._histories[(app, model)] = History(
                self.registry.root / app / model / "history", bounds, self.clock
            )
        held.bounds = bounds
        return held

    def follow(self, apps: list[str]) -> None:
        """Read the ingest log of each of ``apps`` that has a model, so that its labelled records are kept for training.

        A hub without Spark trains nothing and reads no log.
        """
        if self.spark is None:
            return
        for app in apps:
            with contextlib.suppress(KeyError, SpanEdgeError):
                if self.app_of(app).models:
                    feed.follow(self.ingest_dir / app)

    def take_in(self, apps: list[str]) -> int:
        """Copy the new labelled records of ``apps``' logs into their models' histories; return how many were kept."""
        if self.spark is None:
            return 0
        self.follow(apps)
        kept = 0
        with self._feeding:
            for app in apps:
                try:
                    models = self.app_of(app).models
                except (KeyError, SpanEdgeError):
                    continue
                targets: dict[str, list[History]] = {}
                for name, spec in models.items():
                    targets.setdefault(spec.train_on, []).append(self.history(app, name))
                if targets:
                    kept += feed.drain(self.ingest_dir / app, targets)
        return kept

    def unfollow_others(self, apps: list[str]) -> None:
        """Stop reading the logs of the apps that are not in ``apps`` or have no model any more."""
        if not self.ingest_dir.is_dir():
            return
        for folder in sorted(p for p in self.ingest_dir.iterdir() if p.is_dir()):
            try:
                gone = folder.name not in apps or not self.app_of(folder.name).models
            except KeyError:
                gone = True
            if gone and feed.following(folder):
                feed.unfollow(folder)

    def records(self, app: str, model: str) -> list[dict[str, Any]]:
        """The record values ``app``'s ``model`` trains on now, each with its ``event_time``, oldest first."""
        self.take_in([app])
        with self._feeding:
            return self.history(app, model).rows()

    def train(self, app: str, model: str, reason: str) -> ModelVersion:
        """Train and store the next version of ``app``'s ``model``.

        Raises:
            KeyError: no such app or model.
            NoSpark: the hub runs without Spark.
            TrainingBusy: another training runs.
            TrainingFailed: too few records, a bad label.
        """
        spec = self.spec(app, model)
        if self.spark is None:
            msg = "this hub runs without Spark (--no-spark), so it cannot train models; start it with Spark"
            raise NoSpark(msg)
        if not self._training.acquire(blocking=False):
            msg = "another model is training at this hub; try again when it ends"
            raise TrainingBusy(msg)
        try:
            session = self.spark()
            columns = [*spec.features, *([spec.label] if spec.label else []), "event_time"]
            rows = [tuple(_number(r.get(c)) for c in columns) for r in self.records(app, model)]
            if len(rows) < spec.min_rows:
                msg = (
                    f"{spec.describe()}: the hub holds {len(rows)} records of '{spec.train_on}' in the model's "
                    f"history (the last {spec.history:g} s, the newest {spec.history_rows} at most), fewer than "
                    f"min_rows={spec.min_rows}; wait for more labelled records, lower min_rows, "
                    "or raise history= or history_rows="
                )
                raise TrainingFailed(msg)
            schema = ", ".join(f"`{c}` double" for c in columns)
            df = session.createDataFrame(rows, schema)
            number = self.registry.next_number(app, model)
            trained = train(session, spec, df, app=app, version=number, reason=reason, now=self.clock())
            trained.held_out.unpersist()
            self.registry.save(trained.version)
            log.info("trained version %d of model %s of app %s (%s)", number, model, app, reason)
        finally:
            self._training.release()
        if self.on_trained is None:
            return trained.version
        return self.on_trained(trained.version)

    def due(self, apps: list[str]) -> list[tuple[str, str]]:
        """The ``(app, model)`` pairs whose schedule (``every=``) calls for a training now."""
        now = self.clock()
        out = []
        for app in apps:
            try:
                models = self.app_of(app).models
            except KeyError:
                continue
            for name, spec in models.items():
                if spec.every is None:
                    continue
                trained_at = self._trained_at(app, name)
                if trained_at is None or now - trained_at >= spec.every:
                    out.append((app, name))
        return out

    def _trained_at(self, app: str, model: str) -> float | None:
        """When the newest version was trained (None: never), its file read once per version."""
        numbers = self.registry.numbers(app, model)
        if not numbers:
            return None
        held = self._newest.get((app, model))
        if held is None or held[0] != numbers[-1]:
            held = self._newest[(app, model)] = (numbers[-1], self.registry.get(app, model, numbers[-1]).trained_at)
        return held[1]

    def run_schedule(self, apps: list[str]) -> list[ModelVersion]:
        """Train every model that is due, then those drift calls for; a training that fails is logged and retried later."""
        made = []
        try:
            self.take_in(apps)
            self.unfollow_others(apps)
        except OSError:
            log.exception("copying the labelled records of the ingest logs into the models' histories failed")
        for app, model in self.due(apps):
            try:
                made.append(self.train(app, model, "scheduled"))
            except (TrainingFailed, TrainingBusy, NoSpark) as exc:
                log.warning("scheduled training of model %s of app %s skipped: %s", model, app, exc)
        if self.drift_check is not None:
            made += self.drift_check(apps)
        return made

    def start_training(
        self, stop: threading.Event, apps: Callable[[], list[str]], every_s: float | None = None
    ) -> threading.Thread:
        """Start a thread that trains what is due among ``apps()`` every ``every_s`` seconds until ``stop`` is set.

        ``every_s`` defaults to :attr:`check_every_s`.
        """
        every_s = self.check_every_s if every_s is None else every_s

        def keep_training() -> None:
            while not stop.wait(every_s):
                try:
                    self.run_schedule(apps())
                except Exception:
                    log.exception("the scheduled training of models failed")

        thread = threading.Thread(target=keep_training, name="spanedge-models", daemon=True)
        thread.start()
        return thread


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, int | float) else None
