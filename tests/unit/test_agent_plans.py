"""Plan intake: only signed, newer plans for this site with matching app code are accepted."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import orjson
import pytest

from edge_agent.plans import PlanIntake
from spanedge import signing
from spanedge.errors import InvalidPlan
from spanedge.loader import load_app
from spanedge.signing import PlanSigningKey
from spanedge.sites import load_sites
from spanedge.testing import local_plan
from tests.keys import KEY, ROGUE, TRUSTED

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "cold_chain" / "app.py"


def _message(
    site: str = "truck-7",
    version: int = 3,
    source: str | None = None,
    sha: str | None = None,
    key: PlanSigningKey = KEY,
) -> bytes:
    app = load_app(APP)
    plan = local_plan(app, load_sites(ROOT / "examples" / "cold_chain" / "sites.yaml"))
    code = APP.read_text()
    body = {
        "site": site,
        "version": version,
        "issued_at": 1.7e9,
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
