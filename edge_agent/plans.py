"""Plan intake: verify the signed plans the hub publishes for a site.

The hub publishes, retained, on ``spanedge/v1/control/<site>/plan``, a
payload signed with its Ed25519 key (:func:`spanedge.signing.sign_plan`)::

    {"site": "truck-7", "version": 12, "issued_at": 1700000000.0,
     "apps": [{"app": "cold-chain", "plan": {...}, "source": "...", "source_sha256": "..."}]}

:class:`PlanIntake` rejects a message not signed by a key the agent trusts,
a version not newer than the one it holds (a replay or an older plan, after a
restart too: the saved plan's version is held from the start), a message for
another site, app code whose hash does not match (each with a reason:
:mod:`spanedge.plan_checks`) and a plan of an older hub leader epoch than the
one it holds (``Plan.hub_epoch``: a hub with ``--ha`` that lost its lease), and keeps the held version otherwise, so it
never goes back. :class:`HubPlans` adds the plan saved for a restart, resumed
when the hub's retained plan is slow to come, and warns while the plan in
force is past its expiry (it keeps running: processing never stops for it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from spanedge.app import App
from spanedge.errors import InvalidPlan
from spanedge.loader import load_app_source
from spanedge.logsafe import escaped
from spanedge.plan import Plan
from spanedge.plan_checks import SitePlan, check_plan_envelope
from spanedge.private_files import write_private
from spanedge.sites import Site

if TYPE_CHECKING:
    from spanedge.signing import TrustedKeys
    from spanedge.sites import Sites

log = logging.getLogger(__name__)

EXPIRED_WARNING_INTERVAL_S = 60.0
"""How often an agent running an expired plan repeats its warning."""


class PlanIntake:
    """Checks signed plan messages for one site and holds the newest one.

    Args:
        site: the site this agent serves.
        trusted: the hub's public keys this agent trusts (see :func:`spanedge.signing.load_trusted_keys`).
        version: the version already held (plans must be newer).
        learn: given the site entries each held plan carries, for the sites its replicas read that the
            agent's ``sites.yaml`` lacks (:meth:`spanedge.sites.Sites.learn`).
    """

    def __init__(
        self,
        site: str,
        trusted: TrustedKeys,
        version: int = -1,
        learn: Callable[[Mapping[str, Mapping[str, Any]]], list[str]] | None = None,
    ) -> None:
        self.site = site
        self.learn = learn  # takes the site entries a plan carries (Sites.learn)
        self.trusted = trusted
        self.version = version
        self.epoch = 0  # the newest hub leader epoch of a plan held (hub.ha.lease; 0: no hub with --ha yet)
        self.applied: bytes | None = None  # the message of the plan in force
        self.held: bytes | None = None  # the newest message accepted: the one in force, or the saved one
        self.current: SitePlan | None = None  # the plan of ``held``

    def verify(self, payload: bytes) -> SitePlan:
        """Check a plan message without applying it.

        Raises:
            InvalidPlan: not signed by a trusted key, not newer than the held version, for another site,
                malformed, or with a source hash mismatch.
        """
        from spanedge import signing  # the signature library only loads in managed mode

        verified = signing.verify_plan(payload, self.trusted)
        site_plan = check_plan_envelope(verified.payload, site=self.site, applied_version=self.version)
        epoch = _epoch(site_plan)
        if 0 < epoch < self.epoch:
            msg = (
                f"site {self.site}: plan version {site_plan.version} comes from hub leader epoch {epoch}, older than "
                f"epoch {self.epoch} of the plan this agent holds: a hub that no longer leads sent it; ignoring it"
            )
            raise InvalidPlan(msg)
        return site_plan

    def _hold(self, payload: bytes, site_plan: SitePlan) -> None:
        added = self.learn(site_plan.peers) if self.learn is not None else []
        if added:
            log.info("site(s) %s not in this agent's sites.yaml: using the hub's entries in the plan", ", ".join(added))
        self.epoch = max(self.epoch, _epoch(site_plan))
        self.version = site_plan.version
        self.held = payload
        self.current = site_plan

    def accept(self, payload: bytes) -> list[Plan]:
        """Verify a plan message and mark its version applied; return the plans of the site's apps.

        Raises:
            InvalidPlan: see :meth:`verify`; the held version is unchanged then.
        """
        site_plan = self.verify(payload)
        self._hold(payload, site_plan)
        self.applied = payload
        return list(site_plan.plans)

    def hold(self, saved: Path) -> bool:
        """Hold the plan message kept in ``saved`` without applying it, so no older plan is taken meanwhile.

        Returns:
            True if a saved message verifies (a saved one that does not is logged and ignored).
        """
        if not saved.is_file():
            return False
        payload = saved.read_bytes()
        try:
            self._hold(payload, self.verify(payload))
        except InvalidPlan as exc:
            log.warning("ignoring the saved plan %s: %s", saved, escaped(exc))
            return False
        return True

    def receive(self, payload: bytes, saved: Path) -> list[Plan] | None:
        """Accept a plan message from the hub and keep it in ``saved`` for a restart.

        The saved message itself, delivered by the broker after a restart, is taken as the hub's plan.

        Returns:
            The plans of the site's apps, or ``None`` if the message is the one applied or was rejected
            (logged at WARNING with the reason).
        """
        if payload == self.applied:
            # the broker's retained copy of the message already applied, delivered again on a reconnect
            log.info("plan version %d is already applied (the broker delivered its retained copy again)", self.version)
            return None
        if payload == self.held and self.current is not None:
            self.applied = payload
            log.info("the hub's plan version %d is the one saved here: applying it", self.version)
            return list(self.current.plans)
        try:
            site_plan = self.verify(payload)
        except InvalidPlan as exc:
            log.warning("rejected plan message: %s", escaped(exc))
            return None
        self._hold(payload, site_plan)
        self.applied = payload
        write_private(saved, payload)
        log.info("applying plan version %d (%d apps)", site_plan.version, len(site_plan.plans))
        return list(site_plan.plans)

    def resume(self, saved: Path) -> list[Plan] | None:
        """The plans of the message :meth:`receive` kept in ``saved``, to run until the hub sends a newer one.

        Returns:
            The plans, or ``None`` if nothing was saved or the saved message no longer verifies (logged).
        """
        if (self.held is None and not self.hold(saved)) or self.current is None:
            return None
        self.applied = self.held
        log.info("resuming plan version %d until the hub publishes a newer one", self.version)
        return list(self.current.plans)


class HubPlans:
    """The plans of a managed agent: the hub's signed ones, saved for a restart.

    A plan that changed while the agent was down (its replicas moved away, say)
    must not run again: the saved one would take records and windows that are
    now another site's. So a restarted agent with a saved plan waits up to
    ``plan_wait`` seconds for the hub's retained plan before resuming its own.
    It holds the saved plan's version meanwhile: an older plan (a replay, or a
    broker that lost the hub's newer message) is refused.

    Args:
        intake: checks the plan messages.
        saved: where the applied plan message is kept (``<state dir>/plan.signed``).
        plan_wait: seconds a restarted agent waits for the hub's plan (0: resume the saved one at once).
        hub_site: the hub whose broker sends the plans (for log lines).
    """

    def __init__(self, intake: PlanIntake, saved: Path, plan_wait: float, hub_site: str) -> None:
        self.intake = intake
        self.saved = saved
        self.plan_wait = plan_wait
        self.hub_site = hub_site
        self._resume_at: float | None = None  # loop time to resume the saved plan at, unless the hub's comes first
        self._warned_at: float | None = None  # when the expired plan was last warned about

    @property
    def waiting(self) -> bool:
        """True while a restarted agent waits for the hub's plan."""
        return self._resume_at is not None

    def start(self, now: float) -> list[Plan] | None:
        """Begin the wait for the hub's plan if one was saved; without a wait, return the saved plans now."""
        if self.plan_wait > 0 and self.saved.is_file():
            if self.intake.hold(self.saved):
                self._resume_at = now + self.plan_wait
            return None
        return self.intake.resume(self.saved)

    def receive(self, payload: bytes) -> list[Plan] | None:
        """The plans of a plan message from the hub, or ``None`` if it was rejected (see :meth:`PlanIntake.receive`)."""
        return self.intake.receive(payload, self.saved)

    def resume_when_due(self, now: float) -> list[Plan] | None:
        """End the wait once the hub's plan came or ``plan_wait`` is over; return the saved plans in the latter case.

        Returns:
            The saved plans to apply, or ``None`` (still waiting, the hub's plan came first, or none verifies).
        """
        assert self._resume_at is not None
        hubs_plan = self.intake.applied is not None  # the hub's plan came first and runs
        if not hubs_plan and now < self._resume_at:
            return None
        self._resume_at = None
        if hubs_plan:
            return None
        log.warning(
            "no plan from the hub broker (%s) within %g s: resuming the plan saved in %s; if the hub re-planned "
            "while this agent was down, its results may repeat or miss what the new plan gave other sites until "
            "the hub's plan arrives (raise --plan-wait where the hub broker is slow to reach)",
            self.hub_site,
            self.plan_wait,
            self.saved,
        )
        return self.intake.resume(self.saved)

    def expired(self, now: float | None = None) -> bool:
        """True if the plan in force is past its expiry at ``now`` (default: the wall clock); it keeps running."""
        current = self.intake.current
        if self.intake.applied is None or current is None:
            return False
        return current.expired(time.time() if now is None else now)

    def warn_if_expired(self, now: float | None = None) -> bool:
        """Say at WARNING, once every :data:`EXPIRED_WARNING_INTERVAL_S`, that the plan in force expired.

        Returns:
            True if the plan in force is expired (the heartbeat reports it).
        """
        now = time.time() if now is None else now
        if not self.expired(now):
            self._warned_at = None
            return False
        if self._warned_at is None or now - self._warned_at >= EXPIRED_WARNING_INTERVAL_S:
            self._warned_at = now
            current = self.intake.current
            assert current is not None
            assert current.expires_at is not None
            log.warning(
                "site %s runs plan version %d, which expired %.0f s ago: the hub has not re-issued it (is the "
                "hub down, or its broker out of reach?); the plan keeps running until a newer one arrives",
                self.intake.site,
                current.version,
                now - current.expires_at,
            )
        return True


def peer_learner(sites: Sites, site: str) -> Callable[[Mapping[str, Mapping[str, Any]]], list[str]]:
    """What learns a plan's peer sites into ``sites``: each reached with ``site``'s own credentials and TLS files.

    The hub's entry leaves out its own files; an agent's identity comes from the fleet's CA, which every broker
    trusts. An entry that ``sites.yaml`` would refuse even so is logged and left out.
    """

    def learn(peers: Mapping[str, Mapping[str, Any]]) -> list[str]:
        own = msgspec.to_builtins(sites.site(site))
        mine = {k: own[k] for k in ("tls", "username", "password_env") if k in own}
        found = {}
        for name, entry in peers.items():
            if name in sites.sites:
                continue
            try:
                found[name] = msgspec.convert({**entry, **mine, "name": name}, Site)
            except (msgspec.ValidationError, ValueError, TypeError) as exc:
                log.error("plan peer site %s is not an entry sites.yaml would accept: %s; left out", name, exc)
        return sites.learn(found)

    return learn


def _epoch(site_plan: SitePlan) -> int:
    """The hub leader epoch a plan message carries (in each app's plan; 0: none, or no apps)."""
    return max((p.hub_epoch for p in site_plan.plans), default=0)


def app_of(plan: Plan) -> App:
    """Load the app a plan carries the source of, and check it is the app the plan is for.

    Raises:
        InvalidPlan: the plan carries no source, or its source defines another app.
        InvalidDataflow: the source does not load.
    """
    if not plan.app_source:
        msg = f"plan of app '{plan.app}' carries no app source; regenerate it with spanedge deploy --dry-run --output plan.json"
        raise InvalidPlan(msg)
    app = load_app_source(plan.app_source, plan.app_file or f"<{plan.app}>")
    if app.name != plan.app:
        msg = f"plan is for app '{plan.app}' but its source defines app '{app.name}'"
        raise InvalidPlan(msg)
    return app
