"""The hub sends each version, signed with its switch time, to the sites whose plans predict with it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from hub.models.distribution import SWITCH_DELAY_S, ModelDistributor, predict_sites, switch_time
from hub.models.link import ModelLink
from hub.models.registry import ModelRegistry
from spanedge import App, sinks
from spanedge.models.envelope import model_topic, open_model
from spanedge.testing import site_plan
from spanedge.wire.heartbeat import Heartbeat
from tests.keys import KEY, TRUSTED
from tests.models import make_version


class Broker:
    """Takes what the hub publishes; acknowledges it unless told not to."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []
        self.ack = True

    def publish_all(self, messages: Sequence[tuple[str, bytes]]) -> list[bool]:
        self.sent.extend(messages)
        return [self.ack] * len(messages)


def _app() -> App:
    app = App("plant")
    labelled = app.source("labelled")
    wear = app.model("wear", algorithm="logistic_regression", features=["rms", "peak"], label="f", train_on=labelled)
    app.model("heat", algorithm="kmeans", features=["rms"], train_on=labelled)
    scored = app.source("features", time_field="t").predict(wear, output="p", name="score")
    scored.sink(sinks.memory("out"), name="out")
    return app


def _plan(app: App, sites: Sequence[str]) -> object:
    return site_plan(app, {"features": list(sites), "labelled": list(sites)}, "cloud")


def test_a_model_goes_to_the_sites_that_predict_with_it() -> None:
    app = _app()
    plan = _plan(app, ["a", "b"])
    assert predict_sites(app, plan) == {"wear": {"a", "b"}, "heat": set()}  # type: ignore[arg-type]
    hub_only = site_plan(app, {"features": ["a"], "labelled": ["a"]}, "cloud", edge=[])
    assert predict_sites(app, hub_only) == {"wear": set(), "heat": set()}


def test_the_switch_is_after_the_newest_event_time_the_sites_reported_done() -> None:
    assert switch_time([100.0, None, 250.0], now=1e9) == 250.0 + SWITCH_DELAY_S
    assert switch_time([None], now=1000.0) == 1000.0 + SWITCH_DELAY_S


def test_a_released_version_carries_its_switch_signed_and_is_sent_to_each_site(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path, KEY)
    broker = Broker()
    distributor = ModelDistributor(registry, broker.publish_all)
    registry.save(make_version(number=1))
    assert distributor.latest_sent("plant", "wear") is None  # trained, not sent
    sent = distributor.release(make_version(number=1), ["b", "a"], switch_at=42.0)
    assert sent.switch_at == 42.0
    assert [t for t, _ in broker.sent] == [model_topic("a", "plant", "wear"), model_topic("b", "plant", "wear")]
    opened = open_model(broker.sent[0][1], TRUSTED, app="plant", model="wear")
    assert opened.switch_at == 42.0  # inside the signature
    assert registry.get("plant", "wear", 1).switch_at == 42.0  # the hub's own queries read it there
    assert distributor.where("plant", "wear") == {"a": 1, "b": 1}


def test_sync_sends_the_newest_version_to_the_sites_that_lack_it(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path, KEY)
    broker = Broker()
    distributor = ModelDistributor(registry, broker.publish_all)
    distributor.release(make_version(number=1), ["a"], switch_at=10.0)
    registry.save(make_version(number=2))  # trained since, not sent: sync sends version 1
    broker.sent.clear()
    assert distributor.sync("plant", {"wear": {"a", "c"}, "heat": {"a"}}) == {"c/wear": "published"}
    assert [t for t, _ in broker.sent] == [model_topic("c", "plant", "wear")]
    assert distributor.sync("plant", {"wear": {"a", "c"}}) == {}  # nothing new
    broker.ack = False
    distributor.release(make_version(number=3), ["a"], switch_at=20.0)
    assert distributor.where("plant", "wear") == {"c": 1}  # a's version 3 is pending
    broker.ack = True
    assert distributor.sync("plant", {"wear": {"a", "c"}}) == {"a/wear": "published", "c/wear": "published"}
    assert distributor.where("plant", "wear") == {"a": 3, "c": 3}


def test_a_hub_without_a_plan_key_cannot_send_versions(tmp_path: Path) -> None:
    distributor = ModelDistributor(ModelRegistry(tmp_path, None), Broker().publish_all)
    with pytest.raises(ValueError, match="has no plan key"):
        distributor.release(make_version(), ["a"], 1.0)


def test_the_link_sends_a_trained_version_after_what_the_sites_reported(tmp_path: Path) -> None:
    app = _app()
    plan = _plan(app, ["a", "b"])
    broker = Broker()
    link = ModelLink(ModelDistributor(ModelRegistry(tmp_path, KEY), broker.publish_all), {"plant": app}.__getitem__)
    link.plans_of = lambda name: (plan,)  # type: ignore[assignment,return-value]
    beats = {"a": Heartbeat(site="a", complete={"plant": 500.0}), "b": Heartbeat(site="b", complete={"plant": None})}
    link.beat_of = beats.get
    link.clock = lambda: 1e9
    sent = link.release(make_version(number=1))
    assert sent.switch_at == 500.0 + SWITCH_DELAY_S
    assert sorted(t for t, _ in broker.sent) == [model_topic(s, "plant", "wear") for s in ("a", "b")]
    broker.sent.clear()
    c_plan = _plan(app, ["a", "b", "c"])
    entry = type("Entry", (), {"plan": c_plan})()
    assert link.sync({"plant": entry}) == {"plant/c/wear": "published"}
    decoded = msgspec.json.decode(broker.sent[0][1])
    assert decoded["kid"] == KEY.key_id
