"""What an agent checks in a verified plan message before it applies it.

The hub publishes one signed message per site (see :mod:`spanedge.signing`),
whose payload is::

    {"site": "truck-7", "version": 12, "issued_at": 1700000000.0,
     "apps": [{"app": "cold-chain", "plan": {...}, "source": "...", "source_sha256": "..."}]}

:func:`check_plan_envelope` accepts it only if it is addressed to this site, its
version is newer than the one applied (so a replayed or stale message is
refused), every app name follows :data:`spanedge.names.APP_NAME_PATTERN`,
every app's source matches its SHA-256 and its plan is the plan of that app.
It is pure: the caller keeps the applied version and advances it on success.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spanedge.errors import InvalidName, InvalidPlan
from spanedge.loader import source_hash
from spanedge.names import check_app_name
from spanedge.plan import Plan


@dataclass(frozen=True)
class SitePlan:
    """An accepted plan message: its site, version, issue time and the plans of the site's apps."""

    site: str
    version: int
    issued_at: float
    plans: tuple[Plan, ...]


def check_plan_envelope(payload: Mapping[str, Any], *, site: str, applied_version: int = -1) -> SitePlan:
    """Check the payload of a verified plan message for the agent of ``site``.

    Args:
        payload: the payload :func:`spanedge.signing.verify_plan` returned.
        site: the site this agent serves.
        applied_version: the version already applied; the message must be newer.

    Returns:
        The accepted message, with each app's source in its plan (``Plan.app_source``).

    Raises:
        InvalidPlan: for another site, a version that is not newer than
            ``applied_version`` (replayed or stale; the message says "not newer"),
            a malformed field, an invalid or repeated app name, or an app whose
            source does not match its hash or whose plan belongs to another app.
    """
    addressed = payload.get("site")
    if addressed != site:
        msg = f"plan is for site {addressed!r}, but this agent serves {site!r}; ignoring it"
        raise InvalidPlan(msg)
    version = payload.get("version")
    if type(version) is not int:
        msg = f"plan version must be an integer, got {version!r}"
        raise InvalidPlan(msg)
    if version <= applied_version:
        msg = (
            f"plan version {version} is not newer than the applied version {applied_version}; "
            "ignoring it (replayed or stale)"
        )
        raise InvalidPlan(msg)
    issued = payload.get("issued_at", 0.0)
    if isinstance(issued, bool) or not isinstance(issued, int | float) or not math.isfinite(issued):
        msg = f"plan issued_at must be a number of seconds, got {issued!r}"
        raise InvalidPlan(msg)
    apps = payload.get("apps")
    if not isinstance(apps, list):
        msg = f"plan 'apps' must be a list, got {type(apps).__name__}"
        raise InvalidPlan(msg)
    plans = tuple(_app(entry, i) for i, entry in enumerate(apps))
    names = [p.app for p in plans]
    if len(set(names)) != len(names):
        msg = f"plan lists an app twice: {names}"
        raise InvalidPlan(msg)
    return SitePlan(site, version, float(issued), plans)


def _app(entry: Any, index: int) -> Plan:
    """Check one entry of ``apps`` and return its plan, carrying its source."""
    if not isinstance(entry, dict):
        msg = f"plan apps[{index}] must be an object, got {type(entry).__name__}"
        raise InvalidPlan(msg)
    name = entry.get("app")
    try:
        check_app_name(name, f"plan apps[{index}]")
    except InvalidName as exc:
        raise InvalidPlan(str(exc)) from None
    source = entry.get("source")
    sha = entry.get("source_sha256")
    if not isinstance(source, str) or not isinstance(sha, str):
        msg = f"plan apps[{index}] ({name!r}) needs 'source' and 'source_sha256' strings"
        raise InvalidPlan(msg)
    actual = source_hash(source)
    if actual != sha.lower():
        msg = f"app {name!r}: source SHA-256 is {actual}, but the plan says {sha}; the code was altered in transit"
        raise InvalidPlan(msg)
    data = entry.get("plan")
    if not isinstance(data, dict):
        msg = f"plan apps[{index}] ({name!r}) has no 'plan' object"
        raise InvalidPlan(msg)
    plan = Plan.from_dict({**data, "app_source": source})
    if plan.app != name:
        msg = f"plan apps[{index}] is labelled {name!r} but holds the plan of app {plan.app!r}"
        raise InvalidPlan(msg)
    return plan
