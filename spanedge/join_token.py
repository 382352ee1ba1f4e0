"""One-time join tokens: how a new gateway proves the hub invited it, and how it recognises the hub.

``spanedge site add`` on the hub prints a token of five dot-separated parts::

    sej1.<site>.<id>.<secret>.<ca-sha256>

* ``sej1``: the format and its version;
* ``<site>``: the site the token enrols (a site name, so it holds no ``.``);
* ``<id>``: 16 hex digits the hub finds the token by;
* ``<secret>``: 32 random bytes, base64url without padding (43 characters);
* ``<ca-sha256>``: the SHA-256 fingerprint of the hub CA's certificate (64 lowercase hex digits).

The hub keeps only the SHA-256 of the whole text (:func:`token_digest`), so a
token altered anywhere, its site or pinned fingerprint included, matches
nothing it issued. The gateway trusts the hub's HTTPS certificate only if it
chains to a CA of that fingerprint (the discovery hash of kubeadm's join), so
it sends its request to no one else.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from spanedge.errors import InvalidJoinToken
from spanedge.names import name_problem

PREFIX = "sej1"
_ID = re.compile(r"[0-9a-f]{16}")
_SECRET = re.compile(r"[A-Za-z0-9_-]{43}")
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")
_SHAPE = f"{PREFIX}.<site>.<16 hex digits>.<43 base64url characters>.<64 hex digits>"
_HINT = "copy the whole token 'spanedge site add' printed, or make a new one there"


@dataclass(frozen=True)
class JoinToken:
    """A parsed join token (see the module docstring)."""

    site: str
    token_id: str
    secret: str
    ca_sha256: str

    @property
    def text(self) -> str:
        """The token as the hub prints it and the gateway passes it."""
        return ".".join((PREFIX, self.site, self.token_id, self.secret, self.ca_sha256))

    def __repr__(self) -> str:
        """The token without its secret."""
        return f"JoinToken(site={self.site!r}, token_id={self.token_id!r}, ca_sha256={self.ca_sha256[:16]}...)"


def new_join_token(site: str, ca_sha256: str) -> JoinToken:
    """A fresh token enrolling ``site``, pinning the hub CA of fingerprint ``ca_sha256``.

    Raises:
        InvalidJoinToken: ``site`` is not a site name or ``ca_sha256`` not a SHA-256 in hex.
    """
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
    token = JoinToken(site, secrets.token_hex(8), secret, ca_sha256.lower())
    return parse_join_token(token.text)


def parse_join_token(text: object) -> JoinToken:
    """Parse a join token, or raise saying which part is wrong (never showing the secret).

    Raises:
        InvalidJoinToken: not five dot-separated parts of the right shape.
    """
    if not isinstance(text, str):
        msg = f"a join token is text, got {type(text).__name__}; {_HINT}"
        raise InvalidJoinToken(msg)
    parts = text.strip().split(".")
    if len(parts) != 5 or parts[0] != PREFIX:
        msg = f"malformed join token: expected {_SHAPE}, got {len(parts)} parts; {_HINT}"
        raise InvalidJoinToken(msg)
    _, site, token_id, secret, fingerprint = parts
    problem = name_problem(site, "site")
    if problem is not None:
        msg = f"malformed join token: its {problem}; {_HINT}"
        raise InvalidJoinToken(msg)
    for part, value, pattern in (
        ("id", token_id, _ID),
        ("secret", secret, _SECRET),
        ("CA fingerprint", fingerprint, _FINGERPRINT),
    ):
        if pattern.fullmatch(value) is None:
            msg = f"malformed join token: its {part} ({len(value)} characters) is not of the form {_SHAPE}; {_HINT}"
            raise InvalidJoinToken(msg)
    return JoinToken(site, token_id, secret, fingerprint)


def token_digest(text: str) -> str:
    """The SHA-256 of a token's text, in hex: all the hub stores of it."""
    return hashlib.sha256(text.encode()).hexdigest()


def digest_matches(text: str, stored: str) -> bool:
    """Whether ``text`` hashes to ``stored``, compared in constant time."""
    return hmac.compare_digest(token_digest(text).encode(), stored.encode())
