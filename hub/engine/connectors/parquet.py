"""The Parquet sink: each micro-batch written by Spark's own writer into a partition of its own.

The dataset under the sink's path is partitioned by ``app``, ``sink`` (the
sink operator's name), ``date`` (of the event time, UTC, ``YYYY-MM-DD``)
and ``batch`` (``<query>-<batch id>``). A batch is written with Spark's
dynamic partition overwrite, which replaces only the partitions the batch
has rows in: a batch that Spark replays after a hub restart overwrites
what its first run wrote, and no other batch's files are touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PARTITIONS = ("app", "sink", "date", "batch")
"""The dataset's partition columns, outermost first."""


def batch_label(query: str, batch_id: int) -> str:
    """The ``batch`` partition of micro-batch ``batch_id`` of ``query``."""
    return f"{query}-{batch_id:012d}"


def with_partitions(table: pa.Table, app: str, sink: str, batch: str) -> pa.Table:
    """``table`` with its partition columns; ``date`` is the UTC day of each row's ``event_time`` (epoch seconds)."""
    seconds = pc.cast(pc.floor(table.column("event_time")), pa.int64())
    days = pc.strftime(pc.cast(seconds, pa.timestamp("s", tz="UTC")), format="%Y-%m-%d")
    n = table.num_rows
    for name, column in (
        ("app", pa.array([app] * n, pa.string())),
        ("sink", pa.array([sink] * n, pa.string())),
        ("date", days),
        ("batch", pa.array([batch] * n, pa.string())),
    ):
        table = table.append_column(name, column)
    return table


def write_parquet(spark: SparkSession, table: pa.Table, path: str, app: str, sink: str, batch: str) -> None:
    """Write ``table`` (a batch's results) to the dataset at ``path``, replacing only the batch's own partitions."""
    frame = spark.createDataFrame(with_partitions(table, app, sink, batch))
    (frame.write.mode("overwrite").option("partitionOverwriteMode", "dynamic").partitionBy(*PARTITIONS).parquet(path))
