"""The model routes: a model's declaration and versions, and training refused with the reason."""

from __future__ import annotations

from tests.unit.hub.api.test_app import (  # noqa: F401 - the fixtures
    AUTH,
    client,
    coordinator,
    deploy,
    planner,
    recorder,
)

MODEL_APP = """
from spanedge import App, sinks

app = App("plant")
readings = app.source("readings")
wear = app.model("wear", algorithm="kmeans", features=["temp"], train_on=readings, every="1h", k=3)
readings.predict(wear, output="cluster").sink(sinks.memory("out"))
"""


def test_a_declared_model_is_shown_and_training_without_spark_says_so(client) -> None:  # noqa: F811
    assert deploy(client, MODEL_APP).status_code == 201
    got = client.get("/apps/plant/models/wear", headers=AUTH)
    assert got.status_code == 200
    body = got.json()
    assert body["algorithm"] == "kmeans"
    assert body["params"] == {"k": 3, "max_iter": 20}
    assert body["every_s"] == 3600.0
    assert body["versions"] == []
    assert body["size_estimate_bytes"] > 0
    assert body["max_psi"] == 0.25
    assert body["max_error"] is None
    assert (body["history_s"], body["history_rows"]) == (7 * 86400.0, 100_000)
    assert body["sites"] == {}
    trained = client.post("/apps/plant/models/wear/train", headers=AUTH, json={"reason": "test"})
    assert trained.status_code == 503
    assert "without Spark" in trained.json()["detail"]


def test_unknown_models_and_apps_are_404_with_what_exists(client) -> None:  # noqa: F811
    assert deploy(client, MODEL_APP).status_code == 201
    missing = client.get("/apps/plant/models/gear", headers=AUTH)
    assert missing.status_code == 404
    assert "has no model 'gear' (it has: wear)" in missing.json()["detail"]
    assert client.get("/apps/nope/models/wear", headers=AUTH).status_code == 404
    assert client.get("/apps/plant/models/BAD!", headers=AUTH).status_code == 422
    assert client.post("/apps/plant/models/wear/train", headers=AUTH, json={"reason": ""}).status_code == 422
