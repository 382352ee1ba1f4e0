"""Plans carry the hub's leader epoch; an agent refuses a plan of an older epoch than the one it holds."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path

import pytest

from edge_agent.plans import PlanIntake
from hub.control.distribution import PlanDistributor, SiteApp
from spanedge import signing
from spanedge.loader import load_app
from spanedge.plan import Plan
from spanedge.sites import load_sites
from spanedge.testing import local_plan
from tests.keys import KEY, TRUSTED

ROOT = Path(__file__).resolve().parents[4]
APP = ROOT / "examples" / "cold_chain" / "app.py"


def plan() -> Plan:
    return local_plan(load_app(APP), load_sites(ROOT / "examples" / "cold_chain" / "sites.yaml"))


def message(version: int, epoch: int) -> bytes:
    code = APP.read_text()
    body = {
        "site": "truck-7",
        "version": version,
        "issued_at": 1.7e9,
        "apps": [
            {
                "app": "cold-chain",
                "plan": dataclasses.replace(plan(), app_source="", hub_epoch=epoch).to_dict(),
                "source": code,
                "source_sha256": hashlib.sha256(code.encode()).hexdigest(),
            }
        ],
    }
    return signing.sign_plan(body, KEY)


def test_the_epoch_round_trips_and_is_left_out_at_0() -> None:
    p = plan()
    assert "hub_epoch" not in p.to_dict()
    stamped = dataclasses.replace(p, hub_epoch=7)
    assert stamped.to_dict()["hub_epoch"] == 7
    assert Plan.from_dict(stamped.to_dict()).hub_epoch == 7


def test_a_plan_of_an_older_epoch_is_refused_naming_both(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    intake = PlanIntake("truck-7", TRUSTED)
    saved = tmp_path / "plan.signed"
    assert intake.receive(message(10, 2), saved) is not None
    with caplog.at_level(logging.WARNING):
        assert intake.receive(message(11, 1), saved) is None  # a newer version, but from the old leader
    assert "hub leader epoch 1, older than epoch 2" in caplog.text
    assert intake.version == 10
    assert intake.receive(message(12, 3), saved) is not None
    assert intake.epoch == 3


def test_a_restarted_agent_holds_the_epoch_of_its_saved_plan(tmp_path: Path) -> None:
    saved = tmp_path / "plan.signed"
    first = PlanIntake("truck-7", TRUSTED)
    assert first.receive(message(10, 4), saved) is not None
    again = PlanIntake("truck-7", TRUSTED)
    assert again.hold(saved)
    assert again.receive(message(20, 3), saved) is None
    assert again.receive(message(21, 4), saved) is not None


def test_the_distributor_stamps_its_epoch_into_every_plan() -> None:
    sent: list[list[tuple[str, bytes]]] = []

    class Publisher:
        def publish_all(self, messages: list[tuple[str, bytes]]) -> list[bool]:
            sent.append(messages)
            return [True] * len(messages)

    distributor = PlanDistributor(Publisher(), KEY)  # type: ignore[arg-type]
    distributor.epoch = 5
    p = plan()
    distributor.publish({"cold-chain": SiteApp(p, APP.read_text())}, ["truck-7"])
    intake = PlanIntake("truck-7", TRUSTED)
    (plans,) = [intake.accept(payload) for _, payload in sent[0] if "truck-7" in _]
    assert {q.hub_epoch for q in plans} == {5}
