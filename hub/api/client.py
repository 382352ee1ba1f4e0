"""The client of the hub's REST API, for the command line and the simulator (standard library only).

Edge machines install the light core without httpx, so this uses
:mod:`urllib`. Errors the hub returns are raised again as the same SpanEdge
exception classes, so ``spanedge deploy`` prints the same message whether it
planned locally or the hub did. An ``https://`` hub's certificate is always
verified: against ``ca_file`` (``--hub-ca``, the hub's ``<state-dir>/ca/ca.pem``)
or the system's CAs; one that does not verify is a :class:`HubError` that says why.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spanedge import errors
from spanedge.errors import SpanEdgeError
from spanedge.plan import Plan
from spanedge.sites import load_sites

_ERRORS: dict[str, type[SpanEdgeError]] = {
    "InvalidDataflow": errors.InvalidDataflow,
    "InvalidRollout": errors.InvalidRollout,
    "InvalidSites": errors.InvalidSites,
    "InvalidPlan": errors.InvalidPlan,
    "InfeasiblePlacement": errors.InfeasiblePlacement,
    "InvalidSettings": errors.InvalidSettings,
}


class HubError(SpanEdgeError):
    """The hub answered with an error, or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        """Keep the HTTP status (None if the hub was not reached)."""
        super().__init__(message)
        self.status = status


#: The fix named when the hub's certificate does not verify against the CAs the client trusts.
CA_HINT = (
    "pass the hub's CA certificate with --hub-ca FILE or SPANEDGE_HUB_CA: the hub logs where it is "
    "(<state-dir>/ca/ca.pem) and its SHA-256 fingerprint, to compare with the copy you pass"
)


#: How many redirects (a standby's 307 to the leader) a request follows.
MAX_REDIRECTS = 3


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follow no redirect: :meth:`HubClient.request` follows a 307 or 308 itself, with the method and body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        """Refuse every redirect, so that it raises :class:`urllib.error.HTTPError`."""
        return


class HubClient:
    """Talks to a hub at ``url`` with a bearer ``token``, trusting the CA certificate in ``ca_file`` (or the system's)."""

    def __init__(self, url: str, token: str | None, timeout: float = 120.0, ca_file: str | Path | None = None) -> None:
        """Prepare a client; nothing is read or sent until a method is called."""
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.ca_file = None if ca_file is None else Path(ca_file)
        self._context: ssl.SSLContext | None = None

    def context(self) -> ssl.SSLContext:
        """The TLS context every ``https://`` request verifies the hub with (made at the first call).

        Raises:
            HubError: ``ca_file`` cannot be read as PEM certificates.
        """
        if self._context is None:
            try:
                self._context = ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                msg = (
                    f"cannot read the hub's CA certificate {self.ca_file} (--hub-ca / SPANEDGE_HUB_CA): "
                    f"{getattr(exc, 'strerror', None) or exc}; pass the hub's <state-dir>/ca/ca.pem"
                )
                raise HubError(msg) from None
        return self._context

    def request(
        self, method: str, path: str, body: Any = None, *, auth: bool = True, timeout: float | None = None
    ) -> Any:
        """Send a request and return the decoded JSON (or text) answer.

        ``timeout`` (seconds) replaces the client's for this request.

        Raises:
            HubError: the hub is unreachable, rejects the token, or fails.
            InvalidDataflow, InvalidSites, InfeasiblePlacement: the hub rejected a deploy.
        """
        if auth and not self.token:
            msg = "no hub token: export SPANEDGE_TOKEN=<the hub's token> or pass --token"
            raise HubError(msg)
        headers = {"Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if not self.url.startswith(("http://", "https://")):
            msg = f"hub URL must start with http:// or https://, got {self.url!r}"
            raise HubError(msg)
        url = self.url + path
        for _ in range(MAX_REDIRECTS + 1):
            request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
            try:
                return self._send(request, self.timeout if timeout is None else timeout)
            except urllib.error.HTTPError as exc:
                location = exc.headers.get("Location") if exc.code in (307, 308) else None
                if location is None:
                    raise self._error(exc) from None
                exc.close()
                url = self._redirected(url, location)
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                raise HubError(self._unreachable(getattr(exc, "reason", exc))) from None
        msg = (
            f"{method} {path} at the hub {self.url} was redirected more than {MAX_REDIRECTS} times (last to {url}); "
            "check the --ha-url of the hubs of the group: a standby must redirect to the leader"
        )
        raise HubError(msg)

    def _send(self, request: urllib.request.Request, timeout: float) -> Any:
        """Send ``request`` once, following no redirect (a 3xx raises :class:`urllib.error.HTTPError`)."""
        handlers: list[Any] = [_NoRedirect]
        if request.full_url.startswith("https://"):
            handlers.append(urllib.request.HTTPSHandler(context=self.context()))
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as resp:
            return _decode(resp.read(), resp.headers.get_content_type())

    def _redirected(self, url: str, location: str) -> str:
        """The URL a standby's 307 or 308 at ``url`` sends the request on to (the token goes with it).

        Raises:
            HubError: it is not http(s), or goes from HTTPS to plain HTTP, where the token would travel in clear.
        """
        from urllib.parse import urljoin

        target = urljoin(url, location)
        if not target.startswith(("http://", "https://")):
            msg = f"the hub at {url} redirected to {target!r}, not an http(s) URL; check the leader's --ha-url"
            raise HubError(msg)
        if url.startswith("https://") and target.startswith("http://"):
            msg = (
                f"the hub at {url} redirected to the plain-HTTP {target}, which would send the token in clear; "
                "give the leader an https:// --ha-url, or send the request to the leader yourself"
            )
            raise HubError(msg)
        return target

    def _unreachable(self, reason: object) -> str:
        """Why the hub could not be reached over the connection, and the fix."""
        if isinstance(reason, ssl.SSLCertVerificationError):
            return f"the certificate of the hub at {self.url} does not verify: {_verify_problem(reason)}"
        if isinstance(reason, ssl.SSLError) and "WRONG_VERSION_NUMBER" in str(reason):
            plain = "http://" + self.url.removeprefix("https://")
            return (
                f"the hub at {self.url} does not speak TLS ({reason}); it serves plain HTTP (--plain-http): use {plain}"
            )
        if isinstance(reason, http.client.RemoteDisconnected | ConnectionResetError) and self.url.startswith("http://"):
            secure = "https://" + self.url.removeprefix("http://")
            return f"the hub at {self.url} closed the connection ({reason}); it serves HTTPS by default: use {secure}"
        return (
            f"cannot reach the hub at {self.url} ({reason}); start it with 'spanedge hub --sites sites.yaml' "
            "or set --hub-url / SPANEDGE_HUB_URL"
        )

    def _error(self, exc: urllib.error.HTTPError) -> SpanEdgeError:
        raw = exc.read()
        try:
            content = json.loads(raw)
        except ValueError:
            content = {}
        if not isinstance(content, dict):
            content = {}
        detail = content.get("detail") or raw.decode(errors="replace") or exc.reason
        if exc.code == 401:
            return HubError(
                f"the hub at {self.url} rejected the token (401); use the token the hub was started with "
                "(SPANEDGE_TOKEN or its --token-file)",
                401,
            )
        cls = _ERRORS.get(str(content.get("error")))
        if cls is not None:
            return cls(str(detail))
        return HubError(f"hub {exc.code}: {detail}", exc.code)

    # -- endpoints -----------------------------------------------------------------------------

    def health(self, *, timeout: float | None = None) -> dict[str, Any]:
        """``GET /healthz`` (no token needed)."""
        return dict(self.request("GET", "/healthz", auth=False, timeout=timeout))

    def deploy(
        self,
        app_file: Path,
        sites_file: Path | None = None,
        *,
        slo_ms: float | None = None,
        app_name: str | None = None,
        weights: dict[str, float] | None = None,
        rollout: Mapping[str, Any] | None = None,
    ) -> Plan:
        """Send an app to the hub, which places and starts it (or rolls it out, see :meth:`post_app`); return its plan.

        ``sites_file`` is checked locally so a broken file fails early; the hub
        places the app on the sites it was started with.
        """
        app_file = Path(app_file)
        try:
            source = app_file.read_text()
        except OSError as exc:
            msg = f"cannot read app file {app_file}: {exc.strerror}; pass the path of a Python file that defines an App"
            raise errors.InvalidDataflow(msg) from None
        if sites_file is not None:
            load_sites(sites_file)
        # the absolute path, as 'spanedge deploy --dry-run' names the file in its messages
        answer = self.post_app(
            source, str(app_file.resolve()), slo_ms=slo_ms, app_name=app_name, weights=weights, rollout=rollout
        )
        return Plan.from_dict(answer["plan"])

    def post_app(
        self,
        source: str,
        filename: str,
        *,
        slo_ms: float | None = None,
        app_name: str | None = None,
        weights: dict[str, float] | None = None,
        rollout: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``POST /apps`` with an app's source; return the hub's whole answer (its ``plan`` and the app's record).

        ``filename`` names the app in the hub's messages and in the plan. ``rollout`` holds the
        body's ``rollout``, ``gates``, ``hold`` and ``all_at_once`` for a staged rollout.

        Raises:
            HubError: the hub is unreachable, rejects the token, or fails.
            InvalidDataflow, InvalidSites, InfeasiblePlacement: the hub rejected the app.
            InvalidSettings: the hub rejected ``slo_ms`` or ``weights``.
        """
        body: dict[str, Any] = {"source": source, "filename": filename}
        if app_name is not None:
            body["app_name"] = app_name
        if slo_ms is not None:
            body["slo_ms"] = slo_ms
        if weights:
            body["weights"] = weights
        body.update({k: v for k, v in (rollout or {}).items() if v is not None})
        return dict(self.request("POST", "/apps", body))

    def rollout(self, name: str) -> dict[str, Any]:
        """``GET /apps/{name}/rollout``: the app's staged rollout, in progress or its last one."""
        return dict(self.request("GET", f"/apps/{_quote(name)}/rollout"))

    def roll_back(self, name: str) -> dict[str, Any]:
        """``POST /apps/{name}/rollout/rollback``: give every site the rollout changed the previous version back."""
        return dict(self.request("POST", f"/apps/{_quote(name)}/rollout/rollback", {}))

    def post_preview(self, name: str, summary: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /apps/{name}/previews``: give the hub a live preview's summary to keep (admin token)."""
        return dict(self.request("POST", f"/apps/{_quote(name)}/previews", dict(summary)))

    def previews(self, name: str) -> list[dict[str, Any]]:
        """``GET /apps/{name}/previews``: the app's last previews, newest first."""
        return list(self.request("GET", f"/apps/{_quote(name)}/previews")["previews"])

    def apps(self) -> list[dict[str, Any]]:
        """``GET /apps``."""
        return list(self.request("GET", "/apps")["apps"])

    def app(self, name: str) -> dict[str, Any]:
        """``GET /apps/{name}``."""
        return dict(self.request("GET", f"/apps/{_quote(name)}"))

    def placement(self, name: str, *, timeout: float | None = None) -> dict[str, Any]:
        """``GET /apps/{name}/placement``: the plan, its replicas and the history of re-plans."""
        return dict(self.request("GET", f"/apps/{_quote(name)}/placement", timeout=timeout))

    def delete(self, name: str) -> dict[str, Any]:
        """``DELETE /apps/{name}``."""
        return dict(self.request("DELETE", f"/apps/{_quote(name)}"))

    def add_site(
        self,
        site: str,
        *,
        broker: str | None = None,
        labels: dict[str, str] | None = None,
        cpu: float = 1.0,
        streams: dict[str, Any] | None = None,
        ttl_s: float | None = None,
    ) -> dict[str, Any]:
        """``POST /sites``: add a spoke sourcing ``streams`` (as ``sites.yaml`` writes them); the answer holds its join ``token``."""
        body: dict[str, Any] = {"site": site, "labels": labels or {}, "cpu": cpu, "streams": streams or {}}
        if broker is not None:
            body["broker"] = broker
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return dict(self.request("POST", "/sites", body))

    def revoke_site(self, site: str) -> dict[str, Any]:
        """``POST /sites/{site}/revoke``."""
        return dict(self.request("POST", f"/sites/{_quote(site)}/revoke"))

    def sites(self) -> list[dict[str, Any]]:
        """``GET /sites``."""
        return list(self.request("GET", "/sites")["sites"])

    def latency(self) -> list[dict[str, Any]]:
        """``GET /latency``: one row per ordered site pair."""
        return list(self.request("GET", "/latency")["links"])

    def metrics(self) -> str:
        """``GET /metrics`` (Prometheus text)."""
        return str(self.request("GET", "/metrics"))


def _verify_problem(error: ssl.SSLCertVerificationError) -> str:
    """What is wrong with the hub's certificate and how to fix it, from OpenSSL's verification error."""
    problem = (error.verify_message or str(error)).rstrip(".")
    if error.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
        return (
            f"{problem}; use a host name the certificate names (the hub's --host, localhost, 127.0.0.1, its "
            "host name or a --tls-name) in --hub-url, or restart the hub with this name as --tls-name"
        )
    if error.verify_code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
        return (
            f"{problem}; restart the hub to have its CA issue a new certificate, or renew the one given as --tls-cert"
        )
    return f"{problem}; {CA_HINT}"


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _decode(raw: bytes, content_type: str) -> Any:
    if content_type == "application/json":
        return json.loads(raw)
    return raw.decode()
