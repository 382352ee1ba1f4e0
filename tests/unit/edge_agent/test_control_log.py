"""An agent logs every control message it rejects at WARNING, with the reason."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.plans import PlanIntake
from edge_agent.telemetry import Telemetry
from spanedge.sites import parse_sites
from tests.keys import ROGUE, TRUSTED
from tests.unit.edge_agent.test_plans import _message

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:9"}
  truck-7: {tier: spoke, broker: "mqtt://127.0.0.1:9"}
"""


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("edge_agent.")]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\x00 not a plan", "not a signed"),
        (_message(key=ROGUE), "trusts only key ids"),
        (_message(site="truck-9"), "truck-9"),
        (_message(sha="0" * 64), "SHA-256"),
    ],
    ids=["junk", "untrusted-key", "other-site", "hash-mismatch"],
)
def test_a_rejected_plan_is_logged_at_warning_with_its_reason(
    payload: bytes, reason: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    intake = PlanIntake("truck-7", TRUSTED)
    saved = tmp_path / "plan.signed"
    with caplog.at_level(logging.INFO, logger="edge_agent"):
        assert intake.receive(payload, saved) is None
    (warning,) = _warnings(caplog)
    assert warning.startswith("rejected plan message: ")
    assert reason in warning
    assert not saved.exists()
    assert intake.version == -1


def test_a_replayed_or_older_plan_is_logged_at_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    intake = PlanIntake("truck-7", TRUSTED)
    saved = tmp_path / "plan.signed"
    newer = _message(version=5)
    assert intake.receive(newer, saved) is not None
    with caplog.at_level(logging.INFO, logger="edge_agent"):
        # the byte-identical message in force: the broker's retained copy after a reconnect, a no-op
        assert intake.receive(newer, saved) is None
        assert intake.receive(_message(version=5, issued_at=2.0e9), saved) is None  # version 5 again: a replay
        assert intake.receive(_message(version=4), saved) is None
    assert "plan version 5 is already applied" in caplog.text
    warnings = _warnings(caplog)
    assert len(warnings) == 2
    assert all(w.startswith("rejected plan message: ") and "version" in w for w in warnings)
    assert intake.version == 5
    assert saved.read_bytes() == newer


class _Hub:
    connected = False

    def publish(self, *_: Any) -> int:
        return 0


def _telemetry() -> Telemetry:
    return Telemetry("truck-7", parse_sites(SITES), "cloud", _Hub(), 2.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (orjson.dumps({"hub_ts": "noon", "echo_ts": 1.0}), "needs numbers"),
        (orjson.dumps({"hub_ts": 1.0}), "needs numbers"),
        (orjson.dumps({"hub_ts": "inf", "echo_ts": 1.0}), "finite"),
    ],
    ids=["bytes", "array", "text-time", "no-echo", "infinite"],
)
def test_a_rejected_probe_message_is_logged_at_warning(
    payload: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    telemetry = _telemetry()
    with caplog.at_level(logging.INFO, logger="edge_agent"):
        telemetry.echo(payload, 100.0)
    (warning,) = _warnings(caplog)
    assert warning.startswith(("rejected probe message", "rejected probe echo"))
    assert reason in warning
    assert telemetry.clock.offset_ms is None


def test_the_agents_own_probe_and_a_good_echo_are_not_warnings(caplog: pytest.LogCaptureFixture) -> None:
    telemetry = _telemetry()
    with caplog.at_level(logging.INFO, logger="edge_agent"):
        telemetry.echo(orjson.dumps({"site": "truck-7", "ts": 99.0}), 100.0)
        telemetry.echo(orjson.dumps({"hub_ts": 99.6, "echo_ts": 99.0}), 100.0)
    assert _warnings(caplog) == []
    assert telemetry.clock.offset_ms == pytest.approx(100.0)
