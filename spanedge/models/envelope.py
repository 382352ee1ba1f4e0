r"""A model version on the wire: signed with the hub's plan key, checked by whoever runs it.

The envelope has the form of a signed plan (:class:`spanedge.wire.plan.SignedMessage`)::

    {"v": 1, "alg": "ed25519", "kid": "<key id>", "payload": "<the version as JSON>", "sig": "<base64>"}

but the signature covers ``b"spanedge model v1\x00"`` and the payload, so a
model's signature is never a valid plan signature, nor the other way round.
:func:`open_model` refuses a message that is not such an envelope, is
signed with a key it does not trust, was altered, is of another app or
model, or is not newer than the version held.

The hub publishes each version, retained, on :func:`model_topic`
(``spanedge/v1/control/<site>/model/<app>/<model>``), one topic per site,
app and model, which only that site's agent may read.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

import msgspec

from spanedge import topics
from spanedge.errors import SpanEdgeError
from spanedge.models.portable import InvalidModel, check_model
from spanedge.models.version import ModelVersion
from spanedge.wire.plan import ALGORITHM, VERSION, SignedMessage, encode_signed

if TYPE_CHECKING:  # the signature library loads only where a signed message is made or checked
    from spanedge.signing import PlanSigningKey, TrustedKeys

_CONTEXT = b"spanedge model v1\x00"
#: A signed model is at most this many bytes.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024


class RefusedModel(SpanEdgeError, ValueError):
    """A model version that must not be used; the message says why."""


def model_topic(site: str, app: str, model: str) -> str:
    """The retained topic the hub publishes ``app``'s ``model`` on for ``site``."""
    return f"{topics.PREFIX}/control/{site}/model/{app}/{model}"


def model_filter(site: str) -> str:
    """The topic filter of every model sent to ``site``."""
    return f"{topics.PREFIX}/control/{site}/model/#"


def parse_model_topic(topic: str, site: str) -> tuple[str, str] | None:
    """``(app, model)`` of a :func:`model_topic` of ``site``; None if ``topic`` is not one."""
    prefix = f"{topics.PREFIX}/control/{site}/model/"
    if not topic.startswith(prefix):
        return None
    parts = topic[len(prefix) :].split("/")
    if len(parts) != 2 or not all(parts):
        return None
    return parts[0], parts[1]


def seal_model(version: ModelVersion, key: PlanSigningKey) -> bytes:
    """The signed message of ``version``."""
    body = msgspec.json.encode(version).decode()
    signature = key.sign(_CONTEXT + body.encode())
    signed = SignedMessage(
        v=VERSION, alg=ALGORITHM, kid=key.key_id, payload=body, sig=base64.b64encode(signature).decode()
    )
    return encode_signed(signed)


_ENVELOPE = msgspec.json.Decoder(SignedMessage)
_VERSION = msgspec.json.Decoder(ModelVersion)


def open_model(message: bytes, trusted: TrustedKeys, *, app: str, model: str, held: int = 0) -> ModelVersion:
    """Verify a signed model version of ``app``'s ``model`` newer than version ``held``, and return it.

    Raises:
        RefusedModel: unsigned, signed by a key not trusted, altered, malformed, of another app or model,
            or not newer than ``held``. Nothing else escapes, whatever the bytes.
    """
    where = f"model '{model}' of app '{app}'"
    if len(message) > MAX_MESSAGE_BYTES:
        msg = f"{where}: the message has {len(message)} bytes, over the {MAX_MESSAGE_BYTES} allowed; refusing it"
        raise RefusedModel(msg)
    try:
        outer = _ENVELOPE.decode(message)
    except msgspec.DecodeError:
        msg = f"{where}: the message is not a signed envelope {{v, alg, kid, payload, sig}}; refusing it"
        raise RefusedModel(msg) from None
    if outer.v != VERSION or outer.alg != ALGORITHM:
        msg = f"{where}: envelope version {outer.v!r} / algorithm {outer.alg[:20]!r} is not {VERSION} / {ALGORITHM}"
        raise RefusedModel(msg)
    key = trusted.get(outer.kid)
    if key is None:
        ids = ", ".join(trusted.ids) or "none"
        msg = f"{where}: signed with key {outer.kid[:20]!r}, but only key ids [{ids}] are trusted; refusing it"
        raise RefusedModel(msg)
    try:
        signature = base64.b64decode(outer.sig, validate=True)
    except (binascii.Error, ValueError):
        signature = b""
    canonical = base64.b64encode(signature).decode() == outer.sig
    if len(signature) != 64 or not canonical or not key.verifies(signature, _CONTEXT + outer.payload.encode()):
        msg = f"{where}: the signature does not verify under key {outer.kid}; it was altered or forged; refusing it"
        raise RefusedModel(msg)
    try:
        version = _VERSION.decode(outer.payload)
        check_model(version.params, len(version.features))
    except (msgspec.DecodeError, InvalidModel) as exc:
        msg = f"{where}: the signed version is malformed: {exc}"
        raise RefusedModel(msg) from None
    if version.app != app or version.model != model:
        msg = f"{where}: the message holds model '{version.model}' of app '{version.app}'; refusing it"
        raise RefusedModel(msg)
    if version.version <= held:
        msg = f"{where}: version {version.version} is not newer than version {held}, which is held; refusing it"
        raise RefusedModel(msg)
    return version
