"""Dead letters of the hub's operators, counted by the queries' sinks and shown by ``GET /metrics``."""

from __future__ import annotations

import threading

__all__ = ["DEAD_LETTERS", "DeadLetterCounts"]


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


#: The hub process's dead-letter counts, shown as ``spanedge_hub_dead_letters_total``.
DEAD_LETTERS = DeadLetterCounts()
