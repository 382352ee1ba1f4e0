"""What an agent checks in a verified plan message before it applies it.

The hub publishes one signed message per site (see :mod:`spanedge.signing`),
whose payload (:class:`spanedge.wire.plan.PlanPayload`) is::

    {"site": "truck-7", "version": 12, "issued_at": 1700000000.0, "expires_at": 1700604800.0,
     "apps": [{"app": "cold-chain", "plan": {...}, "source": "...", "source_sha256": "..."}]}

:func:`check_plan_envelope` accepts it only if it is addressed to this site, its
version is newer than the one the agent holds (so a replayed or stale message
is refused, and the held version never goes back), every app name follows :data:`spanedge.names.APP_NAME_PATTERN`,
every app's source matches its SHA-256 and its plan is the plan of that app.
It is pure: the caller keeps the applied version and advances it on success.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spanedge.errors import InvalidName, InvalidPlan
from spanedge.loader import source_hash
from spanedge.names import check_app_name, check_site_name
from spanedge.plan import Plan
from spanedge.wire.plan import PlanApp, parse_payload


@dataclass(frozen=True)
class SitePlan:
    """An accepted plan message: its site, version, issue and expiry times and the plans of the site's apps."""

    site: str
    version: int
    issued_at: float
    plans: tuple[Plan, ...]
    expires_at: float | None = None
    #: the entries of the sites whose replicas the site runs, as the hub knows them (:meth:`Sites.learn`)
    peers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def expired(self, now: float) -> bool:
        """True once ``now`` (seconds since the epoch) is past the plan's expiry."""
        return self.expires_at is not None and now >= self.expires_at


def check_plan_envelope(payload: Mapping[str, Any], *, site: str, applied_version: int = -1) -> SitePlan:
    """Check the payload of a verified plan message for the agent of ``site``.

    Args:
        payload: the payload :func:`spanedge.signing.verify_plan` returned.
        site: the site this agent serves.
        applied_version: the version the agent holds (applied or saved); the message must be newer.

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
    message = parse_payload(payload)
    if message.version <= applied_version:
        msg = (
            f"site {site}: plan version {message.version} is not newer than the version {applied_version} "
            f"this agent holds; keeping version {applied_version} (a replayed or stale message)"
        )
        raise InvalidPlan(msg)
    plans = tuple(_app(entry, i) for i, entry in enumerate(message.apps))
    names = [p.app for p in plans]
    if len(set(names)) != len(names):
        msg = f"plan lists an app twice: {names}"
        raise InvalidPlan(msg)
    return SitePlan(site, message.version, message.issued_at, plans, message.expires_at, _peers(message.peers))


#: The most peer site entries a plan message may carry.
MAX_PEERS = 10_000


def _peers(entries: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Check the ``peers`` of a plan message: site entries (mappings) under valid site names, at most :data:`MAX_PEERS`.

    The entries are checked as ``sites.yaml`` entries by the agent, once it has added its own credentials to them.
    """
    if len(entries) > MAX_PEERS:
        msg = f"plan lists {len(entries)} peer sites, more than {MAX_PEERS}"
        raise InvalidPlan(msg)
    for name, entry in entries.items():
        try:
            check_site_name(name, f"plan peers[{name!r}]")
        except InvalidName as exc:
            raise InvalidPlan(str(exc)) from None
        if not isinstance(entry, Mapping):
            msg = f"plan peers[{name!r}]: a site entry must be a mapping, got {type(entry).__name__}"
            raise InvalidPlan(msg)
    return {name: dict(entry) for name, entry in entries.items()}


def _app(entry: PlanApp, index: int) -> Plan:
    """Check one entry of ``apps`` and return its plan, carrying its source."""
    name = entry.app
    try:
        check_app_name(name, f"plan apps[{index}]")
    except InvalidName as exc:
        raise InvalidPlan(str(exc)) from None
    actual = source_hash(entry.source)
    if actual != entry.source_sha256.lower():
        msg = (
            f"app {name!r}: source SHA-256 is {actual}, but the plan says {entry.source_sha256}; "
            "the code was altered in transit"
        )
        raise InvalidPlan(msg)
    plan = Plan.from_dict({**entry.plan, "app_source": entry.source})
    if plan.app != name:
        msg = f"plan apps[{index}] is labelled {name!r} but holds the plan of app {plan.app!r}"
        raise InvalidPlan(msg)
    return plan
