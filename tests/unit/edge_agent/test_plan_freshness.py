"""Plan freshness: an agent never goes back to an older plan, restart or not, and says when its plan expired."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_agent.agent import Agent
from edge_agent.config import AgentConfig
from edge_agent.plans import EXPIRED_WARNING_INTERVAL_S, HubPlans, PlanIntake
from spanedge import signing
from spanedge.loader import load_app
from spanedge.sites import parse_sites
from spanedge.testing import local_plan
from spanedge.wire.heartbeat import decode, encode
from tests.keys import KEY, TRUSTED
from tests.unit.fakes import FakeTransport

ROOT = Path(__file__).resolve().parents[3]
APP = ROOT / "examples" / "cold_chain" / "app.py"
SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:9"}
  truck-7:
    tier: spoke
    broker: "mqtt://127.0.0.1:9"
    streams:
      readings: {topic: "trucks/7/+/temp", rate: 10}
"""


@functools.cache
def _message(version: int, expires_at: float | None = None, issued_at: float = 1.7e9) -> bytes:
    """The hub's signed plan message of truck-7 at ``version`` (cached: signing and loading take a while)."""
    plan = local_plan(load_app(APP), parse_sites(SITES))
    code = APP.read_text()
    entry = {
        "app": "cold-chain",
        "plan": dataclasses.replace(plan, app_source="").to_dict(),
        "source": code,
        "source_sha256": hashlib.sha256(code.encode()).hexdigest(),
    }
    body: dict[str, object] = {"site": "truck-7", "version": version, "issued_at": issued_at, "apps": [entry]}
    if expires_at is not None:
        body["expires_at"] = expires_at
    return signing.sign_plan(body, KEY)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "edge_agent.plans"]


def _restarted(saved: Path, plan_wait: float = 10.0) -> HubPlans:
    """A restarted agent's plans, waiting for the hub's plan with the one saved in ``saved``."""
    hub_plans = HubPlans(PlanIntake("truck-7", TRUSTED), saved, plan_wait, "cloud")
    assert hub_plans.start(now=0.0) is None
    return hub_plans


def test_an_older_plan_during_the_wait_after_a_restart_is_refused_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    saved = tmp_path / "plan.signed"
    saved.write_bytes(_message(5))
    hub_plans = _restarted(saved)
    assert hub_plans.waiting
    assert hub_plans.intake.version == 5  # held from the start, before the wait is over
    with caplog.at_level(logging.INFO, logger="edge_agent.plans"):
        assert hub_plans.receive(_message(3)) is None  # a replayed older plan, retained on the broker
    (warning,) = _warnings(caplog)
    assert "site truck-7: plan version 3 is not newer than the version 5 this agent holds" in warning
    assert hub_plans.intake.version == 5
    assert saved.read_bytes() == _message(5)
    assert hub_plans.resume_when_due(now=5.0) is None  # still waiting: the older plan is no plan from the hub
    resumed = hub_plans.resume_when_due(now=10.0)
    assert resumed is not None
    assert [p.app for p in resumed] == ["cold-chain"]
    assert hub_plans.intake.applied == _message(5)


def test_the_saved_plan_from_the_broker_after_a_restart_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    saved = tmp_path / "plan.signed"
    saved.write_bytes(_message(5))
    hub_plans = _restarted(saved)
    with caplog.at_level(logging.INFO, logger="edge_agent.plans"):
        plans = hub_plans.receive(_message(5))  # the same version and bytes: the hub's plan is the saved one
    assert plans is not None
    assert [p.app for p in plans] == ["cold-chain"]
    assert _warnings(caplog) == []
    assert "is the one saved here" in caplog.text
    assert hub_plans.resume_when_due(now=1.0) is None  # the hub's plan came: the wait ends, nothing to resume
    assert not hub_plans.waiting


def test_a_newer_plan_during_the_wait_replaces_the_saved_one(tmp_path: Path) -> None:
    saved = tmp_path / "plan.signed"
    saved.write_bytes(_message(5))
    hub_plans = _restarted(saved)
    assert hub_plans.receive(_message(6)) is not None
    assert hub_plans.intake.version == 6
    assert saved.read_bytes() == _message(6)


def test_without_a_wait_an_older_plan_is_refused_too(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    saved = tmp_path / "plan.signed"
    saved.write_bytes(_message(5))
    hub_plans = HubPlans(PlanIntake("truck-7", TRUSTED), saved, 0.0, "cloud")
    assert hub_plans.start(now=0.0) is not None
    with caplog.at_level(logging.INFO, logger="edge_agent.plans"):
        assert hub_plans.receive(_message(4)) is None
    assert len(_warnings(caplog)) == 1
    assert hub_plans.intake.version == 5


@settings(database=None, max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=8), st.booleans(), st.sampled_from([0.0, 10.0])),
        min_size=1,
        max_size=12,
    )
)
def test_the_held_version_never_decreases(
    tmp_path_factory: pytest.TempPathFactory, offers: list[tuple[int, bool, float]]
) -> None:
    """Any sequence of offered versions, with restarts (waiting or not) between them: the held version never goes back."""
    saved = tmp_path_factory.mktemp("plans") / "plan.signed"
    hub_plans = HubPlans(PlanIntake("truck-7", TRUSTED), saved, 0.0, "cloud")
    held = -1
    for version, restart, plan_wait in offers:
        if restart:
            hub_plans = HubPlans(PlanIntake("truck-7", TRUSTED), saved, plan_wait, "cloud")
            hub_plans.start(now=0.0)
            assert hub_plans.intake.version == held
        plans = hub_plans.receive(_message(version))
        assert hub_plans.intake.version == max(held, version)
        if version < held:
            assert plans is None
        held = hub_plans.intake.version
        assert plans is None or saved.read_bytes() == _message(held)


def test_an_expired_plan_keeps_running_and_is_warned_about_once_per_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hub_plans = HubPlans(PlanIntake("truck-7", TRUSTED), tmp_path / "plan.signed", 0.0, "cloud")
    assert hub_plans.receive(_message(5, expires_at=1_000.0)) is not None
    with caplog.at_level(logging.WARNING, logger="edge_agent.plans"):
        assert not hub_plans.warn_if_expired(now=999.0)
        assert hub_plans.warn_if_expired(now=1_000.0)
        assert hub_plans.warn_if_expired(now=1_001.0)  # still expired, but warned about a moment ago
        assert hub_plans.warn_if_expired(now=1_000.0 + EXPIRED_WARNING_INTERVAL_S)
    warnings = _warnings(caplog)
    assert len(warnings) == 2
    assert "site truck-7 runs plan version 5, which expired 0 s ago" in warnings[0]
    assert "keeps running" in warnings[0]
    assert hub_plans.receive(_message(6, expires_at=2_000.0)) is not None  # the hub re-issued it
    assert not hub_plans.warn_if_expired(now=1_500.0)


def test_a_plan_without_expiry_never_expires(tmp_path: Path) -> None:
    hub_plans = HubPlans(PlanIntake("truck-7", TRUSTED), tmp_path / "plan.signed", 0.0, "cloud")
    assert hub_plans.receive(_message(5)) is not None
    assert not hub_plans.warn_if_expired(now=1e12)


def test_the_heartbeat_flags_an_expired_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = AgentConfig("truck-7", parse_sites(SITES), tmp_path / "state", trusted_keys=TRUSTED)
    agent = Agent(config, connect=FakeTransport)  # type: ignore[arg-type]
    assert agent.hub_plans is not None
    agent.apply(agent.hub_plans.receive(_message(5, expires_at=1_000.0)) or [])
    monkeypatch.setattr(time, "time", lambda: 900.0)
    assert not agent.heartbeat().plan_expired
    assert b"plan_expired" not in encode(agent.heartbeat())  # left out when false
    monkeypatch.setattr(time, "time", lambda: 1_100.0)
    beat, dropped = decode(encode(agent.heartbeat()))
    assert beat.plan_expired
    assert dropped == []
    assert agent.pipelines.keys() == {"cold-chain"}  # it keeps running
