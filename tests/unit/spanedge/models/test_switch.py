"""Model topics, the event-time switch of installed versions, and the hub's shelf of versions sent out."""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from spanedge import App, sinks
from spanedge.models import shelf as shelf_module
from spanedge.models.envelope import model_filter, model_topic, parse_model_topic
from spanedge.models.installed import INSTALLED, InstalledModels
from spanedge.models.predict import ModelNotReady, Predictor
from spanedge.models.shelf import Shelf
from tests.models import make_version


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    INSTALLED.remove("plant")
    yield
    INSTALLED.remove("plant")


def _p(rms: float, peak: float, bias: float) -> float:
    return 1.0 / (1.0 + math.exp(-(rms - peak + bias)))


def test_a_model_topic_is_the_sites_own_and_parses_back() -> None:
    topic = model_topic("truck-7", "plant", "wear")
    assert topic == "spanedge/v1/control/truck-7/model/plant/wear"
    assert model_filter("truck-7") == "spanedge/v1/control/truck-7/model/#"
    assert parse_model_topic(topic, "truck-7") == ("plant", "wear")
    assert parse_model_topic(topic, "truck-9") is None
    assert parse_model_topic("spanedge/v1/control/truck-7/model/plant", "truck-7") is None
    assert parse_model_topic("spanedge/v1/control/truck-7/model/plant/wear/x", "truck-7") is None
    assert parse_model_topic("spanedge/v1/control/truck-7/plan", "truck-7") is None


def test_a_version_switches_in_at_its_own_switch_time() -> None:
    installed = InstalledModels()
    installed.install(make_version(number=1, switch_at=10.0))
    installed.install(make_version(number=2, bias=5.0, switch_at=50.0))
    picked = {t: installed.pick("plant", "wear", t) for t in (0.0, 49.999, 50.0, 80.0)}
    assert {t: v.version for t, v in picked.items() if v is not None} == {0.0: 1, 49.999: 1, 50.0: 2, 80.0: 2}
    assert installed.held("plant", "wear") == 2
    assert installed.installed() == {("plant", "wear"): [(10.0, 1), (50.0, 2)]}


def test_a_version_without_a_switch_scores_from_the_start() -> None:
    installed = InstalledModels()
    installed.install(make_version(number=1))
    assert installed.installed() == {("plant", "wear"): [(-math.inf, 1)]}


def _write(root: Path, number: int, switch_at: float | None, bias: float = 0.0) -> None:
    folder = root / "plant" / "wear"
    folder.mkdir(parents=True, exist_ok=True)
    version = make_version(number=number, bias=bias, switch_at=switch_at)
    (folder / f"v{number}.json").write_bytes(msgspec.json.encode(version))


def test_the_shelf_takes_only_the_versions_sent_out_and_sees_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    shelf = Shelf(tmp_path)
    shelf._clock = lambda: now[0]
    assert shelf.pick("plant", "wear", 0.0) is None  # no folder yet
    _write(tmp_path, 1, switch_at=0.0)
    _write(tmp_path, 2, switch_at=None)  # trained, not sent: never scored with
    now[0] += shelf_module.REFRESH_S
    v = shelf.pick("plant", "wear", 1000.0)
    assert v is not None
    assert v.version == 1
    _write(tmp_path, 2, switch_at=30.0, bias=3.0)  # now sent, switching in at 30
    assert shelf.pick("plant", "wear", 1000.0).version == 1  # type: ignore[union-attr]  # not looked again yet
    now[0] += shelf_module.REFRESH_S
    assert shelf.pick("plant", "wear", 29.0).version == 1  # type: ignore[union-attr]
    assert shelf.pick("plant", "wear", 30.0).version == 2  # type: ignore[union-attr]


def test_a_damaged_version_file_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _write(tmp_path, 1, switch_at=0.0)
    (tmp_path / "plant" / "wear" / "v2.json").write_text("{not json")
    shelf = Shelf(tmp_path)
    assert shelf.pick("plant", "wear", 5.0).version == 1  # type: ignore[union-attr]
    assert "v2.json cannot be read" in caplog.text


def _predictor() -> Predictor:
    app = App("plant")
    labelled = app.source("labelled")
    wear = app.model("wear", algorithm="logistic_regression", features=["rms", "peak"], label="f", train_on=labelled)
    scored = app.source("features", time_field="t").predict(wear, output="p", name="score")
    scored.sink(sinks.memory("out"))
    func = app.operators["score"].func
    assert isinstance(func, Predictor)
    return func


def test_the_hubs_predictor_scores_by_event_time_with_the_versions_on_its_shelf(tmp_path: Path) -> None:
    _write(tmp_path, 1, switch_at=0.0)
    _write(tmp_path, 2, switch_at=50.0, bias=2.0)
    at_hub = pickle.loads(pickle.dumps(_predictor().at_hub(str(tmp_path))))  # as Spark ships it
    record = {"rms": 1.0, "peak": 0.5}
    assert at_hub(record, 49.0)["p"] == _p(1.0, 0.5, 0.0)
    assert at_hub(record, 50.0)["p"] == _p(1.0, 0.5, 2.0)
    assert repr(at_hub) == repr(_predictor())  # the query's fingerprint does not change


def test_a_predictor_at_a_hub_with_no_version_sent_says_so(tmp_path: Path) -> None:
    at_hub = _predictor().at_hub(str(tmp_path / "empty"))
    with pytest.raises(ModelNotReady, match="has no trained version here yet"):
        at_hub({"rms": 1.0, "peak": 0.5}, 1.0)
