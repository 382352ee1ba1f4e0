"""Building the hub's queries from a plan, and starting them.

A query is built (its sink, checkpoint and DataFrame) before any running
one stops, so a plan the compiler rejects changes nothing; it is started
once the queries it replaces have stopped.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from hub.engine.checkpoints import checkpoint_name, spark_query_id
from hub.engine.compile import Compiler
from hub.engine.queries import Deployed, Query, await_first_batch
from hub.engine.session import stateless_trigger_of
from hub.engine.sinks import BatchSink, MemoryStore
from hub.engine.wanted import Side, Wanted, wanted_queries
from hub.engine.window_close import WindowCloser
from hub.ingest import log as ingest_log
from spanedge.errors import InvalidDataflow, MissingExtra
from spanedge.operators import Operator, PostgresSinkSpec
from spanedge.plan import Assignment, Plan
from spanedge.sites import Sites

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from hub.engine.connectors.postgres import PostgresWriter
    from spanedge.app import App
    from spanedge.dag import OperatorGraph

log = logging.getLogger(__name__)

SINK_KINDS = ("mqtt", "file", "console", "memory", "parquet", "postgres")
"""The sink kinds a hub query can write to."""

Built = dict[str, tuple[Query, "DataFrame"]]
"""New queries by slot (:mod:`hub.engine.wanted`), with the DataFrame each will run."""


class QueryBuilder:
    """Builds the queries of the apps' hub parts on one SparkSession.

    ``state_dir`` holds ``ingest/<app>/`` (the logs :class:`hub.ingest.consumer.Ingest`
    writes) and ``checkpoints/<app>/<sink>-<hash>/`` (one per query, with
    the sink's last completed batch id).
    """

    def __init__(
        self, spark: SparkSession, state_dir: Path, sites: Sites, memory: MemoryStore, close_windows: bool = True
    ) -> None:
        """Build on ``spark``; with ``close_windows``, a sink that reads a window closes it (:mod:`hub.engine.window_close`)."""
        self.spark = spark
        self.state_dir = state_dir
        self.sites = sites
        self.memory = memory
        self.close_windows = close_windows

    def log_dir(self, app: str) -> Path:
        """The ingest log directory of ``app``."""
        return self.state_dir / "ingest" / app

    def checkpoint_root(self, app: str) -> Path:
        """The directory of the checkpoints of ``app``'s queries."""
        return self.state_dir / "checkpoints" / app

    def wanted(self, app: App, plan: Plan) -> tuple[OperatorGraph, dict[str, Wanted], dict[str, Side]]:
        """The queries ``plan`` runs at the hub, and their sides (:func:`hub.engine.wanted.wanted_queries`).

        Raises:
            InvalidPlan: the plan does not fit the app; InvalidDataflow: two sinks' checkpoints would collide.
        """
        return wanted_queries(self.spark, app, plan, self.checkpoint_root(app.name), self.close_windows)

    def build_all(self, wanted: dict[str, Wanted], keep: dict[str, Query], split: bool) -> Built:
        """The queries of ``wanted`` not in ``keep``, built; while ``split``, a sink's two are told apart by fingerprint.

        Raises:
            InvalidDataflow: a sink's kind is unknown, or the compiler rejects an operator.
        """
        return {
            slot: self.build(compiler, a, fp, f"{a.replica} [{fp}]" if split else slot)
            for slot, (a, compiler, fp) in wanted.items()
            if slot not in keep
        }

    def build(self, compiler: Compiler, sink: Assignment, fingerprint: str, label: str) -> tuple[Query, DataFrame]:
        """The query ending at ``sink`` and its DataFrame, not started.

        Raises:
            InvalidDataflow: the sink's kind is unknown, or the compiler rejects an operator.
        """
        app = compiler.replicas.app.name
        name = checkpoint_name(sink.replica, fingerprint)
        checkpoint = self.checkpoint_root(app) / name
        op = compiler.replicas.op(sink)
        assert op.sink is not None
        if op.sink.kind not in SINK_KINDS:
            msg = f"sink {op.describe()}: unknown sink kind {op.sink.kind!r}"
            raise InvalidDataflow(msg)
        hub = compiler.replicas.hub
        broker = self.sites.site(hub).mqtt()  # the sink's target, or only its dead letters' topic
        batch_sink = BatchSink(
            sink.replica, op.sink.kind, op.sink.target, checkpoint / "sink.json", self.memory, broker
        )
        batch_sink.operator = op.name
        if isinstance(op.sink, PostgresSinkSpec):
            batch_sink.postgres = postgres_writer(op, op.sink, app, name, checkpoint)
        compiler.models_dir = self.state_dir / "models"  # predict operators score with the versions sent out
        df = compiler.frame(sink.replica, self.log_dir(app), name)
        closing = compiler.closing_window(sink.replica)
        if closing is not None and closing.window is not None:
            batch_sink.closer = WindowCloser(checkpoint, round(closing.window.allowed_lateness * 1000))
        query = Query(
            sink.replica,
            batch_sink,
            checkpoint,
            name,
            fingerprint,
            counted=compiler.counted(sink.replica),
            label=label,
            watermarked=compiler.keeps_watermark(sink.replica),
            windowed=compiler.windows_everything(sink.replica),
        )
        return query, df


def postgres_writer(op: Operator, spec: PostgresSinkSpec, app: str, query: str, checkpoint: Path) -> PostgresWriter:
    """The writer of a ``postgres`` sink, with the connection string from the hub's environment.

    Raises:
        MissingExtra: psycopg is not installed.
        InvalidDataflow: the environment variable ``spec.dsn_env`` is not set.
    """
    try:
        from hub.engine.connectors.postgres import PostgresWriter
    except ImportError as exc:
        raise MissingExtra(exc.name or "psycopg", "postgres") from None
    dsn = os.environ.get(spec.dsn_env)
    if not dsn:
        msg = (
            f"sink {op.describe()}: the hub's environment variable {spec.dsn_env} is not set; set it to the "
            "database's connection string (postgresql://USER@HOST:PORT/DBNAME, the password in PGPASSWORD "
            "or ~/.pgpass) where the hub runs"
        )
        raise InvalidDataflow(msg)
    return PostgresWriter(
        dsn, spec.target, spec.key, app, query, op.name, op.describe(), lambda: spark_query_id(checkpoint)
    )


class Starter:
    """Starts built queries at their micro-batch interval, one after another while the driver is fresh."""

    def __init__(self, trigger: str, stateless_trigger: str | None = None) -> None:
        """Start queries with micro-batches every ``trigger`` (or ``availableNow``).

        A query that runs no window at the hub takes ``stateless_trigger``
        instead (by default 230 ms, or ``trigger`` if shorter:
        :func:`hub.engine.session.stateless_trigger_of`).
        """
        self.trigger = trigger
        self.stateless_trigger = stateless_trigger_of(trigger, stateless_trigger)
        self._warm = False  # a query started here has run a batch: the driver is past its first jobs
        self._started: list[StreamingQuery] = []  # while not warm, the queries started so far

    def trigger_of(self, q: Query) -> str:
        """The micro-batch interval of ``q``: the windows' unless it runs no window at the hub."""
        return self.trigger if q.watermarked else self.stateless_trigger

    def start(self, deployed: Deployed, built: Built, log_dir: Path) -> None:
        """Start the new queries on the log in ``log_dir``; one after another until a query has run a batch.

        Only the first jobs of a fresh driver must not run side by side
        (:func:`hub.engine.queries.await_first_batch`); once it has run a
        batch, a re-plan's queries start together, so a deploy on a loaded
        hub does not take a first batch per query (12-19 s each were
        measured under saturating load) before the sites get the plan.
        """
        app = deployed.app.name
        previous: StreamingQuery | None = None
        for slot, (q, df) in built.items():
            if previous is not None and not self._driver_warm():
                await_first_batch(previous)
            ingest_log.subscribe(log_dir, q.reader)
            previous = q.start(app, df, self.trigger_of(q))
            if not self._warm:
                self._started.append(previous)
            deployed.queries[slot] = q
            log.info("app %s: query %s started (checkpoint %s)", app, slot, q.checkpoint.name)

    def driver_warmed(self) -> None:
        """Note that the driver has already run a batch (:func:`hub.engine.warmup.warm_up`): start queries together."""
        self._warm = True
        self._started.clear()

    def _driver_warm(self) -> bool:
        """Whether a query started here has completed a batch (it stays so)."""
        if not self._warm:
            self._warm = any(h.lastProgress is not None for h in self._started)
            if self._warm:
                self._started.clear()
        return self._warm
