"""One streaming query per sink replica at the hub: its sink, checkpoint, reader and Spark handle.

Also the hub operators' records in and out, from the counts the queries
observe (:func:`operator_rates`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hub.engine.session import spark_ended
from hub.engine.sinks import BatchSink
from spanedge.app import App
from spanedge.plan import Plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

    from hub.engine.compile import Counted
    from hub.engine.input_rates import InputRates
    from hub.engine.late import LateRecords

log = logging.getLogger(__name__)

FIRST_BATCH_WAIT_S = 60.0
"""How long a deployment waits for a query's first trigger before starting the next query."""

STOP_DRAIN_S = 5.0
"""How long stopping a query waits for its running micro-batch to finish before cancelling it."""


@dataclass
class Query:
    """The query ending at the sink ``replica``; ``reader`` (its name in the ingest log) is its checkpoint's name."""

    replica: str
    sink: BatchSink
    checkpoint: Path
    reader: str
    fingerprint: str
    handle: StreamingQuery | None = None
    counted: dict[str, list[Counted]] = field(default_factory=dict)
    """What the counts the query observes stand for, by observation name (:meth:`hub.engine.compile.Compiler.counted`)."""
    label: str = ""
    """The query's name in Spark (within its app), if not ``replica``: the handover's old-placement query has its own."""
    watermarked: bool = False
    """Whether the query runs a window at the hub, so its progress reports a watermark once a batch has read records."""
    windowed: bool = False
    """Whether every record it reads reaches its sink through a hub window, so its watermark bounds what it writes."""

    @property
    def running(self) -> bool:
        """True while Spark runs the query."""
        return self.handle is not None and self.handle.isActive

    def failure(self) -> BaseException | None:
        """The error the query stopped with; None while it runs, before it starts, or once it finished."""
        if self.handle is None or self.handle.isActive:
            return None
        return self.handle.exception()

    def start(self, app: str, df: DataFrame, trigger: str) -> StreamingQuery:
        """Start writing ``df`` to the sink, every ``trigger`` (or ``availableNow``), from the checkpoint."""
        writer = (
            df.writeStream.queryName(f"spanedge:{app}:{self.label or self.replica}")
            .foreachBatch(self.sink)
            .option("checkpointLocation", str(self.checkpoint))
            .outputMode("update" if self.sink.closer is not None else "append")
        )
        if trigger.replace(" ", "").replace("-", "").lower() == "availablenow":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=trigger)
        self.sink.stop_requested = False
        self.handle = writer.start()
        return self.handle

    def stop(self, drain: float = STOP_DRAIN_S) -> None:
        """Stop the query once its running batch is done (a failure to stop is logged) and disconnect its sink.

        Args:
            drain: how long to wait for a running batch to end before cancelling it.
        """
        self._finish_batch(drain)
        self.sink.stopping()  # a batch waiting for an unreachable database gives up, so the query can stop
        if self.handle is not None:
            try:
                self.handle.stop()
            except Exception as exc:
                if spark_ended(exc):  # the JVM got the stop signal too and ended its queries itself
                    log.info("query %s: Spark had already stopped", self.replica)
                else:
                    log.exception("stopping query %s failed", self.replica)
            self.handle = None
        self.sink.close()

    def _finish_batch(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a running micro-batch to end.

        Stopping a query cancels the Spark job of the batch it runs, and Spark
        logs that job's cancelled broadcasts and shuffle reads as errors; between
        batches the stop is quiet. A batch still running at ``timeout`` (one
        waiting for an unreachable database) is cancelled and runs again later.
        """
        deadline = time.monotonic() + timeout
        while self.handle is not None and time.monotonic() < deadline:
            try:
                if not self.handle.status.get("isTriggerActive"):
                    return
            except Exception:  # the query or the JVM ended: nothing to wait for
                return
            time.sleep(0.05)

    def metrics(self, restarts: int, late: LateRecords, rates: InputRates | None = None) -> dict[str, Any]:
        """Status, last batch id and duration, input rate, state rows, sink counts, restarts, late records, result latency.

        ``input_rows_per_s`` is the query's recent rate from ``rates`` if given
        (:class:`hub.engine.input_rates.InputRates`), else Spark's for its last batch;
        ``result_latency`` the sink's over the last minute (:meth:`hub.engine.sinks.BatchSink.result_latency`).
        """
        entry: dict[str, Any] = {"active": False, "sink_batches": self.sink.batches, "sink_rows": self.sink.rows}
        entry["restarts"] = restarts
        entry["result_latency"] = self.sink.result_latency()
        entry.update(self.sink.status())
        if self.sink.share is not None or self.sink.left_to_other:
            entry["handover_left_to_other"] = self.sink.left_to_other
        handle = self.handle
        if handle is None:
            return entry
        entry["active"] = handle.isActive
        error = handle.exception()
        entry["error"] = str(error) if error is not None else None
        entry["late_dropped"] = late.dropped(str(handle.id)) + (self.sink.closer.late if self.sink.closer else 0)
        progress = handle.lastProgress
        if progress:
            entry["batch_id"] = progress.get("batchId")
            entry["batch_ms"] = (progress.get("durationMs") or {}).get("triggerExecution")
            entry["input_rows_per_s"] = progress.get("inputRowsPerSecond")
            entry["processed_rows_per_s"] = progress.get("processedRowsPerSecond")
            entry["input_rows"] = progress.get("numInputRows")
            entry["state_rows"] = sum(int(s.get("numRowsTotal", 0)) for s in progress.get("stateOperators") or [])
        if rates is not None:
            entry["input_rows_per_s"] = rates.rate(str(handle.id))
        return entry


OperatorFigures = dict[str, float | int]
"""One hub operator's ``{"in", "out"}`` (records so far) and ``{"in_rate", "out_rate"}`` (records/s)."""


def operator_rates(
    queries: Iterable[tuple[Mapping[str, list[Counted]], Mapping[str, tuple[int, float]]]],
) -> dict[str, OperatorFigures]:
    """Per hub operator its records in and out, from its queries' observed counts.

    Args:
        queries: per query, what its observations stand for (:attr:`Query.counted`) and
            their ``(total, records/s)`` (:meth:`hub.engine.operator_counts.ObservedCounts.of`).

    Every query computes its upstream operators over the same log, so an
    operator upstream of several sinks is in several queries: each set of
    replicas computed together is counted once, from the query that has
    counted the most records of it (the one furthest ahead). An operator's
    figures then add up disjoint sets of its replicas, the larger sets first
    (per-site replicas merged in one query cover each one computed alone in
    another). An operator no query has reported on yet is left out.
    """
    best: dict[Counted, tuple[int, float]] = {}
    for counted, counts in queries:
        for name, targets in counted.items():
            if name not in counts:
                continue
            for target in targets:
                if target not in best or counts[name][0] > best[target][0]:
                    best[target] = counts[name]
    out: dict[str, OperatorFigures] = {}
    covered: dict[tuple[str, str], set[str]] = {}
    for target in sorted(best, key=lambda t: (-len(t.replicas), t.operator, t.direction, t.replicas)):
        seen = covered.setdefault((target.operator, target.direction), set())
        if seen.intersection(target.replicas):
            continue
        seen.update(target.replicas)
        total, rate = best[target]
        figures = out.setdefault(target.operator, {})
        figures[target.direction] = int(figures.get(target.direction, 0)) + total
        rate_key = f"{target.direction}_rate"
        figures[rate_key] = round(float(figures.get(rate_key, 0.0)) + rate, 3)
    return out


def await_first_batch(handle: StreamingQuery, timeout: float = FIRST_BATCH_WAIT_S) -> None:
    """Wait until ``handle`` finished its first trigger (or stopped, or ``timeout`` passed).

    Queries start one after another: when the first jobs of a fresh Spark
    driver ran concurrently, their tasks sometimes failed to deserialize
    (``java.io.OptionalDataException``), and kept failing until the driver
    restarted.
    """
    deadline = time.monotonic() + timeout
    while handle.isActive and handle.lastProgress is None and time.monotonic() < deadline:
        time.sleep(0.05)


@dataclass
class Deployed:
    """An app at the hub: the plan it runs and its queries by sink replica."""

    app: App
    plan: Plan
    queries: dict[str, Query] = field(default_factory=dict)
