"""A PySpark streaming data source over the hub's ingest log (format ``spanedge-log``).

Usage::

    spark.readStream.format("spanedge-log")
        .option("path", "<state>/ingest/<app>").option("app", "<app>")
        .option("reader", "<query id>").load()

Offsets are ``{"pos": <byte offset>}`` in the log (see :mod:`hub.log`); a
micro-batch reads whole lines between two offsets, one partition per
segment, parsed by pyarrow into Arrow record batches. ``commit(end)``
records the reader's progress in the log directory, which lets the log
delete the segments every reader has passed.

These classes are pickled by reference: the ``hub`` package must be
installed where the Spark Python workers run.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pa_json
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from hub import log as ingest_log

#: The columns of every row the source yields.
SCHEMA_DDL = "app STRING, site STRING, stream STRING, seq BIGINT, event_time DOUBLE, key STRING, value STRING"

#: The columns of a log line, and of every record between hub operators.
ROW_SCHEMA = pa.schema(
    [
        ("site", pa.string()),
        ("stream", pa.string()),
        ("seq", pa.int64()),
        ("event_time", pa.float64()),
        ("key", pa.string()),
        ("value", pa.string()),
    ]
)
_BLOCK_BYTES = 4 * 1024 * 1024


def parse_lines(data: bytes, app: str) -> pa.Table:
    """Parse log lines into an Arrow table with the source's columns."""
    if not data:
        return pa.table({"app": pa.array([], pa.string()), **{f.name: pa.array([], f.type) for f in ROW_SCHEMA}})
    table = pa_json.read_json(
        io.BytesIO(data),
        read_options=pa_json.ReadOptions(block_size=max(_BLOCK_BYTES, min(len(data), 64 * 1024 * 1024))),
        parse_options=pa_json.ParseOptions(explicit_schema=ROW_SCHEMA, unexpected_field_behavior="ignore"),
    )
    table = table.select([f.name for f in ROW_SCHEMA])
    apps = pa.repeat(pa.scalar(app, pa.string()), table.num_rows)
    return table.add_column(0, "app", apps)


class LogRange(InputPartition):
    """One micro-batch partition: a byte range of one segment."""

    def __init__(self, start: int, end: int) -> None:
        """Cover the log bytes ``[start, end)``."""
        super().__init__((start, end))
        self.start = start
        self.end = end


class IngestLogReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads the ingest log of one app by byte offset."""

    def __init__(self, options: dict[str, str]) -> None:
        """Read ``path``, ``app``, ``reader`` and ``maxSegmentsPerBatch`` from the options."""
        self.path = Path(options["path"])
        self.app = options.get("app") or self.path.name
        self.reader = options.get("reader", "default")
        self.max_segments = int(options.get("maxSegmentsPerBatch", "8"))
        self._target: int | None = None

    def initialOffset(self) -> dict[str, Any]:
        """Start where the reader's registration says (default: the oldest retained byte)."""
        return {"pos": ingest_log.register_reader(self.path, self.reader)}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """Return the end of the last complete record, capped per batch unless Spark wants all.

        Accepts both the 4.2+ signature ``(start, limit)`` and the older one
        without arguments.
        """
        end = ingest_log.tail(self.path)
        if self._target is not None:
            end = min(end, self._target)
        if start is not None and not isinstance(limit, ReadAllAvailable):
            begin = int(start["pos"])
            if end > begin:
                end = ingest_log.limit_end(self.path, begin, end, self.max_segments)
            end = max(end, begin)
        return {"pos": end}

    def reportLatestOffset(self) -> dict[str, Any]:
        """Report the log's tail for the query's progress."""
        return {"pos": ingest_log.tail(self.path)}

    def prepareForTriggerAvailableNow(self) -> None:
        """Remember the current tail: an availableNow query stops there."""
        self._target = ingest_log.tail(self.path)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[LogRange]:
        """One partition per segment touched by ``[start, end)``."""
        return [LogRange(a, b) for a, b in ingest_log.split_ranges(self.path, int(start["pos"]), int(end["pos"]))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the partition's records as Arrow record batches."""
        assert isinstance(partition, LogRange)
        data = ingest_log.read_bytes(self.path, partition.start, partition.end)
        yield from parse_lines(data, self.app).to_batches(max_chunksize=65536)

    def commit(self, end: dict[str, Any]) -> None:
        """Record the reader's progress and delete the segments no reader needs."""
        ingest_log.commit(self.path, self.reader, int(end["pos"]))


class IngestLogSource(DataSource):
    """The ``spanedge-log`` data source (streaming reads only)."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "spanedge-log"

    def schema(self) -> str:
        """Columns: app, site, stream, seq, event_time (epoch seconds), key, value (JSON)."""
        return SCHEMA_DDL

    def streamReader(self, schema: StructType) -> IngestLogReader:
        """Return the reader for the ``path`` option."""
        if "path" not in self.options:
            msg = "the spanedge-log source needs .option('path', '<state>/ingest/<app>')"
            raise ValueError(msg)
        return IngestLogReader(dict(self.options))
