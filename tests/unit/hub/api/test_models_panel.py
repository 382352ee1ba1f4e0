"""The dashboard's model panel: newest versions first, at most MAX_VERSIONS, nothing without a service or app."""

from __future__ import annotations

from pathlib import Path

from hub.api.dashboard.models_panel import MAX_VERSIONS, model_panels
from hub.models.registry import ModelRegistry
from hub.models.service import ModelService
from spanedge import App, sinks
from tests.models import make_version


def _service(tmp_path: Path) -> ModelService:
    app = App("plant")
    readings = app.source("readings")
    wear = app.model(
        "wear", algorithm="logistic_regression", features=["rms", "peak"], label="failed", train_on=readings
    )
    readings.predict(wear, output="p").sink(sinks.memory("out"))
    apps = {"plant": app}
    return ModelService(ModelRegistry(tmp_path / "models"), lambda name: apps[name], tmp_path / "ingest", None)


def test_the_newest_versions_come_first_without_their_feature_statistics(tmp_path: Path) -> None:
    service = _service(tmp_path)
    for n in range(1, MAX_VERSIONS + 3):
        service.registry.save(make_version("plant", "wear", n))
    (panel,) = model_panels(service, "plant")
    assert (panel["model"], panel["algorithm"], panel["features"]) == ("wear", "logistic_regression", ["rms", "peak"])
    assert panel["version_count"] == MAX_VERSIONS + 2
    assert [v["version"] for v in panel["versions"]] == list(range(MAX_VERSIONS + 2, 2, -1))
    assert all("stats" not in v for v in panel["versions"])
    assert panel["sites"] == {}  # no link: nothing sent anywhere


def test_no_service_or_no_such_app_is_no_panel(tmp_path: Path) -> None:
    assert model_panels(None, "plant") == []
    assert model_panels(_service(tmp_path), "other") == []
