"""The REST API's enrolment routes: add a site and get its join token, join with it, revoke a site.

* ``POST /sites`` (admin): add a spoke to the fleet; the answer holds its one-time join token. The
  spoke is planned nowhere until its agent's first heartbeat, which re-plans the apps that read its streams.
* ``GET /join/ca`` (no bearer token): the hub CA's certificate, which the gateway checks against the
  SHA-256 its join token pins before it sends anything.
* ``POST /join`` (no bearer token: the join token is the credential): a gateway sends its token and
  its certificate signing request, and gets its certificate, the hub CA, the plan public key and its
  ``sites.yaml``. A refused token is a 400 (malformed), 403 (unknown, altered, expired, used, another
  site's, revoked) or 429 (too many refusals lately), with the reason.
* ``POST /sites/{site}/revoke`` (admin): revoke a site everywhere.

Every one of them is written to the audit log (``spanedge.audit``), refusals included.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field

from hub.api.errors import error, http_error_name
from hub.api.models import errors
from hub.control.enrolment import Enrolment
from hub.control.join_tokens import JoinRefused
from spanedge.errors import SpanEdgeError
from spanedge.logsafe import escaped
from spanedge.names import SITE_NAME_PATTERN

audit = logging.getLogger("spanedge.audit")


class SiteAddRequest(BaseModel):
    """``POST /sites``."""

    site: str = Field(description="the new spoke's name")
    broker: str | None = Field(default=None, description="its broker URL (default: the hub's broker)")
    labels: dict[str, str] = Field(default_factory=dict)
    cpu: float = Field(default=1.0, gt=0, description="CPU cores available to SpanEdge at the site")
    streams: dict[str, Any] = Field(
        default_factory=dict,
        description="the streams it sources, as sites.yaml writes them: {name: {topic, rate, record_bytes, qos}}",
    )
    ttl_s: float | None = Field(default=None, gt=0, description="seconds the token is valid (default: the hub's)")


class SiteAddResponse(BaseModel):
    """The answer of ``POST /sites``."""

    site: str
    token: str = Field(description="the one-time join token for 'spanedge agent join'")
    expires_at: float = Field(description="when the token expires (epoch seconds)")
    broker: str
    labels: dict[str, str]
    streams: dict[str, Any] = Field(
        default_factory=dict, description="the streams it sources; the apps that read them take it in once it joins"
    )


class JoinRequest(BaseModel):
    """``POST /join``."""

    token: str = Field(description="the join token 'spanedge site add' printed")
    csr: str = Field(description="the gateway's certificate signing request, PEM (its key stays on the gateway)")


class CaResponse(BaseModel):
    """The answer of ``GET /join/ca``."""

    ca: str = Field(description="the hub CA's certificate, PEM")


class JoinResponse(BaseModel):
    """The answer of ``POST /join``."""

    site: str
    certificate: str = Field(description="the gateway's client certificate, PEM")
    ca: str = Field(description="the hub CA's certificate, PEM")
    plan_public_key: str = Field(description="the public key the hub signs plans with")
    sites: dict[str, Any] = Field(description="the sites.yaml of the gateway, without credentials")


class RevokeResponse(BaseModel):
    """The answer of ``POST /sites/{site}/revoke``."""

    site: str
    serials: list[str] = Field(description="the serials of the certificates revoked")
    tokens_withdrawn: int
    broker_files: list[str]
    brokers_reloaded: list[str]
    replanned: list[str] = Field(description="the apps re-planned without the site")


#: A site's name in a path; the pattern is documented, and the enrolment checks it with a message that helps.
SiteName = Annotated[str, Path(description="the site's name", json_schema_extra={"pattern": SITE_NAME_PATTERN})]


def _who(request: Request) -> str:
    grant = getattr(request.state, "grant", None)
    return f"the admin token of {grant.source}" if grant is not None else "a caller with no token check"


def _client(request: Request) -> str:
    return request.client.host if request.client is not None else "an unknown address"


def enrolment_router(enrolment: Enrolment, admin: Sequence[Any]) -> APIRouter:
    """The enrolment routes over ``enrolment``; adding and revoking also need the ``admin`` dependencies."""
    router = APIRouter(tags=["enrolment"])

    @router.post(
        "/sites",
        status_code=201,
        response_model=SiteAddResponse,
        dependencies=list(admin),
        responses=errors(401, 403, 422),
    )
    def add_site(body: SiteAddRequest, request: Request) -> Any:
        """Add a spoke to the fleet and issue its one-time join token."""
        try:
            invitation = enrolment.add(
                body.site, broker=body.broker, labels=body.labels, cpu=body.cpu, streams=body.streams, ttl_s=body.ttl_s
            )
        except (SpanEdgeError, ValueError) as exc:
            audit.warning("site add '%s' by %s refused: %s", escaped(body.site), _who(request), escaped(exc))
            return error(422, exc)
        audit.info(
            "site add %s by %s: join token issued, expires at %.0f",
            escaped(body.site),
            _who(request),
            invitation.expires_at,
        )
        return SiteAddResponse(**invitation.__dict__)

    @router.get("/join/ca", response_model=CaResponse)
    def join_ca() -> CaResponse:
        """The hub CA's certificate, which a joining gateway checks against the hash its token pins."""
        return CaResponse(ca=enrolment.ca.cert_pem.decode())

    @router.post(
        "/join",
        response_model=JoinResponse,
        responses=errors(
            400,
            403,
            422,
            429,
            e400="the join token or the certificate signing request is malformed",
            e403="the join token is unknown, altered, expired, used, another site's or its site's revoked",
            e429="too many refused joins from this address lately; wait a minute",
        ),
    )
    def join(body: JoinRequest, request: Request) -> Any:
        """Enrol a gateway: redeem its join token and sign its certificate signing request."""
        try:
            answer = enrolment.join(body.token, body.csr, _client(request))
        except JoinRefused as exc:
            audit.warning("join from %s refused (%d): %s", escaped(_client(request)), exc.status, escaped(exc))
            return error(exc.status, exc, http_error_name(exc.status))
        audit.info("join of site %s from %s: certificate issued", escaped(answer["site"]), escaped(_client(request)))
        return answer

    @router.post(
        "/sites/{site}/revoke", response_model=RevokeResponse, dependencies=list(admin), responses=errors(401, 403, 422)
    )
    def revoke(site: SiteName, request: Request) -> Any:
        """Revoke a site: its certificates, broker rules, messages and placements."""
        try:
            done = enrolment.revoke(site)
        except (SpanEdgeError, ValueError) as exc:
            audit.warning("site revoke '%s' by %s refused: %s", escaped(site), _who(request), escaped(exc))
            return error(422, exc)
        audit.warning(
            "site revoke %s by %s: %d certificates revoked", escaped(site), _who(request), len(done["serials"])
        )
        return done

    return router
