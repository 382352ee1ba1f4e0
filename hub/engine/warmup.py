"""A throwaway streaming query that warms a standby hub's Spark driver before it leads.

The first micro-batch of a hub query on a fresh driver is slow: Spark
starts the Python worker daemon and the py4j callback server that
``foreachBatch`` calls back through, loads and compiles the classes of the
file source, of ``mapInArrow`` and of a window's state store, and the Python
worker imports the hub's operator code. On the 2-core development machine
that first batch took 19 s, all of it after a new leader had taken the lease.

:func:`warm_up` runs one batch of a query of the same shape (the log's
line format read by Spark's file source, a Python record-level filter over
Arrow batches, a 10 s window with a watermark, ``foreachBatch`` into
nothing) on one made-up record in a temporary directory, then removes the
directory, so a standby pays for all of that while it waits. The session
then says so (:func:`warmed`), and the engine starts a new leader's queries
together instead of each after the previous one's first batch
(:class:`hub.engine.builder.Starter`).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hub.engine import rows
from hub.engine.python_operators import record_level
from hub.engine.stopped_batch import StoppedMidBatch
from spanedge.operators import Kind, Operator

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: How long the throwaway batch may take before the warm-up gives up on it.
WARM_UP_TIMEOUT_S = 300.0
#: How often :func:`keep_warm` runs while the hub stands by: Spark closes a Python worker idle for a minute.
KEEP_WARM_S = 30.0
#: The session setting :func:`warm_up` sets once its batch ran (:func:`warmed` reads it).
WARMED_KEY = "spanedge.warmed"
#: The one record the throwaway query reads (a line of the ingest log's format).
SAMPLE_LINE = '{"site":"warm-up","stream":"warm-up","seq":1,"event_time":0.0,"key":"k","value":"{\\"n\\":1}"}\n'


def keep(value: Any) -> bool:
    """The throwaway query's filter: every record passes."""
    return True


def discarding(cancel: threading.Event) -> Callable[[DataFrame, int], None]:
    """The throwaway query's sink: run the batch, keep nothing; a batch that ``cancel`` cut short says so quietly."""

    def discard(df: DataFrame, batch_id: int) -> None:
        try:
            df.count()
        except Exception as exc:
            if not cancel.is_set():
                raise
            msg = "the throwaway warm-up batch was cut short: this hub leads now"
            raise StoppedMidBatch(msg) from exc

    return discard


def warm_up(
    spark: SparkSession,
    timeout_s: float = WARM_UP_TIMEOUT_S,
    scratch: Path | None = None,
    cancel: threading.Event | None = None,
) -> float | None:
    """Run one micro-batch of a throwaway query shaped like the hub's; the seconds it took.

    Its record and checkpoint go to a temporary directory in ``scratch`` (default: the system's), removed after.
    Once ``cancel`` is set (the hub takes the lease) the query is stopped within a second and None returned:
    a leader does not wait for its warm-up, its own first queries warm the driver.

    Raises:
        RuntimeError: the query failed, or did not finish its batch within ``timeout_s``; the message says which.
    """
    started = time.monotonic()
    cancel = cancel or threading.Event()
    directory = Path(tempfile.mkdtemp(prefix="spanedge-warm-up-", dir=scratch))
    try:
        source = directory / "in"
        source.mkdir()
        (source / "0.jsonl").write_text(SAMPLE_LINE)
        query = (
            _frame(spark, source)
            .writeStream.queryName("spanedge:warm-up")
            .foreachBatch(discarding(cancel))
            .option("checkpointLocation", str(directory / "checkpoint"))
            .outputMode("update")
            .trigger(availableNow=True)
            .start()
        )
        try:
            finished = False
            while not finished and not cancel.is_set() and time.monotonic() - started < timeout_s:
                finished = bool(query.awaitTermination(1))
        finally:
            query.stop()
        if cancel.is_set() and not finished:
            return None
        error = query.exception()
        if error is not None or not finished:
            why = f"failed: {error}" if error is not None else f"did not finish one batch within {timeout_s:g} s"
            msg = f"the standby's throwaway warm-up query {why}; the first query this hub runs starts cold"
            raise RuntimeError(msg)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    spark.conf.set(WARMED_KEY, "true")
    return time.monotonic() - started


def warmed(spark: SparkSession) -> bool:
    """Whether :func:`warm_up` ran its batch on ``spark``: its driver is past its first jobs."""
    return spark.conf.get(WARMED_KEY, "false") == "true"


def keep_warm(spark: SparkSession) -> None:
    """Run the throwaway filter over two records in two tasks, so the Python workers :func:`warm_up` started stay.

    A worker keeps the hub's operator code it imported; one Spark closed as idle
    is forked again at the next query's first batch and imports it all again.
    """
    from pyspark.sql import functions as F

    op = Operator("warm-up", Kind.FILTER, func=keep)
    frame = spark.range(0, 2, 1, 2).select(
        F.lit("warm-up").alias("site"),
        F.lit("warm-up").alias("stream"),
        F.col("id").alias("seq"),
        F.lit(0.0).alias("event_time"),
        F.lit("k").alias("key"),
        F.lit('{"n": 1}').alias("value"),
    )
    frame.mapInArrow(record_level(op), rows.SCHEMA_DDL).count()


def _frame(spark: SparkSession, source: Path) -> DataFrame:
    """The throwaway query's DataFrame: file source, Python filter, watermarked 10 s window."""
    from pyspark.sql import functions as F

    op = Operator("warm-up", Kind.FILTER, func=keep)
    lines = spark.readStream.schema(rows.SCHEMA_DDL).json(str(source))
    filtered = lines.mapInArrow(record_level(op), rows.SCHEMA_DDL)
    stamped = filtered.withColumn("_ts", F.timestamp_seconds("event_time")).withWatermark("_ts", "1 second")
    return stamped.groupBy(F.window("_ts", "10 seconds"), "key").agg(F.count(F.lit(1)).alias("n"))
