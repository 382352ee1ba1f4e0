"""Plan intake: only signed, newer plans for this site with matching app code are accepted."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from edge_agent.plans import PlanIntake
from spanedge import signing
from spanedge.errors import InvalidPlan
from spanedge.loader import load_app
from spanedge.signing import PlanSigningKey
from spanedge.sites import load_sites
from spanedge.testing import local_plan
from tests.keys import KEY, ROGUE, TRUSTED

ROOT = Path(__file__).resolve().parents[3]
APP = ROOT / "examples" / "cold_chain" / "app.py"


def _message(
    site: str = "truck-7",
    version: int = 3,
    source: str | None = None,
    sha: str | None = None,
    key: PlanSigningKey = KEY,
    issued_at: float = 1.7e9,
) -> bytes:
    app = load_app(APP)
    plan = local_plan(app, load_sites(ROOT / "examples" / "cold_chain" / "sites.yaml"))
    code = APP.read_text()
    body = {
        "site": site,
        "version": version,
        "issued_at": issued_at,
        "apps": [
            {
                "app": "cold-chain",
                "plan": dataclasses.replace(plan, app_source="").to_dict(),
                "source": code if source is None else source,
                "source_sha256": sha or hashlib.sha256(code.encode()).hexdigest(),
            }
        ],
    }
    return signing.sign_plan(body, key)


def test_accepts_a_signed_plan_and_carries_the_source() -> None:
    intake = PlanIntake("truck-7", TRUSTED)
    plans = intake.accept(_message())
    assert [p.app for p in plans] == ["cold-chain"]
    assert plans[0].app_source == APP.read_text()
    assert intake.version == 3


def test_rejects_a_forged_signature() -> None:
    intake = PlanIntake("truck-7", TRUSTED)
    with pytest.raises(InvalidPlan, match=f"signed with key '{ROGUE.key_id}', but this agent trusts only"):
        intake.accept(_message(key=ROGUE))
    tampered = orjson.loads(_message())
    tampered["payload"] = tampered["payload"].replace('"version":3', '"version":9')
    with pytest.raises(InvalidPlan, match="signature"):
        intake.accept(orjson.dumps(tampered))
    with pytest.raises(InvalidPlan, match="signed envelope"):
        intake.accept(b"not json")
    assert intake.version == -1


def test_rejects_stale_or_replayed_versions() -> None:
    intake = PlanIntake("truck-7", TRUSTED)
    intake.accept(_message(version=5))
    with pytest.raises(InvalidPlan, match="not newer"):
        intake.accept(_message(version=5))
    with pytest.raises(InvalidPlan, match="not newer"):
        intake.accept(_message(version=4))
    assert intake.version == 5


def test_rejects_another_sites_plan() -> None:
    with pytest.raises(InvalidPlan, match="for site 'truck-9'"):
        PlanIntake("truck-7", TRUSTED).accept(_message(site="truck-9"))


def test_rejects_altered_code() -> None:
    with pytest.raises(InvalidPlan, match="SHA-256"):
        PlanIntake("truck-7", TRUSTED).accept(_message(source=APP.read_text() + "\nimport os\n"))


@functools.cache
def _good(version: int) -> bytes:
    return _message(version=version)


def _rejections(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.levelno == logging.WARNING and r.name == "edge_agent.plans"]


def test_every_rejected_plan_is_logged_at_warning_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="edge_agent.plans")
    saved = tmp_path / "plan.signed"
    intake = PlanIntake("truck-7", TRUSTED)
    assert intake.receive(_good(3), saved) is not None
    code = APP.read_text()
    rejected = {
        "signed with key": _message(version=4, key=ROGUE),  # a key the agent does not trust (wrong or old)
        "plan is for site 'truck-9'": _message(site="truck-9", version=4),
        "site truck-7: plan version 2 is not newer than the version 3 this agent holds": _message(version=2),
        # version 3 issued again: a replay (the byte-identical retained copy is no rejection, see below)
        "plan version 3 is not newer than the version 3 this agent holds": _message(version=3, issued_at=1.7e9 + 1),
        "the code was altered in transit": _message(version=4, source=code + "\nimport os\n"),
        "not a signed envelope": b"\x00junk",
    }
    for message in rejected.values():
        assert intake.receive(message, saved) is None
    lines = _rejections(caplog.records)
    assert len(lines) == len(rejected)
    for reason, line in zip(rejected, lines, strict=True):
        assert line.startswith("rejected plan message: ")
        assert reason in line
    assert intake.version == 3
    assert saved.read_bytes() == _good(3)


junk_plans = (
    st.binary(max_size=200)
    | st.sampled_from(["rogue", "other-site", "stale", "altered"])
    | st.builds(
        lambda b, i: _good(1)[:i] + b + _good(1)[i + len(b) :], st.binary(min_size=1, max_size=3), st.integers(0, 400)
    )
)


@settings(database=None, max_examples=60, deadline=None)
@given(st.lists(st.lists(junk_plans, max_size=3), min_size=1, max_size=4))
@example(junk=[[], [_good(1)]])  # the applied message again, as a mutation that changed nothing can give
def test_good_plans_around_junk_are_all_applied(
    tmp_path_factory: pytest.TempPathFactory, junk: list[list[Any]]
) -> None:
    """Arbitrary plan messages between good ones: none raises, each is logged as rejected, every good one applies."""
    saved = tmp_path_factory.mktemp("plans") / "plan.signed"
    intake = PlanIntake("truck-7", TRUSTED)
    handler = _Collect()
    logging.getLogger("edge_agent.plans").addHandler(handler)
    forged = {
        "rogue": lambda v: _message(version=v + 1, key=ROGUE),
        "other-site": lambda v: _message(site="truck-9", version=v + 1),
        "stale": lambda v: _good(1) if v == 0 else _message(version=v, issued_at=1.6e9),
        "altered": lambda v: _message(version=v + 1, source=APP.read_text() + "\n# altered\n"),
    }
    bad = 0
    try:
        for version, before in enumerate(junk, start=1):
            for item in before:
                message = forged[item](version - 1) if isinstance(item, str) else item
                if version <= 2 and message == _good(1):
                    # a mutation that changed nothing is the good message itself, or (next) its applied copy
                    continue
                assert intake.receive(message, saved) is None
                bad += 1
            plans = intake.receive(_good(version), saved)
            assert plans is not None
            assert [p.app for p in plans] == ["cold-chain"]
            assert intake.version == version
    finally:
        logging.getLogger("edge_agent.plans").removeHandler(handler)
    assert saved.read_bytes() == _good(len(junk))
    assert len(_rejections(handler.records)) == bad


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_retained_copy_of_the_applied_plan_is_not_a_rejection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edge_agent.plans")
    saved = tmp_path / "plan.signed"
    intake = PlanIntake("truck-7", TRUSTED)
    message = _message(version=5)
    assert intake.receive(message, saved) is not None
    assert intake.receive(message, saved) is None  # the broker's retained copy, after a reconnect
    assert _rejections(caplog.records) == []
    assert "already applied" in caplog.text
    assert intake.receive(_message(version=5, issued_at=1.7e9 + 1), saved) is None  # the version again: a replay
    assert len(_rejections(caplog.records)) == 1


def test_a_saved_plan_that_was_never_applied_is_still_taken_from_the_broker(tmp_path: Path) -> None:
    saved = tmp_path / "plan.signed"
    message = _message(version=5)
    saved.write_bytes(message)
    assert [p.app for p in PlanIntake("truck-7", TRUSTED).receive(message, saved) or []] == ["cold-chain"]
