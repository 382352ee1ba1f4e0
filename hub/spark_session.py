"""Building the hub's SparkSession with the settings that matter on a small machine.

``master`` takes any Spark master URL, so the same hub runs against a
cluster (``spark://host:7077``, ``yarn``, ``k8s://...``). What changes then:
the ingest log must be readable by every executor, so ``--state-dir`` moves
to shared storage (NFS, or HDFS/S3 for checkpoints), or the MQTT ingest is
replaced by an MQTT-to-Kafka bridge and Spark's Kafka source; the executors
need this package and pyarrow installed (the data source classes are
pickled by reference); ``spark.sql.shuffle.partitions`` should grow with the
cluster (pass it in ``extra``).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from spanedge.errors import MissingExtra

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

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
}


def build_session(
    master: str = "local[2]",
    app_name: str = "spanedge-hub",
    extra: dict[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """Return a SparkSession for the hub and register the ingest-log data source.

    Python workers and the driver-side source runner run this interpreter
    (``PYSPARK_PYTHON``), so they import the same installed ``hub`` package
    the data source classes are pickled from.

    Args:
        master: any Spark master URL (``local[2]``, ``spark://host:7077``, ...).
        app_name: the Spark application name.
        extra: more Spark settings, applied after :data:`DEFAULTS`.
        log_level: Spark's log level (``WARN`` or ``ERROR`` keep it quiet).

    Raises:
        MissingExtra: pyspark or pyarrow are not installed.
    """
    try:
        import pyarrow  # noqa: F401  (Python data sources need it on the workers)
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise MissingExtra(exc.name or "pyspark", "hub") from None
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULTS, **(extra or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    log.info("spark %s session on %s", spark.version, master)
    return spark


def register(spark: SparkSession) -> None:
    """Register the ingest-log data source (format ``spanedge-log``) with ``spark``."""
    from hub.spark_source import IngestLogSource

    spark.dataSource.register(IngestLogSource)
