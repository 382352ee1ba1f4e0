"""Totalling the per-micro-batch counts the hub's queries observe on their operators' inputs and outputs.

The compiler counts each hub operator's input and output records with
``DataFrame.observe`` (see :mod:`hub.engine.compile`); Spark reports the counts of
a micro-batch in the query's progress (``observedMetrics``). This listener
keeps, per query and observation, the running total and a rate: the
count of the last batch that reported the observation over the time since
the previous such batch started (as Spark's ``inputRowsPerSecond`` is the
batch's input over the time since the previous trigger), or over the
batch's duration the first time. A batch without new input (one that only
moves the watermark to emit windows) reports zero for every step before
the window: those zeros leave the rates as they were, so the next batch
with input measures what arrived since the previous one instead of the
rates dropping to zero between two batches. When a query goes idle (no new
data, nothing to emit), its rates fall to zero.

Counts are of the records Spark processed: a batch replayed after a crash,
or a task retried after a failure, is counted again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

#: The column of an observation that holds its row count.
COUNT_COLUMN = "n"


@dataclass
class _QueryCounts:
    totals: dict[str, int] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    reported_at: dict[str, float] = field(default_factory=dict)
    """Epoch seconds the last batch that counted each observation started."""


def progress_time(timestamp: Any) -> float | None:
    """Epoch seconds of a progress timestamp (``2024-05-01T10:00:00.000Z``), None if unreadable."""
    try:
        return datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class ObservedCounts(StreamingQueryListener):
    """A query listener that totals each query's observed row counts (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queries: dict[str, _QueryCounts] = {}

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to do when a query starts."""

    def onQueryProgress(self, event: Any) -> None:
        """Add the counts of the batch this event reports, and set the rates from them."""
        progress = event.progress
        observed = progress.observedMetrics
        if not observed:
            return
        started = progress_time(progress.timestamp)
        duration_s = float(progress.batchDuration or 0) / 1000.0
        has_input = int(progress.numInputRows or 0) > 0
        with self._lock:
            counts = self._queries.setdefault(str(progress.id), _QueryCounts())
            for name, row in observed.items():
                n = int(row[COUNT_COLUMN] or 0)
                if n == 0 and not has_input:
                    continue  # a batch that only emits windows: nothing went through this step
                previous = counts.reported_at.get(name)
                interval = started - previous if started is not None and previous is not None else duration_s
                if started is not None:
                    counts.reported_at[name] = started
                counts.totals[name] = counts.totals.get(name, 0) + n
                counts.rates[name] = n / interval if interval > 0 else 0.0

    def onQueryIdle(self, event: Any) -> None:
        """A query without new data processes nothing: its rates are zero."""
        with self._lock:
            counts = self._queries.get(str(event.id))
            if counts is not None:
                counts.rates = dict.fromkeys(counts.rates, 0.0)

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to do when a query ends (its totals are kept; a restart continues them)."""

    def of(self, query_id: str) -> dict[str, tuple[int, float]]:
        """Observation name → ``(total records, records/s in the last batch)`` of the query ``query_id``."""
        with self._lock:
            counts = self._queries.get(query_id)
            if counts is None:
                return {}
            return {name: (total, counts.rates.get(name, 0.0)) for name, total in counts.totals.items()}
