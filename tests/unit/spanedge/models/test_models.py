"""The model declaration, the predict operator at the edge, the portable form and the signed envelope."""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator

import msgspec
import orjson
import pytest

from spanedge import App, sinks
from spanedge.errors import InvalidDataflow
from spanedge.models.envelope import RefusedModel, open_model, seal_model
from spanedge.models.portable import Forest, InvalidModel, Logistic, Tree, decode_model
from spanedge.models.predict import INSTALLED
from spanedge.models.stats import FeatureStats, psi, shares_of
from spanedge.models.version import ModelVersion
from spanedge.operators import Kind
from spanedge.testing import run_edge
from tests.keys import KEY, ROGUE, TRUSTED


def _version(app: str = "plant", model: str = "wear", number: int = 1, bias: float = 0.0) -> ModelVersion:
    stats = FeatureStats(field="rms", mean=0.0, std=1.0, min=-3.0, max=3.0, edges=[0.0], shares=[0.5, 0.5])
    return ModelVersion(
        app=app,
        model=model,
        version=number,
        algorithm="logistic_regression",
        features=["rms", "peak"],
        label="failed",
        trained_at=1.0,
        reason="test",
        rows=10,
        held_out=2,
        time_from=0.0,
        time_to=9.0,
        metrics={"auc": 0.9},
        stats=[stats],
        params=Logistic(coefficients=[1.0, -1.0], intercept=bias),
    )


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    INSTALLED.remove("plant")
    yield
    INSTALLED.remove("plant")


def _app() -> tuple[App, object]:
    app = App("plant")
    labelled = app.source("labelled")
    features = app.source("features", time_field="t")
    wear = app.model(
        "wear", algorithm="logistic_regression", features=["rms", "peak"], label="failed", train_on=labelled, every="1h"
    )
    scored = features.predict(wear, output="p_fail", name="score")
    scored.sink(sinks.memory("out"), name="out")
    return app, wear


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"algorithm": "svm"}, "unknown algorithm 'svm'; use one of logistic_regression"),
        ({"features": []}, "features must be a non-empty list"),
        ({"features": "rms"}, "features must be a non-empty list"),
        ({"every": "soon"}, "bad every: expected a duration"),
        ({"every": "5s"}, "under a minute"),
        ({"label": None}, "learns from labelled records: pass label="),
        ({"algorithm": "kmeans"}, "learns without labels: drop label="),
        ({"min_rows": 0}, "min_rows must be a whole number"),
        ({"trees": 3}, "has no parameter 'trees'"),
        ({"features": ["rms", "rms"]}, "listed twice"),
        ({"label": "rms"}, "is also a feature"),
        ({"history": "forever"}, "bad history: expected a duration"),
        ({"history": "30s"}, "history='30s' is under a minute"),
        ({"history_rows": 0}, "history_rows must be a whole number from 1 to"),
        ({"history_rows": 50, "min_rows": 100}, "history_rows=50 keeps fewer records than min_rows=100 needs"),
    ],
)
def test_a_bad_declaration_says_what_and_how(kwargs: dict[str, object], message: str) -> None:
    app = App("plant")
    args: dict[str, object] = {"algorithm": "logistic_regression", "features": ["rms", "peak"], "label": "failed"}
    args.update(kwargs)
    with pytest.raises(InvalidDataflow, match=message) as err:
        app.model("wear", train_on=app.source("labelled"), **args)  # type: ignore[arg-type]
    assert "test_models.py:" in str(err.value)


def test_the_history_defaults_to_a_week_or_100_000_rows_and_takes_a_duration() -> None:
    app = App("plant")
    labelled = app.source("labelled")
    args: dict[str, object] = {"algorithm": "logistic_regression", "features": ["rms"], "label": "failed"}
    plain = app.model("plain", train_on=labelled, **args)  # type: ignore[arg-type]
    big = app.model("big", train_on=labelled, min_rows=200_000, **args)  # type: ignore[arg-type]
    set_ = app.model("set", train_on=labelled, history="2h", history_rows=1500, **args)  # type: ignore[arg-type]
    assert (plain.history, plain.history_rows) == (7 * 86400.0, 100_000)
    assert big.history_rows == 200_000  # never fewer than a training needs
    assert (set_.history, set_.history_rows) == (7200.0, 1500)
    assert set_.to_dict()["history_s"] == 7200.0


def test_predict_is_in_the_dag_with_its_cost_and_size() -> None:
    app, wear = _app()
    op = app.graph().op("score")
    assert op.kind is Kind.PREDICT
    assert op.record_level
    assert op.model is wear
    assert op.output == "p_fail"
    assert op.cost == wear.cost_per_record  # type: ignore[attr-defined]
    assert wear.size_bytes > 0  # type: ignore[attr-defined]


def test_predict_refuses_a_model_of_another_app_and_a_bad_output() -> None:
    _, wear = _app()
    other = App("other")
    with pytest.raises(InvalidDataflow, match="expected a model declared with app.model"):
        other.source("s").predict(wear, output="p")  # type: ignore[arg-type]
    app, wear = _app()
    with pytest.raises(InvalidDataflow, match="would overwrite feature 'rms'"):
        app.source("more").predict(wear, output="rms")  # type: ignore[arg-type]


def test_declared_fields_are_checked_against_the_features() -> None:
    app = App("plant")
    labelled = app.source("labelled", schema="rms DOUBLE, failed DOUBLE")
    wear = app.model(
        "wear", algorithm="logistic_regression", features=["rms", "peak"], label="failed", train_on=labelled
    )
    labelled.predict(wear, output="p").sink(sinks.memory("m"))
    with pytest.raises(InvalidDataflow, match="lack 'peak'"):
        app.graph()


def test_the_edge_scores_with_the_version_of_each_records_event_time() -> None:
    app, _ = _app()
    INSTALLED.install(_version(number=1, bias=0.0))
    INSTALLED.install(_version(number=2, bias=100.0), switch_at=50.0)
    records = [{"t": t, "rms": 1.0, "peak": 1.0} for t in (10.0, 49.0, 50.0, 60.0)]
    result = run_edge(app, {"features": records})
    assert not result.dlq
    got = [(r["t"], r["p_fail"]) for r in result.sinks["out"]]
    assert got == [(10.0, 0.5), (49.0, 0.5), (50.0, 1.0), (60.0, 1.0)]


def test_without_a_version_or_with_a_bad_record_it_dead_letters_with_the_reason() -> None:
    app, _ = _app()
    result = run_edge(app, {"features": [{"t": 1.0, "rms": 1.0, "peak": 2.0}]})
    assert result.sinks.get("out", []) == []
    assert "has no trained version here yet; train it (POST /apps/plant/models/wear/train)" in result.dlq[0].reason
    INSTALLED.install(_version())
    result = run_edge(app, {"features": [{"t": 1.0, "rms": "high", "peak": 2.0}, {"t": 2.0, "rms": 1.0}]})
    assert [d.reason.split(": ", 1)[1] for d in result.dlq] == [
        "model 'wear' needs feature 'rms' as a finite number, got 'high'",
        "model 'wear' needs feature 'peak' as a finite number, got missing",
    ]


def test_a_forest_scores_by_its_splits() -> None:
    tree = Tree(feature=[0, -1, -1], threshold=[0.5, 0, 0], left=[1, 0, 0], right=[2, 0, 0], value=[0, 0.2, 0.8])
    forest = Forest(trees=[tree, tree], classifier=True)
    assert forest.score([0.5]) == pytest.approx(0.2)
    assert forest.score([0.6]) == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[]", "Expected `object`"),
        (b'{"type":"logistic","coefficients":[1.0],"intercept":0}', "has 1 coefficients for 2 features"),
        (
            b'{"type":"forest","classifier":true,"trees":[[[0],[0.5],[0],[0],[1.0]]]}',
            "children 0, 0 are not later nodes",
        ),
        (b'{"type":"forest","classifier":true,"trees":[[[7,-1,-1],[0,0,0],[1,0,0],[2,0,0],[0,0,0]]]}', "feature 7"),
        (b"nope", "is not JSON"),
    ],
)
def test_a_malformed_model_is_refused_with_the_part(data: bytes, message: str) -> None:
    with pytest.raises(InvalidModel, match=message):
        decode_model(data, 2)


def test_psi_is_zero_for_the_same_bins_and_grows_with_a_shift() -> None:
    edges = [0.0, 1.0]
    base = shares_of([-1.0, 0.5, 2.0] * 10, edges)
    assert base == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    assert psi(base, base) == 0.0
    shifted = shares_of([2.0] * 30, edges)
    assert psi(base, shifted) > 0.25
    assert math.isfinite(psi(base, shifted))


def test_a_signed_version_opens_and_every_forgery_is_refused() -> None:
    sealed = seal_model(_version(number=3), KEY)
    assert open_model(sealed, TRUSTED, app="plant", model="wear", held=2).version == 3
    outer = orjson.loads(sealed)
    unsigned = outer["payload"].encode()
    with pytest.raises(RefusedModel, match="not a signed envelope"):
        open_model(unsigned, TRUSTED, app="plant", model="wear")
    tampered = dict(outer, payload=outer["payload"].replace('"intercept":0.0', '"intercept":9.0'))
    assert tampered != outer
    with pytest.raises(RefusedModel, match="altered or forged"):
        open_model(orjson.dumps(tampered), TRUSTED, app="plant", model="wear")
    bad_sig = dict(outer, sig=base64.b64encode(b"\0" * 64).decode())
    with pytest.raises(RefusedModel, match="altered or forged"):
        open_model(orjson.dumps(bad_sig), TRUSTED, app="plant", model="wear")
    with pytest.raises(RefusedModel, match="only key ids"):
        open_model(seal_model(_version(), ROGUE), TRUSTED, app="plant", model="wear")
    with pytest.raises(RefusedModel, match="not newer than version 3"):
        open_model(sealed, TRUSTED, app="plant", model="wear", held=3)
    with pytest.raises(RefusedModel, match="holds model 'wear' of app 'other'"):
        open_model(seal_model(_version(app="other"), KEY), TRUSTED, app="plant", model="wear")
    with pytest.raises(RefusedModel, match="holds model 'gear' of app 'plant'"):
        open_model(seal_model(_version(model="gear"), KEY), TRUSTED, app="plant", model="wear")


def test_a_model_signature_is_not_a_plan_signature() -> None:
    from spanedge.errors import InvalidPlan
    from spanedge.signing import verify_plan

    with pytest.raises(InvalidPlan, match="altered or forged"):
        verify_plan(seal_model(_version(), KEY), TRUSTED)


def test_a_version_round_trips_as_json() -> None:
    version = _version()
    assert msgspec.json.decode(msgspec.json.encode(version), type=ModelVersion) == version
