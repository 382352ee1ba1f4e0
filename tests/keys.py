"""Plan-signing keys for tests: the hub's key, the trust list its agents hold, and a key nobody trusts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spanedge.plan_checks import check_plan_envelope
from spanedge.signing import PlanSigningKey, TrustedKeys, verify_plan

KEY = PlanSigningKey.generate()
TRUSTED = TrustedKeys([KEY.public_key])
#: A key agents do not trust: a compromised gateway's attempt at signing a plan.
ROGUE = PlanSigningKey.generate()


def key_env(directory: Path) -> dict[str, str]:
    """Environment of a hub and its agents: the hub's key file and the public key agents trust."""
    path = directory / "plan-key.pem"
    path.write_bytes(KEY.to_pem())
    path.chmod(0o600)
    return {"SPANEDGE_PLAN_KEY_FILE": str(path), "SPANEDGE_PLAN_PUBLIC_KEYS": KEY.public_key.to_text()}


def read_plan(
    message: bytes, *, site: str, trusted: TrustedKeys = TRUSTED, applied_version: int = -1
) -> dict[str, Any]:
    """The payload of a plan message, checked as the agent of ``site`` checks it.

    Raises:
        InvalidPlan: not signed by a trusted key, for another site, not newer than ``applied_version``, or malformed.
    """
    payload = verify_plan(message, trusted).payload
    check_plan_envelope(payload, site=site, applied_version=applied_version)
    return payload
