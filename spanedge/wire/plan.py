r"""The plan message: what the hub sends each site, signed, on ``spanedge/v1/control/<site>/plan``.

On the wire it is a signed envelope (:class:`SignedMessage`, checked by
:func:`spanedge.signing.verify_plan`)::

    {"v": 1, "alg": "ed25519", "kid": "<key id>",
     "payload": "<the payload as JSON text>", "sig": "<standard base64 of the 64-byte signature>"}

whose ``v`` is the format version of the message, and whose payload
(:class:`PlanPayload`, JSON with sorted keys) is::

    {"apps": [{"app": "cold-chain", "plan": {...}, "source": "...", "source_sha256": "..."}],
     "expires_at": 1700604800.0, "issued_at": 1700000000.0, "site": "truck-7", "version": 12}

``version`` is the plan version (strictly increasing per site), not the
format's; an agent never applies a version that is not newer than the one it
holds. ``expires_at`` (seconds since the epoch) is when the plan goes stale:
the hub re-issues it well before, and an agent still running it after says so
(absent: the plan does not expire). The hub writes both (:mod:`hub.control.distribution`); agents
read them (:mod:`edge_agent.plans`, through :func:`parse_payload` and
:mod:`spanedge.plan_checks`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from spanedge.errors import InvalidName, InvalidPlan
from spanedge.names import check_app_name
from spanedge.numbers import Finite

VERSION = 1
"""The format version of the plan message, the signed envelope's ``v``."""

ALGORITHM = "ed25519"


class SignedMessage(msgspec.Struct, kw_only=True):
    """The signed envelope around a payload (see the module docstring)."""

    v: int
    alg: str
    kid: str
    payload: str
    sig: str


class PlanApp(msgspec.Struct, kw_only=True):
    """One app in a site's plan message: its plan (``Plan.to_dict()``), its source and the source's SHA-256."""

    app: str
    plan: dict[str, Any]
    source: str
    source_sha256: str


class PlanPayload(msgspec.Struct, kw_only=True):
    """The signed payload of a site's plan message: its site, plan version, issue and expiry times, apps."""

    apps: list[PlanApp]
    expires_at: Finite | None = None
    issued_at: Finite = 0.0
    #: the sites.yaml entries of the sites whose replicas run here (a site that joined after this one enrolled)
    peers: dict[str, dict[str, Any]] = {}
    site: str
    version: int


FIELDS = frozenset(f.name for f in msgspec.structs.fields(SignedMessage))
"""The fields of the signed envelope, all required, no other allowed."""

_AT = re.compile(r"`\$\.(\w+)(?:\[(\d+)\])?(?:\.(\w+))?`$")
_MISSING = re.compile(r"missing required field `(\w+)`")


def signed_message(outer: Mapping[str, Any]) -> SignedMessage:
    """The signed envelope from its parsed JSON, whose fields :data:`FIELDS` are already checked.

    Raises:
        InvalidPlan: ``kid``, ``payload`` or ``sig`` is not a string.
    """
    try:
        return msgspec.convert(outer, SignedMessage)
    except msgspec.ValidationError as exc:
        at = _AT.search(str(exc))
        name = at.group(1) if at else "?"
        got = type(outer.get(name)).__name__
        msg = f"signed envelope field {name!r} must be a string, got {got}"
        raise InvalidPlan(msg) from None


def encode_signed(message: SignedMessage) -> bytes:
    """Serialise a signed envelope."""
    return msgspec.json.encode(message)


def payload_builtins(payload: PlanPayload | Mapping[str, Any]) -> dict[str, Any]:
    """A payload as plain JSON-ready data (what is signed)."""
    return msgspec.to_builtins(payload) if isinstance(payload, PlanPayload) else dict(payload)


def parse_payload(data: Mapping[str, Any]) -> PlanPayload:
    """The typed payload of a verified plan message.

    Raises:
        InvalidPlan: a field is missing or of the wrong type; the message names the field and what it got.
    """
    try:
        return msgspec.convert(data, PlanPayload)
    except msgspec.ValidationError as exc:
        raise _refusal(data, str(exc)) from None


def _refusal(data: Mapping[str, Any], reason: str) -> InvalidPlan:
    """Say which field of ``data`` is wrong, as msgspec's ``reason`` locates it."""
    at = _AT.search(reason)
    field, index, inner = at.groups() if at else (None, None, None)
    missing = _MISSING.search(reason)
    if missing is not None and field is None:
        field = missing.group(1)
    elif missing is not None and inner is None:
        inner = missing.group(1)
    if field is None:
        return InvalidPlan(f"malformed plan message: {reason}")
    got = data.get(field)
    if field == "version":
        return InvalidPlan(f"plan version must be an integer, got {got!r}")
    if field in ("issued_at", "expires_at"):
        return InvalidPlan(f"plan {field} must be a number of seconds, got {got!r}")
    if field == "site":
        return InvalidPlan(f"plan site must be a site name, got {got!r}")
    if field != "apps" or index is None or not isinstance(got, list):
        return InvalidPlan(f"plan {field!r} must be a list, got {type(got).__name__}")
    return _app_refusal(got[int(index)], int(index), inner, reason)


def _app_refusal(entry: Any, index: int, inner: str | None, reason: str) -> InvalidPlan:
    where = f"plan apps[{index}]"
    if inner is None:
        return InvalidPlan(f"{where} must be an object, got {type(entry).__name__}")
    name = entry.get("app")
    if inner == "app":
        try:
            check_app_name(name, where)
        except InvalidName as exc:
            return InvalidPlan(str(exc))
    if inner in ("source", "source_sha256"):
        return InvalidPlan(f"{where} ({name!r}) needs 'source' and 'source_sha256' strings")
    if inner == "plan":
        return InvalidPlan(f"{where} ({name!r}) has no 'plan' object")
    return InvalidPlan(f"{where} ({name!r}): {reason}")


__all__ = [
    "ALGORITHM",
    "FIELDS",
    "VERSION",
    "PlanApp",
    "PlanPayload",
    "SignedMessage",
    "encode_signed",
    "parse_payload",
    "payload_builtins",
    "signed_message",
]
