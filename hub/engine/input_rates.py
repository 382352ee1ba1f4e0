"""Each hub query's input rows/s over the last seconds, as the dashboard and ``/metrics`` show it.

Spark's ``inputRowsPerSecond`` belongs to one micro-batch: a query's
``lastProgress`` keeps saying it until the next batch runs, and a query with
no new data runs none: after its input stops it repeats the last batch's
rate until Spark reports the query idle
(``spark.sql.streaming.noDataProgressEventInterval``, 10 s). :class:`InputRates` counts the rows
of the batches that started in the last :data:`WINDOW_S` seconds instead: the
rate follows the input as it changes and falls to zero when it stops.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from hub.engine.operator_counts import progress_time

WINDOW_S = 10.0
"""The input rate is over the batches that started in this many last seconds."""


class InputRates(StreamingQueryListener):
    """A query listener that keeps each query's recent batches: ``(start, rows read)`` (thread-safe)."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.time) -> None:
        """Rates over ``window_s`` seconds of ``clock`` (epoch seconds, as Spark's progress timestamps)."""
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._batches: dict[str, deque[tuple[float, int]]] = {}
        self._first: dict[str, float] = {}

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to do when a query starts."""

    def onQueryProgress(self, event: Any) -> None:
        """Note the batch this event reports: when it started and the rows it read."""
        progress = event.progress
        started = progress_time(progress.timestamp)
        if started is None:
            return
        query = str(progress.id)
        with self._lock:
            self._first.setdefault(query, started)
            self._batches.setdefault(query, deque()).append((started, int(progress.numInputRows or 0)))

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to do: an idle query runs no batch, so its rate falls as its batches age."""

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to do when a query ends (a restart keeps its id and continues)."""

    def rate(self, query_id: str, now: float | None = None) -> float | None:
        """Rows/s the query ``query_id`` read in the last :attr:`window_s` (or since its first batch); None before one."""
        now = self._clock() if now is None else now
        since = now - self.window_s
        with self._lock:
            batches = self._batches.get(query_id)
            if batches is None:
                return None
            while batches and batches[0][0] < since:
                batches.popleft()
            rows = sum(n for _, n in batches)
            span = min(self.window_s, now - self._first[query_id])
        if span <= 0:
            return None
        return round(rows / span, 3)
