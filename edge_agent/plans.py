"""Plan intake: verify the signed plans the hub publishes for a site.

The hub publishes, retained, on ``spanedge/v1/control/<site>/plan``::

    sign({"site": "truck-7", "version": 12, "issued_at": 1700000000.0,
          "apps": [{"app": "cold-chain", "plan": {...}, "source": "...", "source_sha256": "..."}]})

:class:`PlanIntake` rejects a forged message, a version not newer than the
applied one, a message for another site and app code whose hash does not
match, each with a reason, and keeps the applied version otherwise.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from spanedge import signing
from spanedge.errors import InvalidPlan
from spanedge.plan import Plan


@dataclass(frozen=True)
class SitePlan:
    """A verified plan message: its version and the plans of the site's apps."""

    site: str
    version: int
    issued_at: float
    plans: tuple[Plan, ...]


class PlanIntake:
    """Checks signed plan messages for one site.

    Args:
        site: the site this agent serves.
        secret: the shared plan-signing secret (see :func:`spanedge.signing.load_secret`).
        version: the version already applied (plans must be newer).
    """

    def __init__(self, site: str, secret: bytes, version: int = -1) -> None:
        self.site = site
        self.secret = secret
        self.version = version

    def verify(self, payload: bytes) -> SitePlan:
        """Check a plan message without applying it.

        Raises:
            InvalidPlan: forged, stale, for another site, malformed, or with a source hash mismatch.
        """
        body = signing.verify(payload, self.secret)
        site = body.get("site")
        if site != self.site:
            msg = f"plan is for site {site!r}, but this agent serves {self.site!r}; ignoring it"
            raise InvalidPlan(msg)
        version = body.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            msg = f"plan version must be an integer, got {version!r}"
            raise InvalidPlan(msg)
        if version <= self.version:
            msg = f"plan version {version} is not newer than the applied version {self.version}; ignoring it (replayed or stale)"
            raise InvalidPlan(msg)
        issued = body.get("issued_at", 0.0)
        if isinstance(issued, bool) or not isinstance(issued, int | float) or not math.isfinite(issued):
            msg = f"plan issued_at must be a number of seconds, got {issued!r}"
            raise InvalidPlan(msg)
        apps = body.get("apps")
        if not isinstance(apps, list):
            msg = f"plan 'apps' must be a list, got {type(apps).__name__}"
            raise InvalidPlan(msg)
        plans = tuple(self._app(entry, i) for i, entry in enumerate(apps))
        names = [p.app for p in plans]
        if len(set(names)) != len(names):
            msg = f"plan lists an app twice: {names}"
            raise InvalidPlan(msg)
        return SitePlan(self.site, version, float(issued), plans)

    def _app(self, entry: Any, index: int) -> Plan:
        if not isinstance(entry, dict):
            msg = f"plan apps[{index}] must be an object, got {type(entry).__name__}"
            raise InvalidPlan(msg)
        name = entry.get("app")
        source = entry.get("source")
        sha = entry.get("source_sha256")
        if not isinstance(source, str) or not isinstance(sha, str):
            msg = f"plan apps[{index}] ({name!r}) needs 'source' and 'source_sha256' strings"
            raise InvalidPlan(msg)
        actual = hashlib.sha256(source.encode()).hexdigest()
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

    def accept(self, payload: bytes) -> list[Plan]:
        """Verify a plan message and mark its version applied; return the plans of the site's apps.

        Raises:
            InvalidPlan: see :meth:`verify`; the applied version is unchanged then.
        """
        site_plan = self.verify(payload)
        self.version = site_plan.version
        return list(site_plan.plans)
