r"""Signatures on the control messages (plans) the hub sends to agents.

Plans are signed with Ed25519 by the hub alone. The hub holds the private key;
agents hold only public keys, so an agent, or whoever takes over its gateway,
can read plans but cannot make one that another agent accepts.

Keys:
    * **Private key** (hub): a PEM file, PKCS #8, unencrypted, as written by
      ``spanedge keys generate`` (or ``openssl genpkey -algorithm ed25519``).
      The hub reads the file named by ``SPANEDGE_PLAN_KEY_FILE``; keep it at
      mode 0600.
    * **Public key** (agents): the standard base64 of its 32 raw bytes, on one
      line (44 characters). ``spanedge keys public KEYFILE`` prints it.
    * **Key id**: the first 16 hex digits of the SHA-256 of the 32 raw bytes
      of the public key. Every signed message names the key id it was signed
      with; agents use it to pick the public key and to say which key they got.
    * **Trust list** (agents): ``SPANEDGE_PLAN_PUBLIC_KEYS``, public keys
      separated by commas or whitespace, and ``SPANEDGE_PLAN_PUBLIC_KEY_FILE``,
      a file with one public key per line (``#`` starts a comment, blank lines
      are skipped). Both are read and every key in either is trusted. Trusting
      two keys lets agents accept the old and the new key while the hub's key
      is rotated (``spanedge keys rotate``).

A signed message is the envelope :class:`spanedge.wire.plan.SignedMessage`::

    {"v": 1, "alg": "ed25519", "kid": "<key id>",
     "payload": "<the payload as JSON text>", "sig": "<standard base64 of the 64-byte signature>"}

The signature covers ``b"spanedge plan v1\x00"`` followed by the UTF-8 bytes of
``payload``; the prefix keeps a plan signature from being valid for any other
use of the key. The payload is carried as text, so the verifier checks exactly
the bytes that were signed and needs no canonical JSON.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from spanedge.errors import InvalidKey, InvalidPlan
from spanedge.wire.plan import (
    ALGORITHM,
    FIELDS,
    VERSION,
    PlanPayload,
    SignedMessage,
    encode_signed,
    payload_builtins,
    signed_message,
)

log = logging.getLogger(__name__)

#: The hub's private key file (PEM).
ENV_KEY_FILE = "SPANEDGE_PLAN_KEY_FILE"
#: Public keys an agent trusts, separated by commas or whitespace.
ENV_PUBLIC_KEYS = "SPANEDGE_PLAN_PUBLIC_KEYS"
#: A file of public keys an agent trusts, one per line.
ENV_PUBLIC_KEY_FILE = "SPANEDGE_PLAN_PUBLIC_KEY_FILE"

ENVELOPE_VERSION = VERSION
KEY_ID_LENGTH = 16
_CONTEXT = b"spanedge plan v1\x00"
_SEPARATORS = re.compile(r"[\s,]+")
#: How the DER of an Ed25519 private key (PKCS #8) starts: the body of its PEM file, decoded.
_PKCS8_ED25519_PREFIX = bytes.fromhex("302e020100300506032b657004220420")
_HOW_TO_GET_A_KEY = "run 'spanedge keys generate --out DIR' on the hub"


def _show(value: object, limit: int = 40) -> str:
    """``repr`` of an untrusted value, cut to ``limit`` characters for a log line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} characters)"


@dataclass(frozen=True)
class PlanPublicKey:
    """An Ed25519 public key that verifies plans, and its key id.

    Args:
        raw: the 32 raw bytes of the key.
    """

    raw: bytes

    def __post_init__(self) -> None:
        """Check the length; any other size is not an Ed25519 public key."""
        if len(self.raw) != 32:
            msg = f"an Ed25519 public key has 32 bytes, got {len(self.raw)}"
            raise InvalidKey(msg)

    @property
    def key_id(self) -> str:
        """The first 16 hex digits of the SHA-256 of the raw key."""
        return hashlib.sha256(self.raw).hexdigest()[:KEY_ID_LENGTH]

    def to_text(self) -> str:
        """The key as agents configure it: the base64 of its 32 raw bytes."""
        return base64.b64encode(self.raw).decode()

    @classmethod
    def from_text(cls, text: str, where: str) -> PlanPublicKey:
        """Parse a base64 public key; ``where`` names its origin in errors.

        Raises:
            InvalidKey: the text is not the base64 of 32 bytes.
        """
        text = text.strip()
        if text.startswith("-----BEGIN"):
            msg = (
                f"{where}: found a PEM block where a public key was expected; agents need the one-line public key: "
                "run 'spanedge keys public KEYFILE' and use the key it prints"
            )
            raise InvalidKey(msg)
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if raw.startswith(_PKCS8_ED25519_PREFIX):
            msg = (
                f"{where}: this is the hub's private key, not its public key; agents must never hold it: "
                "run 'spanedge keys public KEYFILE' and use the key it prints"
            )
            raise InvalidKey(msg)
        if len(raw) != 32:
            # the value is not echoed: a mistaken paste may hold secret material
            msg = (
                f"{where}: a value of {len(text)} characters is not a public key (the base64 of 32 bytes, "
                "44 characters); run 'spanedge keys public KEYFILE' on the hub to print it"
            )
            raise InvalidKey(msg)
        return cls(raw)

    @classmethod
    def from_pem(cls, data: bytes, where: str) -> PlanPublicKey:
        """Parse a PEM public key (``openssl pkey -pubout``); ``where`` names its origin in errors.

        Raises:
            InvalidKey: not a PEM public key, or not Ed25519.
        """
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm):
            msg = f"{where}: not a PEM public key"
            raise InvalidKey(msg) from None
        if not isinstance(key, Ed25519PublicKey):
            msg = f"{where}: the key is a {type(key).__name__.removeprefix('_')}, not Ed25519; {_HOW_TO_GET_A_KEY}"
            raise InvalidKey(msg)
        return cls(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))

    def verifies(self, signature: bytes, data: bytes) -> bool:
        """True if ``signature`` is this key's signature of ``data``."""
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, data)
        except InvalidSignature:
            return False
        return True


class PlanSigningKey:
    """The hub's Ed25519 private key. Its ``repr`` shows only the key id."""

    __slots__ = ("_key", "public_key")

    def __init__(self, key: Ed25519PrivateKey) -> None:
        """Wrap a private key from :mod:`cryptography`."""
        self._key = key
        self.public_key = PlanPublicKey(
            key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        )

    @classmethod
    def generate(cls) -> PlanSigningKey:
        """A new random key."""
        return cls(Ed25519PrivateKey.generate())

    @property
    def key_id(self) -> str:
        """The key id of the public half."""
        return self.public_key.key_id

    def to_pem(self) -> bytes:
        """The key as an unencrypted PKCS #8 PEM file."""
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @classmethod
    def from_pem(cls, data: bytes, where: str) -> PlanSigningKey:
        """Parse a PEM private key; ``where`` names its origin in errors.

        Raises:
            InvalidKey: not a PEM private key, encrypted, or not Ed25519.
        """
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except TypeError:
            msg = f"{where}: the private key is encrypted; SpanEdge reads an unencrypted key, protected by mode 0600"
            raise InvalidKey(msg) from None
        except (ValueError, UnsupportedAlgorithm):
            msg = f"{where}: not a PEM private key; {_HOW_TO_GET_A_KEY}"
            raise InvalidKey(msg) from None
        if not isinstance(key, Ed25519PrivateKey):
            msg = f"{where}: the key is a {type(key).__name__.removeprefix('_')}, not Ed25519; {_HOW_TO_GET_A_KEY}"
            raise InvalidKey(msg)
        return cls(key)

    def sign(self, data: bytes) -> bytes:
        """The raw 64-byte signature of ``data``."""
        return self._key.sign(data)

    def __repr__(self) -> str:
        return f"PlanSigningKey(key_id={self.key_id!r})"


class TrustedKeys:
    """The public keys an agent accepts plans from, by key id."""

    __slots__ = ("_keys",)

    def __init__(self, keys: Iterable[PlanPublicKey]) -> None:
        """Trust ``keys``; a key listed twice counts once."""
        self._keys = {k.key_id: k for k in keys}

    @property
    def ids(self) -> list[str]:
        """The trusted key ids, sorted."""
        return sorted(self._keys)

    def get(self, key_id: str) -> PlanPublicKey | None:
        """The trusted key with id ``key_id``, if any."""
        return self._keys.get(key_id)

    def to_text(self) -> str:
        """The keys as a trust file: one key per line, each with its key id as a comment."""
        return "".join(f"{k.to_text()}  # key id {k.key_id}\n" for k in self)

    def __iter__(self) -> Iterator[PlanPublicKey]:
        return iter(self._keys[i] for i in self.ids)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def __repr__(self) -> str:
        return f"TrustedKeys({self.ids!r})"


@dataclass(frozen=True)
class Verified:
    """A verified message: its payload and the key id that signed it."""

    payload: dict[str, Any]
    key_id: str


def parse_trusted_keys(text: str, where: str) -> TrustedKeys:
    """Parse a trust file: one public key per line, ``#`` comments and blank lines skipped.

    Raises:
        InvalidKey: a line holds something other than a public key (the message names the line).
    """
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.partition("#")[0].strip()
        if content:
            keys.append(PlanPublicKey.from_text(content, f"{where}:{number}"))
    return TrustedKeys(keys)


def load_trusted_keys(keys: str | None = None, key_file: Path | None = None) -> TrustedKeys:
    """The public keys an agent trusts.

    Args:
        keys: public keys separated by commas or whitespace (default: ``SPANEDGE_PLAN_PUBLIC_KEYS``).
        key_file: a trust file (default: the file named by ``SPANEDGE_PLAN_PUBLIC_KEY_FILE``).

    Both sources are read and every key in either is trusted.

    Raises:
        InvalidKey: a key is malformed, the file cannot be read, or no key is configured at all.
    """
    if keys is None:
        keys = os.environ.get(ENV_PUBLIC_KEYS, "")
    if key_file is None and os.environ.get(ENV_PUBLIC_KEY_FILE):
        key_file = Path(os.environ[ENV_PUBLIC_KEY_FILE])
    found = [PlanPublicKey.from_text(k, ENV_PUBLIC_KEYS) for k in _SEPARATORS.split(keys) if k]
    if key_file is not None:
        try:
            text = key_file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not text"
            msg = f"cannot read the trusted plan keys file {key_file} ({ENV_PUBLIC_KEY_FILE}): {reason}"
            raise InvalidKey(msg) from None
        found.extend(parse_trusted_keys(text, str(key_file)))
    if not found:
        msg = (
            f"no trusted plan key: set {ENV_PUBLIC_KEYS} to the hub's public key (or {ENV_PUBLIC_KEY_FILE} to a "
            "file holding it); print it on the hub with 'spanedge keys public $SPANEDGE_PLAN_KEY_FILE'"
        )
        raise InvalidKey(msg)
    return TrustedKeys(found)


def load_signing_key(path: Path | None = None) -> PlanSigningKey:
    """The hub's private key, from ``path`` or the file named by ``SPANEDGE_PLAN_KEY_FILE``.

    A key file that other users can read is used, with a warning to ``chmod 600`` it.

    Raises:
        InvalidKey: no key file is configured, or it cannot be read or parsed.
    """
    if path is None:
        if not os.environ.get(ENV_KEY_FILE):
            msg = (
                f"no plan-signing key: {_HOW_TO_GET_A_KEY} and set {ENV_KEY_FILE}=DIR/plan-key.pem; "
                f"give the agents its public key ({ENV_PUBLIC_KEYS})"
            )
            raise InvalidKey(msg)
        path = Path(os.environ[ENV_KEY_FILE])
    try:
        data = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as exc:
        msg = f"cannot read the plan-signing key {path} ({ENV_KEY_FILE}): {exc.strerror}"
        raise InvalidKey(msg) from None
    if os.name == "posix" and mode & 0o077:
        log.warning(
            "plan-signing key %s can be read by other users (mode %o); run chmod 600 %s", path, mode & 0o777, path
        )
    return PlanSigningKey.from_pem(data, str(path))


def sign_plan(payload: PlanPayload | Mapping[str, Any], key: PlanSigningKey) -> bytes:
    """Return the signed message of ``payload`` (see :mod:`spanedge.wire.plan` for its form)."""
    body = orjson.dumps(payload_builtins(payload), option=orjson.OPT_SORT_KEYS).decode()
    signature = key.sign(_CONTEXT + body.encode())
    signed = SignedMessage(
        v=ENVELOPE_VERSION, alg=ALGORITHM, kid=key.key_id, payload=body, sig=base64.b64encode(signature).decode()
    )
    return encode_signed(signed)


def _envelope(message: bytes) -> SignedMessage:
    """Parse the outer JSON; raise :class:`InvalidPlan` unless it has the signed-envelope form."""
    try:
        outer = orjson.loads(message)
    except orjson.JSONDecodeError:
        outer = None
    if not isinstance(outer, dict):
        got = "not JSON" if outer is None else f"JSON {type(outer).__name__}"
        msg = f"control message is not a signed envelope {{v, alg, kid, payload, sig}} (got {got}); ignoring it"
        raise InvalidPlan(msg)
    if outer.keys() != FIELDS:
        msg = (
            "control message is not a signed envelope {v, alg, kid, payload, sig} "
            f"(got fields {_show(sorted(outer), 80)}); ignoring it"
        )
        raise InvalidPlan(msg)
    version = outer["v"]
    if type(version) is not int or version != ENVELOPE_VERSION:
        msg = f"signed envelope version {_show(version)} is not {ENVELOPE_VERSION}; run the hub's release on this agent"
        raise InvalidPlan(msg)
    if outer["alg"] != ALGORITHM:
        msg = f"control message uses the unsupported signature algorithm {_show(outer['alg'])}; agents accept only {ALGORITHM!r}"
        raise InvalidPlan(msg)
    return signed_message(outer)


def verify_plan(message: bytes, trusted: TrustedKeys) -> Verified:
    """Check a signed message against the trusted public keys; return its payload and key id.

    Raises:
        InvalidPlan: not a signed envelope, signed with a key that is not trusted
            (the message names the key id it got and the ones trusted), or the
            signature does not verify (forged or altered). Nothing else escapes,
            whatever the bytes.
    """
    outer = _envelope(message)
    key_id = outer.kid
    key = trusted.get(key_id)
    if key is None:
        ids = ", ".join(trusted.ids) or "none"
        msg = (
            f"control message is signed with key {_show(key_id)}, but this agent trusts only key ids [{ids}]; "
            f"if the hub's key was rotated, add its new public key to {ENV_PUBLIC_KEYS} "
            f"(print it with 'spanedge keys public KEYFILE' on the hub)"
        )
        raise InvalidPlan(msg)
    body = outer.payload
    try:
        signature = base64.b64decode(outer.sig, validate=True)
        data = _CONTEXT + body.encode()
    except (binascii.Error, ValueError):
        signature, data = b"", b""
    canonical = base64.b64encode(signature).decode() == outer.sig
    if len(signature) != 64 or not canonical or not key.verifies(signature, data):
        msg = f"control message signature does not verify under key {key_id}; it was altered or forged; ignoring it"
        raise InvalidPlan(msg)
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        msg = f"signed control payload is not a JSON object (key {key_id}); ignoring it"
        raise InvalidPlan(msg)
    return Verified(payload, key_id)
