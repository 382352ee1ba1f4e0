"""``spanedge agent join``: a gateway enrols with the hub's one-time join token.

The gateway makes its key and certificate signing request itself (the key
never leaves it), fetches the hub CA's certificate from ``GET /join/ca`` and
accepts it only if its SHA-256 is the one the token pins; over HTTPS every
later request verifies the hub's certificate against that CA alone. Then it
sends ``POST /join`` with the token and the request, checks the answer (a
certificate for its site, from the pinned CA) and writes under its state directory
(directories 0700, files 0600)::

    identity/key.pem, identity/cert.pem, identity/ca.pem   its TLS identity and the hub CA
    plan-key.pub                                           the key the hub signs plans with
    sites.yaml                                             the fleet, every mqtts:// broker with these files

Over plain ``http://`` the pinned CA is still checked, but the request travels
unencrypted: the hub's log and this module warn about it.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spanedge.ca import common_name, fingerprint, new_request
from spanedge.errors import SpanEdgeError
from spanedge.join_token import JoinToken, parse_join_token
from spanedge.sites import Sites

log = logging.getLogger(__name__)


class JoinFailed(SpanEdgeError):
    """Enrolment failed: the hub refused, could not be reached or could not be trusted."""


@dataclass(frozen=True)
class Joined:
    """What a join wrote: the site and its files."""

    site: str
    state_dir: Path
    sites_file: Path
    plan_key_file: Path
    cert_file: Path
    key_file: Path
    ca_file: Path


def _context(url: str, ca_pem: str | None) -> ssl.SSLContext | None:
    """The TLS context of a request to ``url``: verify against ``ca_pem`` alone (unverified without one: the CA fetch)."""
    if not url.startswith("https://"):
        return None
    if ca_pem is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # only to fetch the CA, which is then checked against the pinned hash
        return context
    return ssl.create_default_context(cadata=ca_pem)


def _call(url: str, path: str, body: Any, ca_pem: str | None, timeout: float) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": "application/json", **({"Content-Type": "application/json"} if data else {})}
    request = urllib.request.Request(url + path, data=data, headers=headers, method="GET" if data is None else "POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=_context(url, ca_pem)) as answer:  # noqa: S310 - scheme checked by join()
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail", exc.reason)
        except (ValueError, AttributeError):
            detail = exc.reason
        msg = f"the hub at {url} refused the join ({exc.code}): {detail}"
        raise JoinFailed(msg) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        msg = f"cannot enrol at the hub at {url} ({reason}); check the URL and that the hub runs"
        raise JoinFailed(msg) from None


def pinned_ca(url: str, token: JoinToken, timeout: float = 30.0) -> str:
    """The hub CA's certificate from ``GET /join/ca``, if its SHA-256 is the one ``token`` pins.

    Raises:
        JoinFailed: the hub cannot be reached, or its CA is not the pinned one.
    """
    answer = _call(url, "/join/ca", None, None, timeout)
    ca = answer.get("ca") if isinstance(answer, dict) else None
    try:
        got = fingerprint(ca.encode()) if isinstance(ca, str) else "nothing"
    except ValueError:
        got = "not a certificate"
    if got != token.ca_sha256:
        msg = (
            f"the hub at {url} presents a CA of SHA-256 {got}, but the join token pins {token.ca_sha256}: this is not "
            "the hub that made the token (or the token is for another hub); nothing was sent"
        )
        raise JoinFailed(msg)
    return str(ca)


def _private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    path.chmod(0o600)


def _directory(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def join(url: str, token_text: str, state_dir: Path | None = None, timeout: float = 30.0) -> Joined:
    """Enrol at the hub at ``url`` with ``token_text``; write the identity under ``state_dir``.

    ``state_dir`` defaults to the agent's, ``.spanedge/agent-<site>``.

    Raises:
        JoinFailed: the token is malformed, the hub cannot be trusted or reached, or refuses.
    """
    if not url.startswith(("http://", "https://")):
        msg = f"hub URL must start with https:// (or http://), got {url!r}"
        raise JoinFailed(msg)
    url = url.rstrip("/")
    try:
        token = parse_join_token(token_text)
    except ValueError as exc:
        raise JoinFailed(str(exc)) from None
    ca = pinned_ca(url, token, timeout)
    if url.startswith("http://"):
        log.warning(
            "joining over plain HTTP: the join token and the answer travel unencrypted; use the hub's https:// URL"
        )
    csr, key = new_request(token.site)
    answer = _call(url, "/join", {"token": token.text, "csr": csr.decode()}, ca, timeout)
    cert = _checked(answer, token, ca)
    root = _directory(state_dir or Path(".spanedge") / f"agent-{token.site}").resolve()
    identity = _directory(root / "identity")
    files = {"key": identity / "key.pem", "cert": identity / "cert.pem", "ca": identity / "ca.pem"}
    _private(files["key"], key)
    _private(files["cert"], cert.encode())
    _private(files["ca"], ca.encode())
    plan_key = root / "plan-key.pub"
    _private(plan_key, f"{answer['plan_public_key']}\n".encode())
    sites_file = root / "sites.yaml"
    _private(sites_file, yaml.safe_dump(_with_identity(answer["sites"], files), sort_keys=False).encode())
    return Joined(token.site, root, sites_file, plan_key, files["cert"], files["key"], files["ca"])


def _checked(answer: Any, token: JoinToken, ca: str) -> str:
    """The certificate of the answer, if it is the site's and the answer is whole."""
    fields = ("site", "certificate", "ca", "plan_public_key", "sites")
    if not isinstance(answer, dict) or any(f not in answer for f in fields):
        msg = f"the hub's answer to the join lacks some of {', '.join(fields)}; is the hub of this version?"
        raise JoinFailed(msg)
    cert = str(answer["certificate"])
    if answer["ca"] != ca or common_name(cert.encode()) != token.site:
        msg = f"the hub answered with a certificate that is not site {token.site!r}'s from the pinned CA; nothing was written"
        raise JoinFailed(msg)
    Sites.of(
        _with_identity(answer["sites"], {"key": Path("k"), "cert": Path("c"), "ca": Path("a")}), "the hub's answer"
    )
    return cert


def _with_identity(data: dict[str, Any], files: dict[str, Path]) -> dict[str, Any]:
    """The sites of the answer with every ``mqtts://`` broker logging in with the gateway's certificate."""
    tls = {"ca_file": str(files["ca"]), "cert_file": str(files["cert"]), "key_file": str(files["key"])}
    sites = {
        name: {**entry, "tls": tls} if str(entry.get("broker", "")).startswith("mqtts://") else dict(entry)
        for name, entry in data["sites"].items()
    }
    return {**data, "sites": sites}
