"""The drift a site measures: PSI of the scored features over a sliding window, and the live error where labels come."""

from __future__ import annotations

import random
from collections.abc import Iterator

import msgspec
import pytest

from spanedge import App, sinks
from spanedge.errors import InvalidDataflow
from spanedge.models.drift import MIN_RECORDS, SCORED, DriftBook, DriftWindow
from spanedge.models.installed import INSTALLED
from spanedge.models.stats import psi
from spanedge.wire.heartbeat import Heartbeat, decode, encode
from tests.models import make_version


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    INSTALLED.remove("plant")
    SCORED.remove("plant")
    yield
    INSTALLED.remove("plant")
    SCORED.remove("plant")


def _like_training(rnd: random.Random, shift: float = 0.0) -> list[float]:
    # the training shares of tests.models are 0.2, 0.3, 0.3, 0.2 around the edges -1, 0, 1
    def one() -> float:
        u = rnd.random()
        return -1.5 if u < 0.2 else (-0.5 if u < 0.5 else (0.5 if u < 0.8 else 1.5))

    return [one() + shift, one()]


def test_records_like_the_training_ones_do_not_drift_and_a_shift_does() -> None:
    rnd = random.Random(1)
    window = DriftWindow(make_version(), size=500)
    for _ in range(MIN_RECORDS - 1):
        window.add(_like_training(rnd), 0.5)
    assert "psi" not in window.report()  # too few records yet
    for _ in range(500):
        window.add(_like_training(rnd), 0.5)
    calm = window.report()
    assert calm["records"] == 500
    assert calm["psi"] < 0.05
    for _ in range(500):  # the window slides: only shifted records are left in it
        window.add(_like_training(rnd, shift=2.0), 0.5)
    shifted = window.report()
    assert shifted["psi.rms"] > 1.0
    assert shifted["psi.peak"] < 0.05
    assert shifted["psi"] == shifted["psi.rms"]
    # shifted by 2, the records fall in the last two bins only, a fifth and four fifths of them
    assert shifted["psi.rms"] == pytest.approx(psi([0.2, 0.3, 0.3, 0.2], [0.0, 0.0, 0.2, 0.8]), rel=0.2)


def test_the_live_error_counts_the_records_that_carry_their_label() -> None:
    window = DriftWindow(make_version(), size=200)
    for i in range(400):
        window.add([0.0, 0.0], 0.9, label=1 if i % 4 else 0)  # a quarter on the wrong side of 0.5
        window.add([0.0, 0.0], 0.9)  # no label: not counted
    report = window.report()
    assert report["labelled"] == 200
    assert report["error"] == pytest.approx(0.25)


def test_a_new_version_starts_a_new_window() -> None:
    book = DriftBook(size=100)
    for _ in range(150):
        book.observe(make_version(number=1), [3.0, 0.0], 0.5)
    assert book.report()["plant"]["wear"]["version"] == 1
    assert book.report()["plant"]["wear"]["psi"] > 1.0
    book.observe(make_version(number=2), [0.0, 0.0], 0.5)
    assert book.report() == {"plant": {"wear": {"version": 2.0, "records": 1.0}}}


def test_a_predict_at_a_site_feeds_the_drift_of_what_it_scores() -> None:
    app = App("plant")
    labelled = app.source("labelled")
    wear = app.model(
        "wear", algorithm="logistic_regression", features=["rms", "peak"], label="failed", train_on=labelled
    )
    app.source("features", time_field="t").predict(wear, output="p", name="score").sink(sinks.memory("o"))
    INSTALLED.install(make_version())
    func = app.operators["score"].func
    assert func is not None
    for _ in range(MIN_RECORDS):
        func({"rms": 2.5, "peak": 0.0, "failed": 0}, 1.0)
    report = SCORED.report()["plant"]["wear"]
    assert report["records"] == MIN_RECORDS
    assert report["psi.rms"] > 1.0
    assert report["error"] == 1.0  # p > 0.5 each time, label 0


def test_the_heartbeat_carries_the_model_reports() -> None:
    beat = Heartbeat(site="a", models={"plant": {"wear": {"held": 2.0, "version": 2.0, "psi": 0.3}}})
    back, dropped = decode(encode(beat))
    assert back == beat
    assert dropped == []
    bad = msgspec.json.decode(encode(beat))
    bad["models"]["plant"]["wear"]["psi"] = "high"
    back, dropped = decode(bad)
    assert back.models == {"plant": {"wear": {"held": 2.0, "version": 2.0}}}  # only the bad figure is left out
    assert dropped == ["models.plant.wear.psi: Expected `float`, got `str`"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_psi": 0}, "max_psi must be a number over 0"),
        ({"max_error": "x"}, "max_error must be a number over 0"),
        ({"algorithm": "kmeans", "label": None, "max_error": 0.2}, "has no label to measure an error against"),
    ],
)
def test_bad_drift_thresholds_are_refused(kwargs: dict[str, object], message: str) -> None:
    app = App("plant")
    args: dict[str, object] = {"algorithm": "logistic_regression", "features": ["rms"], "label": "failed"}
    args.update(kwargs)
    with pytest.raises(InvalidDataflow, match=message):
        app.model("wear", train_on=app.source("labelled"), **args)  # type: ignore[arg-type]
