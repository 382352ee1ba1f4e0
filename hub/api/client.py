"""The client of the hub's REST API, for the command line and the simulator (standard library only).

Edge machines install the light core without httpx, so this uses
:mod:`urllib`. Errors the hub returns are raised again as the same SpanEdge
exception classes, so ``spanedge deploy`` prints the same message whether it
planned locally or the hub did.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from spanedge import errors
from spanedge.errors import SpanEdgeError
from spanedge.plan import Plan
from spanedge.sites import load_sites

_ERRORS: dict[str, type[SpanEdgeError]] = {
    "InvalidDataflow": errors.InvalidDataflow,
    "InvalidSites": errors.InvalidSites,
    "InvalidPlan": errors.InvalidPlan,
    "InfeasiblePlacement": errors.InfeasiblePlacement,
}


class HubError(SpanEdgeError):
    """The hub answered with an error, or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        """Keep the HTTP status (None if the hub was not reached)."""
        super().__init__(message)
        self.status = status


class HubClient:
    """Talks to a hub at ``url`` with a bearer ``token``."""

    def __init__(self, url: str, token: str | None, timeout: float = 120.0) -> None:
        """Prepare a client; nothing is sent until a method is called."""
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

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
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(req, timeout=self.timeout if timeout is None else timeout) as resp:  # noqa: S310 - scheme checked above
                return _decode(resp.read(), resp.headers.get_content_type())
        except urllib.error.HTTPError as exc:
            raise self._error(exc) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            msg = f"cannot reach the hub at {self.url} ({reason}); start it with 'spanedge hub --sites sites.yaml' or set --hub-url / SPANEDGE_HUB_URL"
            raise HubError(msg) from None

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
    ) -> Plan:
        """Send an app to the hub, which places and starts it; return its plan.

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
        answer = self.post_app(source, str(app_file.resolve()), slo_ms=slo_ms, app_name=app_name, weights=weights)
        return Plan.from_dict(answer["plan"])

    def post_app(
        self,
        source: str,
        filename: str,
        *,
        slo_ms: float | None = None,
        app_name: str | None = None,
        weights: dict[str, float] | None = None,
    ) -> dict[str, Any]:
        """``POST /apps`` with an app's source; return the hub's whole answer (its ``plan`` and the app's record).

        ``filename`` names the app in the hub's messages and in the plan.

        Raises:
            HubError: the hub is unreachable, rejects the token, or fails.
            InvalidDataflow, InvalidSites, InfeasiblePlacement: the hub rejected the app.
        """
        body: dict[str, Any] = {"source": source, "filename": filename}
        if app_name is not None:
            body["app_name"] = app_name
        if slo_ms is not None:
            body["slo_ms"] = slo_ms
        if weights:
            body["weights"] = weights
        return dict(self.request("POST", "/apps", body))

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
        ttl_s: float | None = None,
    ) -> dict[str, Any]:
        """``POST /sites``: add a spoke; the answer holds its one-time join ``token``."""
        body: dict[str, Any] = {"site": site, "labels": labels or {}, "cpu": cpu}
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


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _decode(raw: bytes, content_type: str) -> Any:
    if content_type == "application/json":
        return json.loads(raw)
    return raw.decode()
