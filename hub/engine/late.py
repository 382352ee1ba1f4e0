"""Counting the records Spark drops behind the watermark, so none is lost silently."""

from __future__ import annotations

import logging
import threading
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

log = logging.getLogger(__name__)


class LateRecords(StreamingQueryListener):
    """A query listener that totals ``numRowsDroppedByWatermark`` per query id.

    Spark discards records that arrive after a window's watermark and
    allowed lateness; each progress event says how many, and this listener
    keeps the running total, logs every drop, and feeds ``/metrics``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dropped: dict[str, int] = {}

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to do when a query starts."""

    def onQueryProgress(self, event: Any) -> None:
        """Add the late records dropped in the batch this event reports."""
        progress = event.progress
        dropped = sum(int(op.numRowsDroppedByWatermark) for op in progress.stateOperators)
        if dropped:
            query = str(progress.id)
            with self._lock:
                self._dropped[query] = self._dropped.get(query, 0) + dropped
            log.warning(
                "query %s (%s) dropped %d records that arrived after the watermark and allowed lateness",
                progress.name,
                query,
                dropped,
            )

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to do while a query is idle."""

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to do when a query ends (its total is kept)."""

    def dropped(self, query_id: str) -> int:
        """Late records dropped so far by the query ``query_id``."""
        with self._lock:
            return self._dropped.get(query_id, 0)
