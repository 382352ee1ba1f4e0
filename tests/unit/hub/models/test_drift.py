"""Retraining on drift: a site's report about the version in force crossing a threshold trains the next one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from hub.models.distribution import ModelDistributor
from hub.models.drift import MIN_RETRAIN_S, DriftWatch, crossed
from hub.models.link import ModelLink
from hub.models.registry import ModelRegistry
from hub.models.service import ModelService, TrainingBusy
from spanedge import App, sinks
from spanedge.models.version import ModelVersion
from spanedge.testing import site_plan
from spanedge.wire.heartbeat import Heartbeat
from tests.keys import KEY
from tests.models import make_version


class Trainer(ModelService):
    """Makes the next version without Spark (the integration tests train on Spark)."""

    def __init__(self, registry: ModelRegistry, app: App, clock: list[float]) -> None:
        super().__init__(registry, {"plant": app}.__getitem__, Path("/nonexistent"), None, clock=lambda: clock[0])
        self.reasons: list[str] = []
        self.busy = False

    def train(self, app: str, model: str, reason: str) -> ModelVersion:
        if self.busy:
            raise TrainingBusy("another model is training")
        self.reasons.append(reason)
        number = self.registry.next_number(app, model)
        version = msgspec.structs.replace(make_version(number=number), trained_at=self.clock())
        self.registry.save(version)
        return self.on_trained(version) if self.on_trained is not None else version


def _publish(messages: Sequence[tuple[str, bytes]]) -> list[bool]:
    return [True] * len(messages)


def _setup(tmp_path: Path) -> tuple[Trainer, DriftWatch, dict[str, Heartbeat], list[float]]:
    app = App("plant")
    labelled = app.source("labelled")
    wear = app.model(
        "wear",
        algorithm="logistic_regression",
        features=["rms", "peak"],
        label="failed",
        train_on=labelled,
        max_psi=0.2,
        max_error=0.3,
    )
    app.source("features", time_field="t").predict(wear, output="p", name="score").sink(sinks.memory("o"), name="o")
    plan = site_plan(app, {"features": ["a", "b"], "labelled": ["a"]}, "cloud")
    clock = [10_000.0]
    registry = ModelRegistry(tmp_path, KEY)
    service = Trainer(registry, app, clock)
    link = ModelLink(ModelDistributor(registry, _publish), service.app_of)
    link.plans_of = lambda name: (plan,)
    beats: dict[str, Heartbeat] = {}
    link.beat_of = beats.get
    link.clock = lambda: clock[0]
    service.on_trained = link.release
    service.train("plant", "wear", "on demand")  # version 1, sent out
    clock[0] += MIN_RETRAIN_S
    return service, DriftWatch(service, link, clock=lambda: clock[0]), beats, clock


def _beat(site: str, **report: float) -> Heartbeat:
    return Heartbeat(site=site, models={"plant": {"wear": {"held": 1.0, "version": 1.0, "records": 500.0, **report}}})


def test_drift_over_the_threshold_at_one_site_trains_and_sends_the_next_version(tmp_path: Path) -> None:
    service, watch, beats, clock = _setup(tmp_path)
    beats["a"] = _beat("a", psi=0.05, **{"psi.rms": 0.05, "psi.peak": 0.01})
    assert watch.check(["plant"]) == []
    beats["b"] = _beat("b", psi=0.41, **{"psi.rms": 0.41, "psi.peak": 0.02})
    assert watch.reports("plant", "wear").keys() == {"a", "b"}
    made = watch.check(["plant"])
    assert [v.version for v in made] == [2]
    assert service.reasons[-1] == "drift at b: PSI 0.410 of 'rms' over 0.2"
    assert made[0].switch_at is not None  # sent out
    assert watch.check(["plant"]) == []  # b's report is about version 1, no longer the one in force
    clock[0] += MIN_RETRAIN_S
    beats["b"] = Heartbeat(site="b", models={"plant": {"wear": {"version": 2.0, "records": 500.0, "error": 0.5}}})
    assert [v.version for v in watch.check(["plant"])] == [3]
    assert service.reasons[-1] == "drift at b: live error 0.500 over 0.3"


def test_a_model_retrains_at_most_once_a_while_and_a_failed_training_waits_as_long(tmp_path: Path) -> None:
    service, watch, beats, clock = _setup(tmp_path)
    beats["a"] = _beat("a", psi=0.9, **{"psi.rms": 0.9})
    service.busy = True
    assert watch.check(["plant"]) == []  # tried, failed
    service.busy = False
    assert watch.check(["plant"]) == []  # not again so soon
    clock[0] += MIN_RETRAIN_S
    assert [v.version for v in watch.check(["plant"])] == [2]


def test_too_few_records_report_no_psi_and_call_for_nothing(tmp_path: Path) -> None:
    _, watch, beats, _ = _setup(tmp_path)
    beats["a"] = Heartbeat(site="a", models={"plant": {"wear": {"held": 1.0, "version": 1.0, "records": 10.0}}})
    assert watch.check(["plant"]) == []
    assert watch.check(["other"]) == []


def test_crossed_names_the_worst_feature() -> None:
    app = App("plant")
    spec = app.model("m", algorithm="kmeans", features=["x", "y"], train_on=app.source("s"))
    assert crossed(spec, "a", {"psi": 0.3, "psi.x": 0.1, "psi.y": 0.3}) == "drift at a: PSI 0.300 of 'y' over 0.25"
    assert crossed(spec, "a", {"psi": 0.2}) is None


def test_the_hubs_model_service_is_wired_to_its_plans_heartbeats_and_control(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from hub.api.model_routes import model_sites
    from hub.models.assembly import hub_models

    app = App("plant")
    labelled = app.source("labelled")
    wear = app.model("wear", algorithm="logistic_regression", features=["rms", "peak"], label="f", train_on=labelled)
    app.source("features", time_field="t").predict(wear, output="p", name="score").sink(sinks.memory("o"), name="o")
    plan = site_plan(app, {"features": ["a"], "labelled": ["a"]}, "cloud")
    sent: list[str] = []
    hub = SimpleNamespace(
        state_dir=tmp_path,
        config=SimpleNamespace(plan_key=KEY, check_interval_s=2.0, min_replan_interval_s=5.0),
        engine=None,
        control=SimpleNamespace(publish_all=lambda messages: [sent.append(t) is None for t, _ in messages]),
        coordinator=SimpleNamespace(plans_of=lambda name: (plan,)),
        registry=SimpleNamespace(last_heartbeat=lambda site: _beat(site, psi=0.01)),
        distributor=SimpleNamespace(before_send=None),
    )
    service = hub_models(hub, {"plant": app}.__getitem__)
    assert service.spark is None
    assert service.check_every_s == 2.0
    assert hub.distributor.before_send({}) == {}  # the link's sync, after the service follows the apps' logs
    assert not (tmp_path / "ingest").exists()  # a hub without Spark trains nothing and reads no log
    assert service.on_trained is not None
    service.registry.save(make_version())
    service.on_trained(make_version())
    assert sent == ["spanedge/v1/control/a/model/plant/wear"]
    assert model_sites(service, "plant", "wear") == {
        "a": {"sent": 1, "held": 1, "report": {"held": 1.0, "version": 1.0, "records": 500.0, "psi": 0.01}}
    }


def test_a_scheduled_model_is_due_once_its_newest_version_is_old_enough(tmp_path: Path) -> None:
    app = App("plant")
    labelled = app.source("labelled")
    app.model(
        "wear", algorithm="logistic_regression", features=["rms", "peak"], label="f", train_on=labelled, every="1m"
    )
    clock = [1000.0]
    registry = ModelRegistry(tmp_path, KEY)
    service = ModelService(registry, {"plant": app}.__getitem__, tmp_path / "ingest", None, clock=lambda: clock[0])
    assert service.due(["plant", "gone"]) == [("plant", "wear")]  # never trained
    registry.save(msgspec.structs.replace(make_version(number=1), trained_at=1000.0))
    assert service.due(["plant"]) == []
    clock[0] += 60.0
    assert service.due(["plant"]) == [("plant", "wear")]
    registry.save(msgspec.structs.replace(make_version(number=2), trained_at=1060.0))
    assert service.due(["plant"]) == []  # the newer version is read
