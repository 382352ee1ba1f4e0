"""The one interface between the ingest and Spark: :func:`read_log` turns an app's log into a streaming DataFrame.

Every hub query gets its records from :func:`read_log`, and nothing else
in the engine knows how they got there. Today the ingest writes
JSON-lines segments (:mod:`hub.ingest.log`) and hands each sealed segment to
every query as a hard link in the query's inbox folder; :func:`read_log`
reads that folder with Spark's built-in file source:

* the JSON is parsed in the JVM with the fixed :data:`SCHEMA_DDL`, so no
  Python worker runs unless a user's Python operator does (Python workers
  that read a source have to connect back to the JVM within a fixed 10 s,
  which a busy machine does not always manage);
* a query whose every reader of the log is a window can have the values
  parsed with the line, as a struct of the fields its windows use
  (``value_fields``), instead of as text that each window parses again: the
  line format embeds object values (:mod:`hub.ingest.log`), and parsing once
  makes a window query's batches about 1.5x cheaper per record;
* the file source records the files of each micro-batch in the query's
  checkpoint, so a restarted query replays exactly its uncommitted batch,
  and ``cleanSource=delete`` drops each link once its batch is committed;
* every executor reads the files directly: on a cluster, the state
  directory is on storage they all mount (NFS).

A Kafka source is a drop-in here: with an MQTT-to-Kafka bridge (or the
ingest producing to Kafka, keyed by site and stream, with its dedupe
kept), :func:`read_log` becomes ``spark.readStream.format("kafka")``
with ``from_json`` over the value into the same columns, the query's
checkpoint keeps the Kafka offsets, and the rest of the hub is unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hub.engine import rows
from hub.ingest import log as ingest_log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The columns of a log line (:mod:`hub.engine.rows`).
LINE_DDL = rows.SCHEMA_DDL
#: The columns of every row :func:`read_log` yields.
SCHEMA_DDL = f"app STRING, {LINE_DDL}"
#: The columns of a log line, and of every record between hub operators, as Arrow.
ROW_SCHEMA = rows.ROW_SCHEMA

MAX_FILES_PER_BATCH = 256
"""At most this many sealed segments go into one micro-batch (a backlog is read in several)."""


def read_log(
    spark: SparkSession, log_dir: Path, app: str, reader: str, value_fields: dict[str, str] | None = None
) -> DataFrame:
    """The records of ``app``'s log in ``log_dir`` as the query ``reader`` reads them, as a streaming DataFrame.

    The reader's inbox is created if missing; the reader is subscribed
    (it starts receiving sealed segments) by
    :func:`hub.ingest.log.subscribe` or :func:`hub.ingest.log.hand_over`, before its
    query starts. With ``value_fields`` (field name to Spark SQL type), each
    value is parsed with its line as a struct of those fields (null for a value
    that is not an object); otherwise values are JSON text.

    Returns:
        A DataFrame with the columns of :data:`SCHEMA_DDL`, ``value`` a struct if parsed.
    """
    from pyspark.sql import functions as F

    folder = ingest_log.inbox(log_dir, reader)
    folder.mkdir(parents=True, exist_ok=True)  # the file source checks that its folder exists
    schema = LINE_DDL
    ingest_log.check_format(log_dir)
    if value_fields:
        struct = ", ".join(f"`{name}`: {kind}" for name, kind in value_fields.items())
        schema = LINE_DDL.replace("value STRING", f"value STRUCT<{struct}>")
    lines = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", str(MAX_FILES_PER_BATCH))
        .option("cleanSource", "delete")
        .option("pathGlobFilter", f"*{ingest_log.SUFFIX}")
        .json(str(folder.resolve()))
    )
    return lines.select(F.lit(app).alias("app"), *(F.col(f.name) for f in ROW_SCHEMA))
