"""Building the hub's SparkSession with the settings that matter on a small machine.

``master`` takes any Spark master URL, so the same hub runs against a
cluster (``spark://host:7077``, ``yarn``, ``k8s://...``). What changes then:
the ingest log must be readable by every executor, so ``--state-dir`` moves
to storage every executor mounts at the same path (NFS; the log relies on
hard links and file locks, so not S3), or the MQTT ingest is replaced by an
MQTT-to-Kafka bridge and Spark's Kafka source (:mod:`hub.engine.source`);
checkpoints may go to HDFS or S3 then, with Spark's default checkpoint
writer back (:data:`DEFAULTS` writes them for a local or NFS path; pass
``spark.sql.streaming.checkpointFileManagerClass`` =
``...checkpointing.FileContextBasedCheckpointFileManager`` in ``extra``,
``spanedge hub --conf``).
The executors need this package and pyarrow installed only for apps with
Python operators at the hub; ``spark.sql.shuffle.partitions`` should grow
with the cluster (``--conf spark.sql.shuffle.partitions=N``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hub.engine import stopped_batch
from spanedge.errors import MissingExtra

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_TRIGGER = "470 milliseconds"
"""The hub's micro-batch interval: about two a second, and on purpose not a divisor of one.

Spark starts a micro-batch at every multiple of the interval since the epoch,
and windows end on multiples of their size (whole seconds, usually). With an
interval that divides a second, a micro-batch starts at every window's end,
just before the record that closes the window can have arrived, so every
window waits a whole interval for the next one. With 470 ms the micro-batches
fall at every phase of a window's end (in steps of 10 ms for any window of
whole seconds but multiples of 47 s), and a window waits about half the
interval (the hub benchmark: window results 0.71-0.76x as late as at 500 ms,
with about the same idle CPU).
"""

DEFAULT_STATELESS_TRIGGER = "230 milliseconds"
"""The micro-batch interval of the hub's queries that run no window, unless ``--trigger`` is shorter.

A record through such a query waits about half the interval for its
micro-batch, whatever its phase, so only a shorter interval brings it
sooner; the window queries keep :data:`DEFAULT_TRIGGER`'s phase. In the hub
benchmark's paired runs at 2,000 records/s, stateless results came at p50
220-266 ms against 372-394 ms with one 470 ms trigger, for 103-123% of a
core against 93-99% (publisher included) and 0.6-1.3 points more of a core
idle; see :func:`stateless_trigger_of`.
"""

_TRIGGER_UNITS = {"millisecond": 0.001, "second": 1.0, "minute": 60.0, "hour": 3600.0}
_TRIGGER = re.compile(r"^\s*(?:interval\s+)?(\d+(?:\.\d+)?)\s*([a-z]+)\s*$", re.IGNORECASE)


def interval_seconds(trigger: str) -> float | None:
    """The processing-time interval ``trigger`` (``"470 milliseconds"``, ``"0 seconds"``) in seconds; None if not one."""
    match = _TRIGGER.match(trigger)
    scale = None if match is None else _TRIGGER_UNITS.get(match.group(2).lower().removesuffix("s"))
    return None if match is None or scale is None else float(match.group(1)) * scale


def trigger_seconds(trigger: str) -> float | None:
    """The interval of a processing-time ``trigger`` such as ``"470 milliseconds"`` in seconds (None: another kind, or 0)."""
    seconds = interval_seconds(trigger)
    return seconds if seconds else None


def stateless_trigger_of(trigger: str, stateless: str | None = None) -> str:
    """The micro-batch interval of the queries without a window at a hub whose windows run every ``trigger``.

    ``stateless`` if given (``spanedge hub --stateless-trigger``); else
    :data:`DEFAULT_STATELESS_TRIGGER`, or ``trigger`` itself if that is
    shorter or not a processing-time interval (``availableNow``, ``0 seconds``).
    """
    if stateless is not None:
        return stateless
    seconds = interval_seconds(trigger)
    default = interval_seconds(DEFAULT_STATELESS_TRIGGER)
    if seconds is None or default is None or seconds <= default:
        return trigger
    return DEFAULT_STATELESS_TRIGGER


def batch_intervals(trigger: str, stateless: str | None = None) -> list[float]:
    """The distinct micro-batch intervals in seconds of a hub's queries (an ingest's ``batch_every``).

    ``trigger`` and ``stateless`` as the engine takes them: the window queries'
    interval and that of the queries without a window (:func:`stateless_trigger_of`);
    a trigger that is not a processing-time interval has none.
    """
    triggers = (trigger, stateless_trigger_of(trigger, stateless))
    return sorted({s for t in triggers if (s := trigger_seconds(t)) is not None})


LOCAL_TASK_ATTEMPTS = 4
"""Attempts of a task in local mode (Spark's default there is 1: any task failure fails the query)."""

CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
"""Spark's checkpoint writer over Hadoop's FileSystem API (atomic rename on a local or NFS path)."""

#: Settings applied to every hub session (``extra`` overrides them).
DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.minBatchesToRetain": "20",
    "spark.sql.adaptive.enabled": "false",
    # Stopping a query while foreachBatch is inside a py4j call overflowed the
    # default driver stack in about half of the stops.
    "spark.driver.extraJavaOptions": "-Xss16m",
    "spark.executor.extraJavaOptions": "-Xss16m",
    "spark.driver.memory": "1g",
    # Checkpoints live under --state-dir (a local or NFS path, ``file:``): written without Hadoop's
    # checksum files, through the FileSystem API. Hadoop's default FileContext path started a
    # `readlink` or `chmod` child process of the JVM for every temporary file, checksum file and
    # rename (about six per checkpoint file, thirty per micro-batch), 40-95 ms of every log write on
    # two busy cores. Each file is still written under a temporary name and renamed into place.
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
}

STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
"""The Spark setting that picks the state store (Spark's default keeps state in memory, versioned in files)."""

#: Hadoop's checksummed local file system: RocksDB's state checkpoints cast the ``file:`` system to it.
CHECKSUMMED_LOCAL_FS: dict[str, str] = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
}


def parse_setting(given: str) -> tuple[str, str]:
    """``KEY=VALUE`` (``spanedge hub --conf``) as a Spark setting's key and value.

    Raises:
        ValueError: not ``KEY=VALUE`` with a key that starts with ``spark.``, or the master (its own option).
    """
    key, sep, value = given.partition("=")
    key = key.strip()
    if not sep or not key.startswith("spark.") or any(c.isspace() for c in key):
        msg = f"{given!r} is not a Spark setting; give KEY=VALUE with a key that starts with 'spark.', e.g. spark.executor.memory=2g"
        raise ValueError(msg)
    if key == "spark.master":
        msg = "the Spark master is set with --spark-master, not --conf spark.master"
        raise ValueError(msg)
    return key, value.strip()


def session_settings(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """:data:`DEFAULTS` with ``extra`` over them: the settings :func:`build_session` applies.

    With Spark's RocksDB state store chosen in ``extra``, ``file:`` paths go
    through Hadoop's checksummed local file system (:data:`CHECKSUMMED_LOCAL_FS`)
    unless ``extra`` names one: RocksDB's checkpointing casts the file system
    to it and fails the first state commit on the raw one.
    """
    chosen = dict(extra or {})
    settings = dict(DEFAULTS)
    if chosen.get(STATE_STORE_PROVIDER, "").endswith(".RocksDBStateStoreProvider"):
        settings |= CHECKSUMMED_LOCAL_FS
    return settings | chosen


def build_session(
    master: str = "local[2]",
    app_name: str = "spanedge-hub",
    extra: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """Return a SparkSession for the hub.

    Python workers run this interpreter (``PYSPARK_PYTHON``), so they import
    the same installed ``hub`` package the operators are pickled from.

    Args:
        master: any Spark master URL (``local[2]``, ``spark://host:7077``, ...).
        app_name: the Spark application name.
        extra: more Spark settings (``spanedge hub --conf``), over :data:`DEFAULTS` (see :func:`session_settings`).
        log_level: Spark's log level (``WARN`` or ``ERROR`` keep it quiet).

    Raises:
        MissingExtra: pyspark or pyarrow are not installed.
    """
    try:
        import pyarrow  # noqa: F401  (Python operators at the hub exchange Arrow batches)
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise MissingExtra(exc.name or "pyspark", "hub") from None
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(with_task_retries(master)).appName(app_name)
    for key, value in session_settings(extra).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    stopped_batch.install()
    log.info("spark %s session on %s", spark.version, master)
    for key, value in sorted((extra or {}).items()):
        log.info("spark setting %s=%s (given)", key, value)
    return spark


def with_task_retries(master: str) -> str:
    """``local[N]`` as ``local[N,LOCAL_TASK_ATTEMPTS]``; any other master URL unchanged.

    A task can fail for a passing reason (a Python worker of a user's
    operator that starts too slowly on a busy machine); a cluster retries
    it, and so does the hub in local mode, instead of failing the query.
    """
    found = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master.strip())
    if found is None:
        return master
    return f"local[{found.group(1) or 1},{LOCAL_TASK_ATTEMPTS}]"


SPARK_STOPPED = "Cannot call methods on a stopped SparkContext"
"""Spark's answer to a call once its JVM has ended the session (the JVM got a stop signal too)."""
JVM_LOST = "does not exist in the JVM"
"""py4j's answer when the JVM stopped answering while it looked a class up."""


def spark_ended(exc: BaseException) -> bool:
    """True if ``exc`` (or what it came from) says Spark's JVM already ended the session or exited.

    A stop signal sent to the hub's process group reaches the JVM too: its
    shutdown hook stops the SparkContext, or the JVM is gone before the hub
    stops its queries, and py4j then finds no one to connect to. When the
    connection breaks while py4j looks up one of Spark's own classes, py4j
    logs the network error and raises that the class "does not exist in the
    JVM", which a live JVM of the same installation never says.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or type(seen).__name__ == "Py4JNetworkError":
            return True
        text = ""
        with contextlib.suppress(Exception):  # py4j's error str() asks the JVM, which may be gone
            text = str(seen)
        if SPARK_STOPPED in text:
            return True
        if type(seen).__name__ == "Py4JError" and text.startswith("org.apache.spark.") and text.endswith(JVM_LOST):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
