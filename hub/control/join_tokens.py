"""The hub's join tokens: issued by ``spanedge site add``, redeemed once by ``spanedge agent join``.

The tokens live in ``<state-dir>/join-tokens.json`` (mode 0600), which holds,
per token id, the site it enrols, when it was issued, when it expires, when it
was used and the SHA-256 of its text (:func:`spanedge.join_token.token_digest`),
never the token itself; the file survives a restart. A token is refused when it
is malformed, matches nothing issued (an altered token among them), expired,
already used, or names another site than the request; each refusal says why.
After :data:`MAX_FAILURES` refusals within :data:`FAILURE_WINDOW_S` seconds
every join from that address is refused with 429 until the window passes, so
a burst of guesses gets nowhere (a secret has 256 bits anyway), and a gateway
joining from elsewhere meanwhile is not held up by it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hub.control.state import Documents
from spanedge.errors import InvalidJoinToken, SpanEdgeError
from spanedge.join_token import JoinToken, digest_matches, new_join_token, parse_join_token, token_digest

#: How long a join token is valid, by default (``spanedge hub --join-token-ttl``).
DEFAULT_TTL_S = 3600.0
#: Refused joins from one address allowed within :data:`FAILURE_WINDOW_S` before its joins are refused for a while.
MAX_FAILURES = 20
FAILURE_WINDOW_S = 60.0
#: Used and expired tokens are kept this long (to say why a late replay is refused), then forgotten.
KEEP_S = 7 * 86400.0


class JoinRefused(SpanEdgeError):
    """A join was refused: ``status`` is the HTTP status to answer with, the message says why."""

    def __init__(self, message: str, status: int = 403) -> None:
        """Keep the status."""
        super().__init__(message)
        self.status = status


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds")


class JoinTokens:
    """The join tokens of one hub, in ``path``; thread-safe."""

    def __init__(
        self,
        path: Path,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.time,
        documents: Documents | None = None,
    ) -> None:
        """Keep tokens in ``path``, each valid ``ttl_s`` seconds.

        With ``documents`` they are kept there as ``join-tokens`` (``path`` is read once, when they hold none).

        Raises:
            SpanEdgeError: ``path`` exists but cannot be read as a token file.
        """
        if not ttl_s > 0:
            msg = f"join token lifetime must be a positive number of seconds, got {ttl_s!r}"
            raise ValueError(msg)
        self.path = Path(path)
        self.documents = documents
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}  # by client address
        self._tokens = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        kept = self.documents.load_document("join-tokens") if self.documents is not None else None
        if kept is not None:
            return dict(kept)
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict):
                raise TypeError(type(data).__name__)
        except (OSError, ValueError, TypeError) as exc:
            msg = f"cannot read the join tokens {self.path}: {exc}; delete the file (outstanding tokens are lost)"
            raise SpanEdgeError(msg) from None
        return data

    def _save(self) -> None:
        if self.documents is not None:
            self.documents.save_document("join-tokens", self._tokens)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(self._tokens, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.path)

    def issue(self, site: str, ca_sha256: str, ttl_s: float | None = None) -> tuple[JoinToken, float]:
        """A new token for ``site`` pinning the CA ``ca_sha256``, and when it expires (epoch seconds)."""
        token = new_join_token(site, ca_sha256)
        now = self._clock()
        expires = now + (self.ttl_s if ttl_s is None else ttl_s)
        with self._lock:
            self._tokens = {
                k: v for k, v in self._tokens.items() if max(v["expires_at"], v.get("used_at", 0)) + KEEP_S > now
            }
            self._tokens[token.token_id] = {
                "site": site,
                "sha256": token_digest(token.text),
                "issued_at": now,
                "expires_at": expires,
            }
            self._save()
        return token, expires

    def redeem(self, text: object, site: str | None = None, client: str = "") -> JoinToken:
        """Use the token ``text`` up, for ``site`` if given, asked from address ``client``; return it parsed.

        Raises:
            JoinRefused: the token is refused (the message says why; 429 while that address's refusals are too many).
        """
        now = self._clock()
        with self._lock:
            for address in list(self._failures):
                times = self._failures[address]
                while times and now - times[0] > FAILURE_WINDOW_S:
                    times.popleft()
                if not times:
                    del self._failures[address]
            refused = len(self._failures.get(client, ()))
            if refused >= MAX_FAILURES:
                msg = (
                    f"too many refused joins from this address ({refused} in {FAILURE_WINDOW_S:.0f} s); "
                    "wait a minute and try again with a valid token"
                )
                raise JoinRefused(msg, 429)
            try:
                return self._redeem(text, site, now)
            except JoinRefused:
                self._failures.setdefault(client, deque()).append(now)
                raise

    def _redeem(self, text: object, site: str | None, now: float) -> JoinToken:
        try:
            token = parse_join_token(text)
        except InvalidJoinToken as exc:
            raise JoinRefused(str(exc), 400) from None
        entry = self._tokens.get(token.token_id)
        # a stored digest is compared even for an unknown id, so the time taken does not tell ids apart
        if not digest_matches(token.text, entry["sha256"] if entry else "0" * 64) or entry is None:
            msg = "this join token was not issued by this hub, or was altered; make a new one with 'spanedge site add'"
            raise JoinRefused(msg, 403)
        if "withdrawn_at" in entry:
            msg = f"site {entry['site']!r} was revoked at {_utc(entry['withdrawn_at'])}, which withdrew this join token"
            raise JoinRefused(msg, 403)
        if "used_at" in entry:
            msg = (
                f"this join token for site {entry['site']!r} was already used at {_utc(entry['used_at'])}; "
                "join tokens are single use: make a new one with 'spanedge site add' (or revoke the site if you did not join it)"
            )
            raise JoinRefused(msg, 403)
        if now >= entry["expires_at"]:
            msg = (
                f"this join token for site {entry['site']!r} expired at {_utc(entry['expires_at'])}; "
                f"make a new one with 'spanedge site add {entry['site']}'"
            )
            raise JoinRefused(msg, 403)
        if site is not None and site != entry["site"]:
            msg = f"this join token enrols site {entry['site']!r}, not {site!r}; use the token made for {site!r}"
            raise JoinRefused(msg, 403)
        entry["used_at"] = now
        self._save()
        return token

    def withdraw(self, site: str) -> int:
        """Invalidate every unused token of ``site`` (it is revoked); how many there were."""
        now = self._clock()
        with self._lock:
            pending = [v for v in self._tokens.values() if v["site"] == site and "used_at" not in v]
            for entry in pending:
                entry["withdrawn_at"] = entry["used_at"] = now
            if pending:
                self._save()
        return len(pending)
