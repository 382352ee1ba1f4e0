"""The hub's REST API tokens: how strong they must be, and what each may do.

A token has one of two scopes:

* ``read``: list apps, read plans, placements, sites and metrics;
* ``admin``: everything ``read`` may, plus deploying and deleting apps, which
  runs code on the hub and the agents.

Where tokens come from (all sources are read; every token found is accepted):

* ``SPANEDGE_TOKEN``, or the file given as ``token_file`` (the hub's
  ``--token-file``, which wins over the variable): one ``admin`` token;
* ``SPANEDGE_READ_TOKEN``: one ``read`` token;
* ``SPANEDGE_TOKENS_FILE``, or ``tokens_file``: one ``<scope> <token>`` per line,
  e.g. ``read 3q2-...``; blank lines and lines starting with ``#`` are skipped.

Every token must be at least :data:`MIN_TOKEN_BYTES` bytes of printable ASCII
without spaces (what a bearer header can carry); make one with
``python -c 'import secrets; print(secrets.token_urlsafe(32))'``. At least one
``admin`` token is required, and one token cannot have two scopes.
Presented tokens are compared with :func:`hmac.compare_digest` against every
configured token, so the time taken does not depend on where they differ.
"""

from __future__ import annotations

import enum
import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from spanedge.errors import InvalidToken

ENV_ADMIN = "SPANEDGE_TOKEN"
ENV_READ = "SPANEDGE_READ_TOKEN"
ENV_FILE = "SPANEDGE_TOKENS_FILE"
MIN_TOKEN_BYTES = 32
HOW_TO_MAKE_ONE = "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class TokenScope(enum.StrEnum):
    """What a token may do; ``admin`` includes ``read``."""

    READ = "read"
    ADMIN = "admin"

    def allows(self, needed: TokenScope) -> bool:
        """True if a token of this scope may do what needs ``needed``."""
        return self is TokenScope.ADMIN or needed is TokenScope.READ


@dataclass(frozen=True)
class Grant:
    """What a presented token may do, and where it was configured (for the audit log; never the token)."""

    scope: TokenScope
    source: str


def check_token(token: str, where: str) -> str:
    """Return ``token`` if it is strong enough and can travel in a bearer header; else raise.

    Args:
        token: the configured token (already stripped of surrounding whitespace).
        where: where it was configured, for the message, e.g. ``"SPANEDGE_TOKEN"``.

    Raises:
        InvalidToken: shorter than :data:`MIN_TOKEN_BYTES` bytes, or with characters
            other than printable ASCII without spaces. The message never shows the token.
    """
    bad = sorted({f"U+{ord(c):04X}" for c in token if not ("!" <= c <= "~")})
    if bad:
        msg = (
            f"{where}: the API token has characters a bearer header cannot carry ({', '.join(bad[:5])}); "
            f"use printable ASCII without spaces: {HOW_TO_MAKE_ONE}"
        )
        raise InvalidToken(msg)
    size = len(token.encode())
    if size < MIN_TOKEN_BYTES:
        msg = f"{where}: the API token has {size} bytes, fewer than {MIN_TOKEN_BYTES}; {HOW_TO_MAKE_ONE}"
        raise InvalidToken(msg)
    return token


class Tokens:
    """The configured tokens and their scopes. Its ``repr`` shows only how many there are."""

    __slots__ = ("_tokens",)

    def __init__(self, tokens: Iterable[tuple[TokenScope, str, str]]) -> None:
        """Check and keep ``(scope, token, where)`` triples; ``where`` names each token's source.

        Raises:
            InvalidToken: a token is weak or malformed, a token has two scopes, or no token is ``admin``.
        """
        found: dict[str, Grant] = {}
        for scope, token, where in tokens:
            check_token(token, where)
            earlier = found.get(token)
            if earlier is not None and earlier.scope is not scope:
                msg = (
                    f"{where}: this {scope} token is also configured as {earlier.scope} ({earlier.source}); "
                    "give each scope its own token"
                )
                raise InvalidToken(msg)
            found.setdefault(token, Grant(scope, where))
        if not any(grant.scope is TokenScope.ADMIN for grant in found.values()):
            msg = (
                f"the hub needs an admin API token and has none: export {ENV_ADMIN}=<token>, pass --token-file FILE, "
                f"or add an 'admin <token>' line to {ENV_FILE}; {HOW_TO_MAKE_ONE}"
            )
            raise InvalidToken(msg)
        self._tokens = tuple((token.encode(), grant) for token, grant in found.items())

    def identify(self, presented: str | bytes | None) -> Grant | None:
        """The grant of the presented token, or ``None`` if it is missing or unknown.

        Every configured token is compared, in constant time each, whatever matches.
        """
        if presented is None:
            return None
        given = presented.encode() if isinstance(presented, str) else presented
        match: Grant | None = None
        for token, grant in self._tokens:
            if hmac.compare_digest(given, token):
                match = grant
        return match

    def scope_of(self, presented: str | bytes | None) -> TokenScope | None:
        """The scope of the presented token, or ``None`` if it is missing or unknown."""
        grant = self.identify(presented)
        return None if grant is None else grant.scope

    def allows(self, presented: str | bytes | None, needed: TokenScope) -> bool:
        """True if the presented token exists and its scope allows ``needed``."""
        scope = self.scope_of(presented)
        return scope is not None and scope.allows(needed)

    def count(self, scope: TokenScope) -> int:
        """How many tokens have ``scope``."""
        return sum(1 for _, grant in self._tokens if grant.scope is scope)

    def __repr__(self) -> str:
        return f"Tokens(admin={self.count(TokenScope.ADMIN)}, read={self.count(TokenScope.READ)})"


def parse_tokens_file(text: str, where: str) -> list[tuple[TokenScope, str, str]]:
    """Parse ``<scope> <token>`` lines into ``(scope, token, where)`` triples.

    Raises:
        InvalidToken: a line is not two fields or names an unknown scope (the message names the line).
    """
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
        here = f"{where}:{number}"
        if len(fields) != 2:
            msg = f"{here}: expected '<scope> <token>' (scope read or admin), got {len(fields)} fields"
            raise InvalidToken(msg)
        try:
            scope = TokenScope(fields[0])
        except ValueError:
            shown = repr(fields[0]) if len(fields[0]) <= 8 else f"of {len(fields[0])} characters (is the token first?)"
            msg = f"{here}: unknown scope {shown}; write '<scope> <token>' with scope read or admin"
            raise InvalidToken(msg) from None
        found.append((scope, fields[1], here))
    return found


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not text"
        msg = f"cannot read the {what} {path}: {reason}"
        raise InvalidToken(msg) from None


def load_tokens(
    token_file: Path | None = None,
    tokens_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Tokens:
    """The hub's tokens from the environment and files (see the module docstring).

    Args:
        token_file: a file holding the admin token; wins over ``SPANEDGE_TOKEN``.
        tokens_file: a ``<scope> <token>`` file; default: the file named by ``SPANEDGE_TOKENS_FILE``.
        environ: the environment to read (default: ``os.environ``).

    Raises:
        InvalidToken: a file cannot be read or is malformed, a token is weak, or no admin token is configured.
    """
    env = os.environ if environ is None else environ
    found: list[tuple[TokenScope, str, str]] = []
    if token_file is not None:
        admin = _read(token_file, "token file").strip()
        if not admin:
            msg = f"the token file {token_file} is empty; write a token into it: {HOW_TO_MAKE_ONE}"
            raise InvalidToken(msg)
        found.append((TokenScope.ADMIN, admin, str(token_file)))
    elif env.get(ENV_ADMIN, "").strip():
        found.append((TokenScope.ADMIN, env[ENV_ADMIN].strip(), ENV_ADMIN))
    if env.get(ENV_READ, "").strip():
        found.append((TokenScope.READ, env[ENV_READ].strip(), ENV_READ))
    if tokens_file is None and env.get(ENV_FILE):
        tokens_file = Path(env[ENV_FILE])
    if tokens_file is not None:
        found.extend(parse_tokens_file(_read(tokens_file, f"tokens file ({ENV_FILE})"), str(tokens_file)))
    return Tokens(found)
