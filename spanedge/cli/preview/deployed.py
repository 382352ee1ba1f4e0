"""The version of an app the hub runs, for ``spanedge preview`` to compare a candidate against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spanedge.errors import SpanEdgeError


@dataclass(frozen=True)
class Deployed:
    """An app's source as the hub stores it, with the file name it was deployed from and its plan version."""

    source: str
    filename: str
    version: int
    label: str


def fetch(hub_url: str, token: str, hub_ca: Path | None, app: str) -> Deployed | None:
    """``GET /apps/{app}`` at the hub: the source it runs, or ``None`` if the app is not deployed there.

    Raises:
        SpanEdgeError: the hub cannot be reached, refuses the token, or answers without the app's source.
    """
    from hub.api.client import HubClient, HubError

    try:
        answer = HubClient(hub_url, token, timeout=30, ca_file=hub_ca).app(app)
    except HubError as exc:
        if exc.status == 404:
            return None
        msg = f"cannot fetch the deployed version of app {app} from the hub: {exc}"
        raise SpanEdgeError(msg) from None
    plan = answer.get("plan") or {}
    source = plan.get("app_source") if isinstance(plan, dict) else None
    if not isinstance(source, str) or not source:
        msg = (
            f"the hub {hub_url} answered GET /apps/{app} without the app's source; "
            "pass the deployed version with --compare FILE"
        )
        raise SpanEdgeError(msg)
    version = int(answer.get("version", 0))
    filename = str(plan.get("app_file") or answer.get("filename") or f"{app}.py")
    return Deployed(source, filename, version, f"hub v{version}")
