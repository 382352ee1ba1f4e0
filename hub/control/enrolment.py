"""Enrolling gateways with a one-time token, and revoking sites.

``add`` puts a spoke in the fleet (:mod:`hub.control.fleet`) and issues its join token
(:mod:`hub.control.join_tokens`); the spoke is planned nowhere until its agent's first
heartbeat, which re-plans the apps that read its streams
(:meth:`hub.control.coordinator.Coordinator.await_join`); ``join`` redeems the token, signs the gateway's
certificate signing request with the hub's CA (:mod:`spanedge.ca`, in
``<state-dir>/ca``) and answers with what the gateway needs; ``revoke`` revokes
the site's certificates, rewrites the brokers' ACL and CRL files and reloads the
brokers (:mod:`hub.control.brokers`), makes the registry and the ingest refuse
the site, and re-plans its replicas away as for a site gone for good
(:mod:`hub.control.site_health`, :mod:`hub.control.recovery`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from hub.control.brokers import BrokerFiles
from hub.control.coordinator import Coordinator
from hub.control.fleet import Fleet, gateway_view, site_entry
from hub.control.join_tokens import JoinRefused, JoinTokens
from spanedge.ca import CertificateAuthority, CertificateError, fingerprint, requested_name
from spanedge.errors import InvalidSites
from spanedge.names import check_site_name
from spanedge.signing import PlanPublicKey
from spanedge.sites import Tier

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Invitation:
    """A site added and its join token."""

    site: str
    token: str
    expires_at: float
    broker: str
    labels: dict[str, str]
    streams: dict[str, Any]


class Enrolment:
    """Adds, enrols and revokes sites of the hub's fleet."""

    def __init__(
        self,
        fleet: Fleet,
        tokens: JoinTokens,
        ca: CertificateAuthority,
        brokers: BrokerFiles,
        coordinator: Coordinator,
        plan_key: PlanPublicKey,
        *,
        default_broker: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Enrol into ``fleet`` with these parts; a site added without a broker uses ``default_broker``."""
        self.fleet = fleet
        self.tokens = tokens
        self.ca = ca
        self.brokers = brokers
        self.coordinator = coordinator
        self.plan_key = plan_key
        self.default_broker = default_broker
        self._clock = clock

    def start(self) -> None:
        """Bring the registry and the brokers' files in line with the fleet (at the hub's start)."""
        registry = self.coordinator.registry
        self.coordinator.on_join = self.fleet.join
        for name in self.fleet.joining():
            self.coordinator.await_join(name)
        registry.grow(self.fleet.sites)
        for site in self.fleet.sites.spokes:
            self.coordinator.analysis.add_spoke(site)
        for name in self.fleet.revoked():
            registry.revoked.add(name)
            self.coordinator.analysis.revoke(name)
        self.brokers.write(self.fleet.sites, self.fleet.revoked())

    def add(
        self,
        name: str,
        *,
        broker: str | None = None,
        labels: dict[str, str] | None = None,
        cpu: float = 1.0,
        streams: dict[str, Any] | None = None,
        ttl_s: float | None = None,
    ) -> Invitation:
        """Add spoke ``name`` to the fleet (or make a new token for one added before) and issue its join token.

        Raises:
            InvalidSites: the name is taken by ``sites.yaml`` or a revoked site, the entry is invalid, or a
                deployed app has no source of one of its ``streams`` (it could not be placed any more).
        """
        check_site_name(name, "site add")
        self._check_sources(name, streams or {})
        url = broker or self.default_broker
        entry = site_entry(url, cpu, dict(labels or {}), dict(streams or {}))
        if url.startswith("mqtts://"):
            entry["tls"] = {"ca_file": str(self.ca.cert_file)}
        site = self.fleet.add(name, entry)
        if not self.fleet.joined(name):
            self.coordinator.await_join(name)
        self.coordinator.registry.grow(self.fleet.sites)
        self.coordinator.analysis.add_spoke(site)
        self.brokers.write(self.fleet.sites, self.fleet.revoked())
        self.brokers.reload()
        token, expires = self.tokens.issue(name, fingerprint(self.ca.cert_pem), ttl_s)
        streams = {stream: msgspec.to_builtins(binding) for stream, binding in site.streams.items()}
        return Invitation(name, token.text, expires, url, dict(site.labels), streams)

    def _check_sources(self, name: str, streams: Mapping[str, Any]) -> None:
        """Refuse a stream a deployed app does not read: the placement of every app checks each site's streams."""
        for _, app in self.coordinator.deployments.running():
            sources = app.source_streams()
            for stream in streams:
                if stream not in sources:
                    msg = (
                        f"site {name}: stream {stream!r}: deployed app {app.name!r} has no source by that name "
                        f"(its sources: {', '.join(sorted(sources))}); name the stream after the source it feeds"
                    )
                    raise InvalidSites(msg)

    def join(self, token_text: object, csr_pem: str, client: str = "") -> dict[str, Any]:
        """Redeem a join token for the gateway's request from address ``client``; the answer of ``POST /join``.

        Raises:
            JoinRefused: the token or the request is refused (the message says why).
        """
        try:
            requested = requested_name(csr_pem.encode()) or None
        except CertificateError as exc:
            raise JoinRefused(str(exc), 400) from None
        token = self.tokens.redeem(token_text, requested, client)
        if self.fleet.is_revoked(token.site):
            msg = f"site {token.site!r} was revoked; it cannot join again"
            raise JoinRefused(msg, 403)
        try:
            cert = self.ca.issue_client(token.site, csr_pem.encode())
        except CertificateError as exc:
            raise JoinRefused(str(exc), 400) from None
        return {
            "site": token.site,
            "certificate": cert.decode(),
            "ca": self.ca.cert_pem.decode(),
            "plan_public_key": self.plan_key.to_text(),
            "sites": gateway_view(self.fleet.sites, token.site),
        }

    def revoke(self, name: str, reason: str = "revoked") -> dict[str, Any]:
        """Revoke site ``name`` everywhere; what was done, for the answer of ``POST /sites/{name}/revoke``.

        Raises:
            InvalidSites: no spoke of that name.
        """
        site = self.fleet.sites.site(name)
        if site.tier is not Tier.SPOKE:
            msg = f"site {name!r} is a hub; only spokes can be revoked"
            raise InvalidSites(msg)
        if self.fleet.is_revoked(name):
            msg = f"site {name!r} is already revoked"
            raise InvalidSites(msg)
        serials = self.ca.revoke(name, reason)
        self.fleet.revoke(site.name, self._clock(), serials)
        withdrawn = self.tokens.withdraw(name)
        self.coordinator.registry.revoked.add(name)
        self.coordinator.analysis.revoke(name)
        files = self.brokers.write(self.fleet.sites, self.fleet.revoked())
        reloaded = self.brokers.reload()
        replanned = self.coordinator.check_sites()
        log.warning(
            "site %s revoked: %d certificates, %d join tokens; apps re-planned: %s",
            name,
            len(serials),
            withdrawn,
            ", ".join(replanned) or "none",
        )
        return {
            "site": name,
            "serials": [str(s) for s in serials],
            "tokens_withdrawn": withdrawn,
            "broker_files": [str(p) for p in files],
            "brokers_reloaded": reloaded,
            "replanned": replanned,
        }
