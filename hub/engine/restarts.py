"""Restarting failed hub queries after a growing wait.

A query that fails restarts from its checkpoint 1 s after its first
failure, then after 2, 5, 10, 30 and 60 s while it keeps failing (a poison
batch retries every minute), and from 1 s again once it has run for
:data:`STABLE_AFTER_S`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

RESTART_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Waits before restarting a failed query, by consecutive failure; the last one repeats."""
STABLE_AFTER_S = 300.0
"""A query that ran this long before failing starts again from the shortest wait."""


@dataclass
class Restarts:
    """Failures and restarts of one query, kept across its restarts."""

    total: int = 0
    consecutive: int = 0
    started_at: float = 0.0
    failed_at: float | None = None

    @property
    def delay(self) -> float:
        """The wait before the next restart."""
        return RESTART_DELAYS_S[min(self.consecutive, len(RESTART_DELAYS_S) - 1)]

    def due(self, now: float) -> bool:
        """True once the wait after the current failure is over."""
        return self.failed_at is not None and now >= self.failed_at + self.delay


class RestartBook:
    """The :class:`Restarts` of every query, by app and sink replica (not thread-safe: callers lock)."""

    def __init__(self) -> None:
        """Start with no failures."""
        self._queries: dict[tuple[str, str], Restarts] = {}

    def total(self, app: str, replica: str) -> int:
        """How often the query of ``replica`` in ``app`` was restarted."""
        r = self._queries.get((app, replica))
        return r.total if r is not None else 0

    def failed(self, app: str, replica: str, error: BaseException, now: float) -> bool:
        """Note that the query is down with ``error``; return True once its restart is due.

        The failure is logged once, when first seen.
        """
        r = self._queries.setdefault((app, replica), Restarts(started_at=now))
        if r.failed_at is None:
            if now - r.started_at >= STABLE_AFTER_S:
                r.consecutive = 0
            r.failed_at = now
            log.error(
                "app %s: query %s failed; restarting it from its checkpoint in %.0f s: %s",
                app,
                replica,
                r.delay,
                error,
            )
        return r.due(now)

    def retry_later(self, app: str, replica: str, now: float) -> None:
        """The restart failed: wait again before the next attempt."""
        self._queries[(app, replica)].failed_at = now

    def restarted(self, app: str, replica: str, now: float) -> None:
        """The query runs again."""
        r = self._queries[(app, replica)]
        r.total += 1
        r.consecutive += 1
        r.started_at = now
        r.failed_at = None
        log.warning("app %s: query %s restarted (restart %d)", app, replica, r.total)

    def forget(self, app: str, replica: str) -> None:
        """Drop the history of a query that no longer exists."""
        self._queries.pop((app, replica), None)
