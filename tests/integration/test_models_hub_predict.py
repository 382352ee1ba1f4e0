"""A predict placed at the hub scores in Spark's workers with the versions sent out, switching at the same event time."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hub.engine.engine import Engine
from hub.ingest.consumer import Ingest
from hub.models.registry import ModelRegistry
from spanedge import App, sinks
from spanedge.wire.batch import Record
from tests.integration.hubkit import Collector, Publisher, broker_of, make_plan
from tests.keys import KEY
from tests.polling import wait_for

from .modelkit import fit, records_between, setup, spark_p

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def _app() -> App:
    app = App("plant")
    labelled = app.source("labelled", time_field="t")
    features = app.source("features", time_field="t")
    wear = app.model(
        "wear", algorithm="logistic_regression", features=["rms", "peak", "temp_c"], label="failed", train_on=labelled
    )
    features.predict(wear, output="p_fail", name="score").sink(sinks.mqtt("plant/scored"), name="out")
    return app


def test_the_hubs_predict_scores_as_spark_with_the_version_each_event_time_selects(
    spark: Any, mosquitto: Any, tmp_path: Path
) -> None:
    sites, _ = setup(tmp_path, mosquitto.url, mosquitto.url)
    app = _app()
    plan = make_plan(app, sites, at_hub={"score", "out"}, singletons={"score", "out"})
    assert {a.operator: a.site for a in plan.assignments}["score"] == "cloud"
    spec = app.models["wear"]
    first, second = fit(spark, spec, 1, shift=0.0), fit(spark, spec, 2, shift=1.0)
    t0 = (time.time() - 3600) // 10 * 10
    registry = ModelRegistry(tmp_path / "models", KEY)
    registry.save(msgspec.structs.replace(first.version, switch_at=t0))
    registry.save(msgspec.structs.replace(second.version, switch_at=t0 + 25.0))  # sent out: switches at t0 + 25
    registry.save(msgspec.structs.replace(second.version, version=3, params=first.version.params))  # not sent
    rows = records_between(t0, 0.0, 40.0, seed=21)
    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id="hub-models-test", batch_every=(0.25,))
    ingest.start()
    assert ingest.wait_connected()
    engine = Engine(tmp_path, sites, spark=spark, trigger="1 second", stateless_trigger="250 milliseconds")
    collector = Collector(mosquitto.url, "plant/scored")
    publisher = Publisher(mosquitto.url, app.name)
    try:
        engine.deploy(app, plan)
        records = [Record("truck-7", "features", i, r["t"], None, r) for i, r in enumerate(rows)]
        publisher.send(records, batch=20)
        wait_for(lambda: len(collector.get("plant/scored")) >= len(rows), 120, "every record scored at the hub")
        got = {v["t"]: v["p_fail"] for v in collector.get("plant/scored")}
        assert len(got) == len(rows)
        p1, p2 = spark_p(spark, first.fitted, rows), spark_p(spark, second.fitted, rows)
        for r in rows:
            t = r["t"]
            want = p2[t] if t >= t0 + 25.0 else p1[t]
            assert math.isclose(got[t], want, rel_tol=1e-9, abs_tol=1e-12), (t, got[t], want)
        assert 20 < sum(1 for r in rows if r["t"] >= t0 + 25.0) < len(rows) - 20
    finally:
        publisher.close()
        collector.close()
        engine.stop()
        ingest.stop()
