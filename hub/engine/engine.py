"""The Spark engine: the hub's part of each app as Structured Streaming queries.

For every sink replica the plan puts at the hub, the engine runs one
streaming query over the app's ingest log: the hub-placed operators
upstream of that sink, in topological order, then the sink as an
idempotent ``foreachBatch``. The parts:

* :mod:`hub.engine.compile` turns a plan into one DataFrame per sink
  (:mod:`hub.engine.python_operators`, :mod:`hub.engine.windows`,
  :mod:`hub.engine.transforms` for the operators, :mod:`hub.engine.fingerprint`
  for what identifies a query);
* :mod:`hub.engine.lifecycle` starts, replaces, restarts and stops the queries
  (:mod:`hub.engine.wanted`, :mod:`hub.engine.builder`, :mod:`hub.engine.shares`,
  :mod:`hub.engine.retirement`, :mod:`hub.engine.recovery`, :mod:`hub.engine.queries`,
  :mod:`hub.engine.checkpoints`);
* :class:`Engine`, here, owns the SparkSession and is what the rest of the
  hub calls.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hub.engine.lifecycle import Lifecycle
from hub.engine.queries import Deployed
from hub.engine.session import DEFAULT_TRIGGER, spark_ended
from hub.engine.sinks import MemoryStore
from spanedge.plan import Plan
from spanedge.sites import Sites

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spanedge.app import App


log = logging.getLogger(__name__)


class Engine:
    """Runs the hub-placed operators of deployed apps on Spark Structured Streaming.

    ``state_dir`` holds ``ingest/<app>/`` (the logs :class:`hub.ingest.consumer.Ingest`
    writes) and ``checkpoints/<app>/<sink>-<hash>/`` (one per query, with
    the sink's last completed batch id).
    """

    def __init__(
        self,
        state_dir: Path,
        sites: Sites,
        spark: SparkSession | None = None,
        spark_master: str = "local[2]",
        trigger: str = DEFAULT_TRIGGER,
        close_windows: bool = True,
        spark_conf: Mapping[str, str] | None = None,
        stateless_trigger: str | None = None,
    ) -> None:
        """Use ``spark`` if given, else build a session (stopped by :meth:`stop` only if built here).

        ``trigger`` is the micro-batch interval (:data:`hub.engine.session.DEFAULT_TRIGGER`), or
        ``"availableNow"`` to process what the log holds and stop (batch jobs, benchmarks).
        ``stateless_trigger`` is that of the queries that run no window at the hub
        (``spanedge hub --stateless-trigger``; by default 230 ms, or ``trigger`` if
        shorter: :func:`hub.engine.session.stateless_trigger_of`).
        ``close_windows``: a sink that reads a window directly writes it as soon as
        the watermark passes it (:mod:`hub.engine.window_close`); else in the micro-batch
        after (Spark's append mode). A running query keeps the mode its checkpoint
        was started in (:func:`hub.engine.wanted.keep_checkpoint_modes`).
        ``spark_conf``: Spark settings over the hub's own, for a session built here.
        """
        from hub.engine.input_rates import InputRates
        from hub.engine.late import LateRecords
        from hub.engine.listeners import ProgressFanout
        from hub.engine.operator_counts import ObservedCounts
        from hub.engine.session import build_session
        from hub.engine.warmup import warmed

        self.state_dir = Path(state_dir)
        self.sites = sites
        self.trigger = trigger
        if spark is None:
            from pyspark.sql import SparkSession

            running = getattr(SparkSession, "_instantiatedSession", None)
            # A session someone else started (getOrCreate would return it) is theirs to stop.
            self._own_spark = running is None
            spark = build_session(spark_master, extra=spark_conf)
        else:
            self._own_spark = False
        self.spark = spark
        self._late = LateRecords()
        self._counts = ObservedCounts()
        self._rates = InputRates()
        self._listener = ProgressFanout([self._late, self._counts, self._rates])
        self.spark.streams.addListener(self._listener)
        self._memory = MemoryStore()
        self._queries = Lifecycle(
            self.spark,
            self.state_dir,
            sites,
            self._memory,
            self._late,
            trigger,
            self._counts,
            close_windows,
            stateless_trigger=stateless_trigger,
            input_rates=self._rates,
        )
        if warmed(self.spark):  # a standby's throwaway query ran a batch on it: no query need wait for another
            self._queries.starter.driver_warmed()
        self._apps: dict[str, Deployed] = self._queries.apps  # the same dict, for inspection

    def log_dir(self, app: str) -> Path:
        """The ingest log directory of ``app``."""
        return self._queries.log_dir(app)

    def checkpoint_root(self, app: str) -> Path:
        """The directory of the checkpoints of ``app``'s queries."""
        return self._queries.checkpoint_root(app)

    def deploy(self, app: App, plan: Plan) -> None:
        """Start (or restart) the queries of the sinks ``plan`` puts at the hub.

        Queries whose upstream hub operators are unchanged keep running with
        their checkpoints; changed ones restart from a fresh checkpoint with
        the log segments their predecessor had not committed.

        Raises:
            InvalidPlan: the plan is for another app or names unknown operators.
            InvalidDataflow: a transform's input has no declared schema, or a sink's kind is unknown.
        """
        self._queries.deploy(app, plan)

    def undeploy(self, name: str) -> None:
        """Stop an app's queries and drop its hub state (checkpoints and log readers)."""
        self._queries.undeploy(name)

    def apps(self) -> list[str]:
        """Names of the deployed apps."""
        with self._queries.lock:
            return sorted(self._apps)

    def memory(self, sink_name: str) -> list[dict[str, Any]]:
        """Rows a memory sink received, in batch order, with ``value`` parsed."""
        return self._memory.get(sink_name)

    def metrics(self) -> dict[str, Any]:
        """Per app and query: status, last batch id and duration, input rate, state rows, sink counts.

        Per app also ``operators``: each hub operator's records in and out, in
        total and per second (see :meth:`hub.engine.lifecycle.Lifecycle.metrics`).
        """
        return self._queries.metrics()

    def watermarked_readers(self, name: str) -> frozenset[str]:
        """The log readers of app ``name``'s queries that run a window (see :class:`hub.ingest.log.Hold`)."""
        return self._queries.watermarked_readers(name)

    def watermarked_sinks(self, name: str) -> dict[str, str]:
        """Each log reader of app ``name``'s window queries, with its sink replica (see :mod:`hub.handover.scope`)."""
        return self._queries.watermarked_sinks(name)

    def unsettled(self, name: str, proposed: Plan | None = None) -> list[str]:
        """The queries of app ``name`` still writing a handover share that ``proposed`` would stop.

        See :meth:`hub.engine.lifecycle.Lifecycle.unsettled`.
        """
        return self._queries.unsettled(name, proposed)

    def retire_written_shares(self) -> list[str]:
        """Stop the queries of a handover's old placement that wrote their whole share; call it periodically.

        See :meth:`hub.engine.lifecycle.Lifecycle.retire_written_shares`.
        """
        return self._queries.retire_written_shares()

    def recover(self, now: float | None = None) -> list[str]:
        """Restart failed queries from their checkpoints, each after a growing wait.

        Call it periodically. A failure is logged once when first seen; the
        query restarts 1 s after its first failure, then after 2, 5, 10, 30
        and 60 s while it keeps failing (a poison batch retries every minute,
        with its error in :meth:`metrics`), and from 1 s again once it has run
        for :data:`hub.engine.restarts.STABLE_AFTER_S`. A restarted query resumes from its
        checkpoint, so nothing is lost or repeated.

        Args:
            now: the current :func:`time.monotonic` (tests pass it).

        Returns:
            ``<app>/<sink replica>`` of the queries restarted by this call.
        """
        return self._queries.recover(now)

    def stop(self) -> None:
        """Stop every query, and the SparkSession if the engine built it."""
        self._queries.stop()
        with contextlib.suppress(Exception):  # the session may already be gone
            self.spark.streams.removeListener(self._listener)
        if self._own_spark:
            try:
                self.spark.stop()
            except Exception as exc:
                if not spark_ended(exc):
                    raise
                log.info("Spark's JVM had already ended the session (it got the stop signal too)")
