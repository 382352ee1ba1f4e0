"""Dead letters of the hub's operators, counted by the queries' sinks and shown by ``GET /metrics``.

:data:`DEAD_LETTERS` counts them per app and query; :data:`OPERATOR_ERRORS`
counts the same records per app and the site they came from, so a rollout's
``hub_errors`` gate can tell which site's records the hub's operators raise on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

__all__ = ["DEAD_LETTERS", "OPERATOR_ERRORS", "UNKNOWN_SITE", "DeadLetterCounts", "OperatorErrors"]

#: The origin site counted for a record that names none.
UNKNOWN_SITE = "unknown"


class DeadLetterCounts:
    """Dead letters of the hub's operators, per app and query, counted by the queries' sinks (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, app: str, query: str, n: int) -> None:
        """Count ``n`` more dead letters of ``query`` of ``app``."""
        with self._lock:
            self._counts[app, query] = self._counts.get((app, query), 0) + n

    def snapshot(self) -> dict[tuple[str, str], int]:
        """The counts so far, by ``(app, query)``."""
        with self._lock:
            return dict(self._counts)


class OperatorErrors:
    """Records the hub's operators raised on, per app and origin site, counted by the queries' sinks (thread-safe).

    The counts only grow while the hub runs and start from zero when it starts.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, app: str, sites: Iterable[str | None]) -> None:
        """Count one more error of ``app`` per item of ``sites``: the origin site of a record an operator raised on."""
        keys = [(app, site or UNKNOWN_SITE) for site in sites]
        with self._lock:
            for key in keys:
                self._counts[key] = self._counts.get(key, 0) + 1

    def counts(self, app: str) -> dict[str, int]:
        """``app``'s counts so far, by origin site (a site with none is left out)."""
        with self._lock:
            return {site: n for (name, site), n in self._counts.items() if name == app}

    def snapshot(self) -> dict[tuple[str, str], int]:
        """Every app's counts so far, by ``(app, site)``."""
        with self._lock:
            return dict(self._counts)


#: The hub process's dead-letter counts, shown as ``spanedge_hub_dead_letters_total``.
DEAD_LETTERS = DeadLetterCounts()

#: The hub process's operator errors by origin site, shown as ``spanedge_hub_operator_errors_total``.
OPERATOR_ERRORS = OperatorErrors()
