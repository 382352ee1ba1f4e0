"""Models trained at the hub with pyspark.ml score the same at the edge, in plain Python, as in Spark."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from hub.models.training import PREDICTION, TrainingFailed, train
from spanedge import App
from spanedge.models.portable import decode_model, encode_model
from spanedge.models.stats import psi

pytestmark = pytest.mark.timeout(600)

FEATURES = ("rms", "peak", "temp_c")


def _rows(n: int = 1500, seed: int = 3) -> list[dict[str, float]]:
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        centre = rnd.choice(((0.0, 0.0, 20.0), (3.0, 1.0, 40.0), (-2.0, 4.0, 60.0)))
        rms, peak, temp = (c + rnd.gauss(0, 0.7) for c in centre)
        margin = 1.5 * rms - 0.8 * peak + 0.05 * (temp - 40)
        failed = 1.0 if rnd.random() < 1 / (1 + math.exp(-margin)) else 0.0
        rows.append(
            {
                "rms": rms,
                "peak": peak,
                "temp_c": temp,
                "failed": failed,
                "wear": 2 * rms - peak + 0.1 * temp + rnd.gauss(0, 0.3),
                "event_time": 1000.0 + i,
            }
        )
    return rows


def _app(algorithm: str, label: str | None, **params: int) -> Any:
    app = App("plant")
    labelled = app.source("labelled")
    return app.model(
        "m", algorithm=algorithm, features=list(FEATURES), label=label, train_on=labelled, min_rows=500, **params
    )


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    """The generated labelled records as a DataFrame."""
    rows = _rows()
    return spark.createDataFrame(
        rows, "rms double, peak double, temp_c double, failed double, wear double, event_time double"
    )


CASES = [
    ("logistic_regression", "failed", {}),
    ("linear_regression", "wear", {}),
    ("kmeans", None, {"k": 3}),
    ("random_forest", "failed", {"trees": 15, "depth": 5}),
    ("random_forest_regression", "wear", {"trees": 10, "depth": 6}),
]


@pytest.mark.parametrize(("algorithm", "label", "params"), CASES, ids=[c[0] for c in CASES])
def test_edge_predictions_equal_spark(
    spark: Any, frame: Any, algorithm: str, label: str | None, params: dict[str, int]
) -> None:
    spec = _app(algorithm, label, **params)
    trained = train(spark, spec, frame, app="plant", version=1, reason="test")
    version = trained.version
    assert version.rows + version.held_out == 1500
    assert version.rows >= 500
    assert version.held_out > 100
    assert version.time_from is not None
    assert version.time_to is not None
    assert 1000.0 <= version.time_from < version.time_to <= 2499.0
    assert version.metrics
    assert [s.field for s in version.stats] == list(FEATURES)
    for s in version.stats:
        assert len(s.shares) == len(s.edges) + 1
        assert math.isclose(sum(s.shares), 1.0, rel_tol=1e-9)
        assert psi(s.shares, s.shares) == 0.0
    # the portable form survives its JSON round trip, checked
    params_back = decode_model(encode_model(version.params), len(FEATURES))
    assert params_back == version.params
    scored = trained.fitted.transform(trained.held_out).collect()
    assert len(scored) == version.held_out
    compared = 0
    for row in scored:
        record = {f: row[f] for f in FEATURES}
        edge = params_back.score([record[f] for f in FEATURES])
        assert edge == version.score(record)
        if algorithm in ("logistic_regression", "random_forest"):
            spark_p = float(row["probability"][1])
            assert math.isclose(edge, spark_p, rel_tol=1e-9, abs_tol=1e-12), (edge, spark_p)
            assert (edge > 0.5) == (row[PREDICTION] == 1.0) or math.isclose(edge, 0.5, rel_tol=1e-9)
        elif algorithm == "kmeans":
            assert int(edge) == row[PREDICTION]
        else:
            assert math.isclose(edge, row[PREDICTION], rel_tol=1e-9, abs_tol=1e-12), (edge, row[PREDICTION])
        compared += 1
    assert compared == version.held_out


def test_too_few_rows_is_refused_with_the_fix(spark: Any, frame: Any) -> None:
    app = App("plant")
    spec = app.model(
        "m",
        algorithm="linear_regression",
        features=list(FEATURES),
        label="wear",
        train_on=app.source("labelled"),
        min_rows=5000,
    )
    with pytest.raises(
        TrainingFailed, match="fewer than min_rows=5000; wait for more labelled records or lower min_rows"
    ):
        train(spark, spec, frame, app="plant", version=1, reason="test")


def test_a_classifier_needs_a_0_1_label(spark: Any, frame: Any) -> None:
    spec = _app("logistic_regression", "wear")
    with pytest.raises(TrainingFailed, match="must take the values 0 and 1"):
        train(spark, spec, frame, app="plant", version=1, reason="test")
