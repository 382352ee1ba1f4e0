"""The Spark engine: the hub's part of each app as Structured Streaming queries.

For every sink replica the plan puts at the hub, the engine builds one
streaming query over the app's ingest log: the hub-placed operators
upstream of that sink, in topological order, then the sink as an
idempotent ``foreachBatch``. One query per sink branch (rather than one per
app) gives each branch its own checkpoint, so redeploying a new version of
an app restarts only the branches whose operators changed and the others
keep their window state; a branch that changed resumes from the log offset
its predecessor committed, so no result is repeated.

Every stream between operators has the same columns as the log: ``site``,
``stream``, ``seq``, ``event_time`` (epoch seconds), ``key`` and ``value``
(JSON text). Records that crossed from an edge site are selected from the
log by ``stream`` (the producing operator) and ``site`` (the source-group
site of a replicated producer). Record-level operators run as Arrow batches
(``mapInArrow``); windows are ``groupBy(window/session_window, key)`` with
a watermark on the event time and append output, so each window is emitted
once, as ``{<key>, window_start, window_end, <aggs>}`` with event time
``window_end - 0.001`` like the edge agents; transforms get the records
parsed with the input stream's declared schema.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
import orjson

from hub import log as ingest_log
from hub.sinks import BatchSink, MemoryStore
from spanedge.errors import InvalidDataflow, InvalidPlan
from spanedge.operators import Kind, Operator, WindowKind
from spanedge.plan import Assignment, Plan, split_replica
from spanedge.sites import Sites

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from spanedge.app import App

log = logging.getLogger(__name__)

COLUMNS = ("site", "stream", "seq", "event_time", "key", "value")
SCHEMA_DDL = "site STRING, stream STRING, seq BIGINT, event_time DOUBLE, key STRING, value STRING"
_NUMERIC = ("INT", "BIGINT", "SMALLINT", "TINYINT", "FLOAT", "DOUBLE", "LONG", "INTEGER", "DECIMAL")
_OWN_PACKAGES = ("spanedge", "hub", "placement", "edge_agent", "simulate", "builtins")
RESTART_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Waits before restarting a failed query, by consecutive failure; the last one repeats."""
STABLE_AFTER_S = 300.0
"""A query that ran this long before failing starts again from the shortest wait."""
FIRST_BATCH_WAIT_S = 60.0
"""How long a deployment waits for a query's first trigger before starting the next query."""


@dataclass
class _Query:
    replica: str
    sink: BatchSink
    checkpoint: Path
    reader: str
    fingerprint: str
    handle: StreamingQuery | None = None


@dataclass
class _Restarts:
    """Failures and restarts of one query, kept across its restarts."""

    total: int = 0
    consecutive: int = 0
    started_at: float = 0.0
    failed_at: float | None = None

    @property
    def delay(self) -> float:
        """The wait before the next restart."""
        return RESTART_DELAYS_S[min(self.consecutive, len(RESTART_DELAYS_S) - 1)]

    def due(self, now: float) -> bool:
        """True once the wait after the current failure is over."""
        return self.failed_at is not None and now >= self.failed_at + self.delay


@dataclass
class _Deployed:
    app: App
    plan: Plan
    queries: dict[str, _Query] = field(default_factory=dict)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", name)


def committed_offset(checkpoint: Path) -> int | None:
    """The log offset up to which a query's checkpoint says its batches were committed.

    Spark tells a source about a committed batch only when it plans the next
    one, so the reader file can lag by a batch; the checkpoint's commit and
    offset logs do not.
    """
    try:
        done = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    except FileNotFoundError:
        return None
    if not done:
        return None
    try:
        lines = (checkpoint / "offsets" / str(max(done))).read_text().splitlines()
        offset = json.loads(lines[-1])
        if isinstance(offset, str):
            offset = json.loads(offset)
        return int(offset["pos"])
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return None


def _func_digest(func: Callable[..., Any] | None) -> str:
    if func is None:
        return ""
    try:
        return str(inspect.getsource(func))
    except (OSError, TypeError):
        code = getattr(func, "__code__", None)
        if code is None:
            return repr(func)
        consts = [c for c in code.co_consts if not inspect.iscode(c)]
        return f"{code.co_code.hex()}{consts!r}{code.co_names!r}"


def _window_digest(op: Operator) -> str:
    spec = op.window
    if spec is None:
        return ""
    aggs = [
        (out, ag.func, ag.field, None if ag.custom is None else [_func_digest(f) for f in _aggregator_funcs(ag.custom)])
        for out, ag in spec.aggs
    ]
    return repr((spec.key, spec.kind.value, spec.size, spec.slide, spec.gap, spec.allowed_lateness, aggs))


def _aggregator_funcs(custom: Any) -> list[Callable[..., Any]]:
    return [custom.zero, custom.add, custom.merge, custom.result]


def _pickle_user_code(func: Callable[..., Any] | None) -> None:
    """Let Spark ship the user's function by value (the app module is not importable by workers)."""
    if func is None:
        return
    module_name = getattr(func, "__module__", None) or ""
    if module_name.split(".")[0] in _OWN_PACKAGES:
        return
    module = sys.modules.get(module_name)
    if module is None:
        return
    from pyspark import cloudpickle

    with contextlib.suppress(ValueError):
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


def _record_level(op: Operator) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Return the ``mapInArrow`` function running a map, filter or flat_map over JSON values."""
    stream = op.name

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import json

        import pyarrow as pa

        from hub.spark_source import ROW_SCHEMA as schema

        failures = 0
        for batch in batches:
            sites = batch.column("site").to_pylist()
            seqs = batch.column("seq").to_pylist()
            times = batch.column("event_time").to_pylist()
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            out: dict[str, list[Any]] = {c: [] for c in COLUMNS}
            for site, seq, t, key, raw in zip(sites, seqs, times, keys, values, strict=True):
                try:
                    results = list(op.apply(orjson.loads(raw) if raw is not None else None))
                except Exception as exc:
                    failures += 1
                    if failures <= 10:
                        sys.stderr.write(f"operator {op.describe()} failed on a record of {site}: {exc!r}\n")
                    continue
                for res in results:
                    try:
                        text = orjson.dumps(res).decode()
                    except TypeError:
                        text = json.dumps(res, default=str)
                    out["site"].append(site)
                    out["stream"].append(stream)
                    out["seq"].append(seq)
                    out["event_time"].append(t)
                    out["key"].append(key)
                    out["value"].append(text)
            yield pa.RecordBatch.from_pydict(out, schema=schema)

    return run


class Engine:
    """Runs the hub-placed operators of deployed apps on Spark Structured Streaming.

    ``state_dir`` holds ``ingest/<app>/`` (the logs :class:`hub.ingest.Ingest`
    writes) and ``checkpoints/<app>/<sink>-<hash>/`` (one per query, with
    the sink's last completed batch id).
    """

    def __init__(
        self,
        state_dir: Path,
        sites: Sites,
        spark: SparkSession | None = None,
        spark_master: str = "local[2]",
        trigger: str = "500 milliseconds",
    ) -> None:
        """Use ``spark`` if given, else build a session (stopped by :meth:`stop` only if built here).

        ``trigger`` is the micro-batch interval (``"500 milliseconds"``), or
        ``"availableNow"`` to process what the log holds and stop (batch jobs, benchmarks).
        """
        from hub.spark_session import build_session, register

        self.state_dir = Path(state_dir)
        self.sites = sites
        self.trigger = trigger
        if spark is None:
            from pyspark.sql import SparkSession

            running = getattr(SparkSession, "_instantiatedSession", None)
            # A session someone else started (getOrCreate would return it) is theirs to stop.
            self._own_spark = running is None
            spark = build_session(spark_master)
        else:
            self._own_spark = False
        self.spark = spark
        register(self.spark)
        from hub.late import LateRecords

        self._late = LateRecords()
        self.spark.streams.addListener(self._late)
        self._memory = MemoryStore()
        self._apps: dict[str, _Deployed] = {}
        self._restarts: dict[tuple[str, str], _Restarts] = {}
        self._lock = threading.RLock()

    # -- paths ---------------------------------------------------------------

    def log_dir(self, app: str) -> Path:
        """The ingest log directory of ``app``."""
        return self.state_dir / "ingest" / app

    def checkpoint_root(self, app: str) -> Path:
        """The directory of the checkpoints of ``app``'s queries."""
        return self.state_dir / "checkpoints" / app

    # -- deployment ----------------------------------------------------------

    def deploy(self, app: App, plan: Plan) -> None:
        """Start (or restart) the queries of the sinks ``plan`` puts at the hub.

        Queries whose upstream hub operators are unchanged keep running with
        their checkpoints; changed ones restart from a fresh checkpoint at
        the log offset their predecessor committed.

        Raises:
            InvalidPlan: the plan is for another app or names unknown operators.
            InvalidDataflow: a transform's input has no declared schema.
        """
        if plan.app != app.name:
            msg = f"plan is for app '{plan.app}' but the app is '{app.name}'"
            raise InvalidPlan(msg)
        graph = app.graph()
        for a in plan.assignments:
            if a.operator not in graph:
                msg = f"plan of app '{app.name}' places unknown operator '{a.operator}' (replica '{a.replica}')"
                raise InvalidPlan(msg)
        builder = _Builder(self, app, plan, graph)
        site_of = {a.replica: a.site for a in plan.assignments}
        for f in plan.flows:
            if site_of.get(f.src) == plan.hub and site_of.get(f.dst, plan.hub) != plan.hub:
                log.warning(
                    "app %s: flow %s -> %s leaves the hub; the hub does not forward results to edge sites",
                    app.name,
                    f.src,
                    f.dst,
                )
        sinks = [a for a in plan.at(plan.hub) if graph.nodes[a.operator]["op"].kind is Kind.SINK]
        wanted = {a.replica: builder.fingerprint(a.replica) for a in sinks}
        with self._lock:
            current = self._apps.get(app.name)
            old = current.queries if current else {}
            keep = {
                r: q
                for r, q in old.items()
                if wanted.get(r) == q.fingerprint and q.handle is not None and q.handle.isActive
            }
            built: dict[str, tuple[_Query, DataFrame]] = {}
            for a in sinks:
                if a.replica in keep:
                    continue
                built[a.replica] = builder.query(a, wanted[a.replica])
            log_dir = self.log_dir(app.name)
            log_dir.mkdir(parents=True, exist_ok=True)
            for replica, q in old.items():
                if replica in keep:
                    continue
                self._stop_query(q)
                successor = built[replica][0] if replica in built else None
                if successor is not None and successor.checkpoint == q.checkpoint:
                    continue  # the same query again (it had failed): it resumes from its checkpoint
                self._retire(log_dir, q.reader, q.checkpoint, successor)
                log.info("app %s: query %s stopped (%s)", app.name, replica, "changed" if successor else "gone")
            # Checkpoints of an earlier run of the hub that this deployment replaces.
            in_use = {q.checkpoint for q in keep.values()} | {q.checkpoint for q, _ in built.values()}
            root = self.checkpoint_root(app.name)
            for path in sorted(root.iterdir()) if root.is_dir() else ():
                if path in in_use or path in {q.checkpoint for q in old.values()} or not path.is_dir():
                    continue
                replica_name = path.name.rpartition("-")[0]
                successor = next((q for q, _ in built.values() if _safe(q.replica) == replica_name), None)
                self._retire(log_dir, path.name, path, successor)
                log.info("app %s: checkpoint %s of an earlier version retired", app.name, path.name)
            deployed = _Deployed(app, plan, dict(keep))
            self._apps[app.name] = deployed
            previous: StreamingQuery | None = None
            for replica, (q, df) in built.items():
                if previous is not None:
                    self._await_first_batch(previous)
                ingest_log.register_reader(log_dir, q.reader)
                q.handle = previous = self._start(app.name, q, df)
                deployed.queries[replica] = q
                log.info("app %s: query %s started (checkpoint %s)", app.name, replica, q.checkpoint.name)

    @staticmethod
    def _retire(log_dir: Path, reader: str, checkpoint: Path, successor: _Query | None) -> None:
        """Drop a replaced query's reader and checkpoint; its successor resumes where it stopped."""
        offsets = [ingest_log.reader_offset(log_dir, reader), committed_offset(checkpoint)]
        resume = max((o for o in offsets if o is not None), default=None)
        if successor is not None and resume is not None:
            ingest_log.register_reader(log_dir, successor.reader, resume)
        ingest_log.unregister_reader(log_dir, reader)
        shutil.rmtree(checkpoint, ignore_errors=True)

    def _start(self, app: str, q: _Query, df: DataFrame) -> StreamingQuery:
        writer = (
            df.writeStream.queryName(f"spanedge:{app}:{q.replica}")
            .foreachBatch(q.sink)
            .option("checkpointLocation", str(q.checkpoint))
        )
        if self.trigger.replace(" ", "").replace("-", "").lower() == "availablenow":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.trigger)
        return writer.start()

    @staticmethod
    def _await_first_batch(handle: StreamingQuery, timeout: float = FIRST_BATCH_WAIT_S) -> None:
        """Wait until ``handle`` finished its first trigger (or stopped, or ``timeout`` passed).

        Queries start one after another: when the first jobs of a fresh Spark
        driver ran concurrently, their tasks sometimes failed to deserialize
        (``java.io.OptionalDataException``), and kept failing until the driver
        restarted.
        """
        deadline = time.monotonic() + timeout
        while handle.isActive and handle.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.05)

    def _stop_query(self, q: _Query) -> None:
        if q.handle is not None:
            try:
                q.handle.stop()
            except Exception:
                log.exception("stopping query %s failed", q.replica)
            q.handle = None
        q.sink.close()

    def undeploy(self, name: str) -> None:
        """Stop an app's queries and drop its hub state (checkpoints and log readers)."""
        with self._lock:
            deployed = self._apps.pop(name, None)
            if deployed is None:
                return
            for q in deployed.queries.values():
                self._stop_query(q)
                ingest_log.unregister_reader(self.log_dir(name), q.reader)
                self._restarts.pop((name, q.replica), None)
            shutil.rmtree(self.checkpoint_root(name), ignore_errors=True)

    def apps(self) -> list[str]:
        """Names of the deployed apps."""
        with self._lock:
            return sorted(self._apps)

    def memory(self, sink_name: str) -> list[dict[str, Any]]:
        """Rows a memory sink received, in batch order, with ``value`` parsed."""
        return self._memory.get(sink_name)

    def metrics(self) -> dict[str, Any]:
        """Per app and query: status, last batch id and duration, input rate, state rows, sink counts."""
        out: dict[str, Any] = {}
        with self._lock:
            for name, deployed in self._apps.items():
                queries: dict[str, Any] = {}
                for replica, q in deployed.queries.items():
                    entry: dict[str, Any] = {"active": False, "sink_batches": q.sink.batches, "sink_rows": q.sink.rows}
                    entry["restarts"] = self._restarts.get((name, replica), _Restarts()).total
                    handle = q.handle
                    if handle is not None:
                        entry["active"] = handle.isActive
                        error = handle.exception()
                        entry["error"] = str(error) if error is not None else None
                        entry["late_dropped"] = self._late.dropped(str(handle.id))
                        progress = handle.lastProgress
                        if progress:
                            entry["batch_id"] = progress.get("batchId")
                            entry["batch_ms"] = (progress.get("durationMs") or {}).get("triggerExecution")
                            entry["input_rows_per_s"] = progress.get("inputRowsPerSecond")
                            entry["processed_rows_per_s"] = progress.get("processedRowsPerSecond")
                            entry["input_rows"] = progress.get("numInputRows")
                            entry["state_rows"] = sum(
                                int(s.get("numRowsTotal", 0)) for s in progress.get("stateOperators") or []
                            )
                    queries[replica] = entry
                out[name] = {"version": deployed.plan.version, "queries": queries}
        return out

    def recover(self, now: float | None = None) -> list[str]:
        """Restart failed queries from their checkpoints, each after a growing wait.

        Call it periodically. A failure is logged once when first seen; the
        query restarts 1 s after its first failure, then after 2, 5, 10, 30
        and 60 s while it keeps failing (a poison batch retries every minute,
        with its error in :meth:`metrics`), and from 1 s again once it has run
        for :data:`STABLE_AFTER_S`. A restarted query resumes from its
        checkpoint, so nothing is lost or repeated.

        Returns:
            ``<app>/<sink replica>`` of the queries restarted by this call.
        """
        now = time.monotonic() if now is None else now
        restarted: list[str] = []
        with self._lock:
            for name, deployed in list(self._apps.items()):
                due: list[str] = []
                for replica, q in deployed.queries.items():
                    if q.handle is None or q.handle.isActive:
                        continue
                    error = q.handle.exception()
                    if error is None:  # finished (an availableNow trigger), not failed
                        continue
                    r = self._restarts.setdefault((name, replica), _Restarts(started_at=now))
                    if r.failed_at is None:
                        if now - r.started_at >= STABLE_AFTER_S:
                            r.consecutive = 0
                        r.failed_at = now
                        log.error(
                            "app %s: query %s failed; restarting it from its checkpoint in %.0f s: %s",
                            name,
                            replica,
                            r.delay,
                            error,
                        )
                    if r.due(now):
                        due.append(replica)
                if not due:
                    continue
                try:
                    self.deploy(deployed.app, deployed.plan)  # rebuilds exactly the queries that are not running
                except Exception:
                    log.exception("app %s: restarting queries %s failed; trying again later", name, ", ".join(due))
                    for replica in due:
                        self._restarts[(name, replica)].failed_at = now
                    continue
                for replica in due:
                    r = self._restarts[(name, replica)]
                    r.total += 1
                    r.consecutive += 1
                    r.started_at = now
                    r.failed_at = None
                    restarted.append(f"{name}/{replica}")
                    log.warning("app %s: query %s restarted (restart %d)", name, replica, r.total)
        return restarted

    def stop(self) -> None:
        """Stop every query, and the SparkSession if the engine built it."""
        with self._lock:
            for deployed in self._apps.values():
                for q in deployed.queries.values():
                    self._stop_query(q)
            self._apps.clear()
        with contextlib.suppress(Exception):  # the session may already be gone
            self.spark.streams.removeListener(self._late)
        if self._own_spark:
            self.spark.stop()


class _Builder:
    """Builds the DataFrames of one deployment, replica by replica."""

    def __init__(self, engine: Engine, app: App, plan: Plan, graph: nx.DiGraph) -> None:
        self.engine = engine
        self.app = app
        self.plan = plan
        self.graph = graph
        self.where = {a.replica: a for a in plan.assignments}
        self.order = {name: i for i, name in enumerate(nx.topological_sort(graph))}

    def op(self, a: Assignment) -> Operator:
        return self.graph.nodes[a.operator]["op"]  # type: ignore[no-any-return]

    def upstream(self, replica: str) -> list[Assignment]:
        """The replicas feeding ``replica``: from the plan's flows, else from the DAG."""
        flows = self.plan.inputs(replica)
        if flows:
            ups = []
            for f in flows:
                if f.src not in self.where:
                    msg = f"plan of app '{self.app.name}': flow {f.src} -> {f.dst} starts at an unknown replica"
                    raise InvalidPlan(msg)
                ups.append(self.where[f.src])
            return ups
        a = self.where[replica]
        found = []
        for name in self.op(a).inputs:
            candidates = [b for b in self.plan.assignments if b.operator == name]
            if a.group is not None and any(b.group == a.group for b in candidates):
                candidates = [b for b in candidates if b.group == a.group]
            found.extend(candidates)
        return found

    def fingerprint(self, replica: str) -> str:
        """A hash of everything the query of sink ``replica`` computes."""
        parts: list[str] = []
        seen: set[str] = set()

        def visit(r: str) -> None:
            if r in seen:
                return
            seen.add(r)
            a = self.where[r]
            op = self.op(a)
            if a.site != self.plan.hub:
                parts.append(f"crossing {op.name} {a.group}")
                return
            parts.append(
                "|".join(
                    [
                        r,
                        op.kind.value,
                        ",".join(op.inputs),
                        _window_digest(op),
                        repr(op.sink),
                        op.schema or "",
                        _func_digest(op.func),
                    ]
                )
            )
            for up in self.upstream(r):
                visit(up.replica)

        visit(replica)
        return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()[:12]

    def query(self, sink: Assignment, fingerprint: str) -> tuple[_Query, DataFrame]:
        """Build the DataFrame and sink of the query ending at ``sink``."""
        engine = self.engine
        name = f"{_safe(sink.replica)}-{fingerprint}"
        checkpoint = engine.checkpoint_root(self.app.name) / name
        op = self.op(sink)
        assert op.sink is not None
        broker = engine.sites.site(self.plan.hub).mqtt() if op.sink.kind == "mqtt" else None
        batch_sink = BatchSink(
            sink.replica, op.sink.kind, op.sink.target, checkpoint / "sink.json", engine._memory, broker
        )
        if op.sink.kind not in ("mqtt", "file", "console", "memory"):
            msg = f"sink {op.describe()}: unknown sink kind {op.sink.kind!r}"
            raise InvalidDataflow(msg)
        source = (
            engine.spark.readStream.format("spanedge-log")
            .option("path", str(engine.log_dir(self.app.name)))
            .option("app", self.app.name)
            .option("reader", name)
            .load()
            .select(*COLUMNS)
        )
        memo: dict[str, DataFrame] = {}
        df = self._frame(sink.replica, source, memo)
        return _Query(sink.replica, batch_sink, checkpoint, name, fingerprint), df

    def _frame(self, replica: str, source: DataFrame, memo: dict[str, DataFrame]) -> DataFrame:
        """The records ``replica`` emits."""
        if replica in memo:
            return memo[replica]
        a = self.where[replica]
        op = self.op(a)
        if a.site != self.plan.hub or op.kind is Kind.SOURCE:
            df = self._crossing(op, [a], source)
        else:
            df = self._apply(op, a, self._inputs([a], source, memo))
        memo[replica] = df
        return df

    def _crossing(self, op: Operator, reps: list[Assignment], source: DataFrame) -> DataFrame:
        """Records of ``reps`` (replicas of ``op`` at edge sites) selected from the log."""
        return source.where(self._crossing_condition(op, reps))

    def _crossing_condition(self, op: Operator, reps: list[Assignment]) -> Column:
        from pyspark.sql import functions as F

        cond = F.col("stream") == (op.stream or op.name if op.kind is Kind.SOURCE else op.name)
        groups = [r.group if r.group is not None else split_replica(r.replica)[1] for r in reps]
        if None not in groups:
            cond = cond & F.col("site").isin(*groups)
        return cond

    def _is_crossing(self, reps: list[Assignment]) -> bool:
        return all(r.site != self.plan.hub or self.op(r).kind is Kind.SOURCE for r in reps)

    def _inputs(self, reps: list[Assignment], source: DataFrame, memo: dict[str, DataFrame]) -> DataFrame:
        """The union of the inputs of ``reps``, with the replicas of each upstream operator merged."""
        by_operator: dict[str, list[Assignment]] = {}
        for r in reps:
            for up in self.upstream(r.replica):
                ups = by_operator.setdefault(up.operator, [])
                if up not in ups:
                    ups.append(up)
        if not by_operator:
            msg = f"plan of app '{self.app.name}': hub replica '{reps[0].replica}' has no inputs"
            raise InvalidPlan(msg)
        crossing = [ups for ups in by_operator.values() if self._is_crossing(ups)]
        frames = [self._merged(ups, source, memo) for ups in by_operator.values() if ups not in crossing]
        if crossing:  # one filter for every stream read from the log: one source, not a self-union
            conds = [self._crossing_condition(self.op(ups[0]), ups) for ups in crossing]
            cond = conds[0]
            for more in conds[1:]:
                cond = cond | more
            frames.insert(0, source.where(cond))
        merged = frames[0]
        for other in frames[1:]:
            merged = merged.unionByName(other)
        return merged

    def _merged(self, reps: list[Assignment], source: DataFrame, memo: dict[str, DataFrame]) -> DataFrame:
        """The records of several replicas of one operator, computed once where that is equivalent.

        Per-site replicas of a record-level operator or a window at the hub
        become one computation over all their sites (windows also keyed by
        site), so a query reads the log once instead of once per site (each
        branch of a self-union would get its own source).
        """
        if len(reps) == 1:
            return self._frame(reps[0].replica, source, memo)
        memo_key = "+".join(sorted(r.replica for r in reps))
        if memo_key in memo:
            return memo[memo_key]
        op = self.op(reps[0])
        at_hub = [r.site == self.plan.hub and op.kind is not Kind.SOURCE for r in reps]
        per_site = all(r.group is not None for r in reps)
        if not any(at_hub):
            df = self._crossing(op, reps, source)
        elif all(at_hub) and per_site and op.record_level:
            df = self._apply(op, reps[0], self._inputs(reps, source, memo))
        elif all(at_hub) and per_site and op.kind is Kind.WINDOW:
            df = self._window(op, reps[0], self._inputs(reps, source, memo), per_site=True)
        else:
            frames = [self._frame(r.replica, source, memo) for r in reps]
            df = frames[0]
            for other in frames[1:]:
                df = df.unionByName(other)
        memo[memo_key] = df
        return df

    def _apply(self, op: Operator, a: Assignment, df: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        if op.record_level:
            _pickle_user_code(op.func)
            return df.mapInArrow(_record_level(op), SCHEMA_DDL)
        if op.kind is Kind.UNION:
            return df.withColumn("stream", F.lit(op.name))
        if op.kind is Kind.WINDOW:
            return self._window(op, a, df)
        if op.kind is Kind.TRANSFORM:
            return self._transform(op, df)
        return df

    def _field_types(self, op: Operator) -> dict[str, str]:
        from spanedge.dag import known_fields

        return known_fields(self.graph, op.inputs[0]) or {} if op.inputs else {}

    def _window(self, op: Operator, a: Assignment, df: DataFrame, per_site: bool = False) -> DataFrame:
        from pyspark.sql import functions as F

        spec = op.window
        assert spec is not None
        declared = self._field_types(op)
        wanted: dict[str, str] = {spec.key: "STRING"}
        customs = [(out, ag) for out, ag in spec.aggs if ag.custom is not None]
        for _, ag in spec.aggs:
            if ag.field is None or ag.custom is not None or ag.field == spec.key:
                continue
            kind = declared.get(ag.field, "DOUBLE")
            if ag.func in ("sum", "mean") or (kind.split("(")[0] not in _NUMERIC and kind != "STRING"):
                kind = "DOUBLE"
            wanted[ag.field] = kind
        ddl = ", ".join(f"`{name}` {kind}" for name, kind in wanted.items())
        parsed = df.withColumn("_r", F.from_json("value", ddl)).withColumn("_ts", F.timestamp_seconds("event_time"))
        lateness_ms = round(spec.allowed_lateness * 1000)
        parsed = parsed.withWatermark("_ts", f"{lateness_ms} milliseconds")
        if spec.kind is WindowKind.SESSION:
            win = F.session_window("_ts", f"{round((spec.gap or 1.0) * 1000)} milliseconds")
        elif spec.kind is WindowKind.SLIDING:
            win = F.window(
                "_ts",
                f"{round((spec.size or 1.0) * 1000)} milliseconds",
                f"{round((spec.slide or 1.0) * 1000)} milliseconds",
            )
        else:
            win = F.window("_ts", f"{round((spec.size or 1.0) * 1000)} milliseconds")
        aggs: list[Column] = []
        for out, ag in spec.aggs:
            if ag.custom is not None:
                aggs.append(F.collect_list(F.get_json_object("value", f"$.{ag.field}")).alias(out))
            elif ag.func == "count":
                col = F.count(F.lit(1)) if ag.field is None else F.count(F.col(f"_r.`{ag.field}`"))
                aggs.append(col.alias(out))
            else:
                col = F.col(f"_r.`{ag.field}`")
                fn = {"sum": F.sum, "mean": F.avg, "min": F.min, "max": F.max}.get(ag.func)
                if fn is None:
                    msg = f"window {op.describe()}: unknown aggregation {ag.describe()}"
                    raise InvalidDataflow(msg)
                aggs.append(fn(col).alias(out))
        parsed = parsed.where(F.col(f"_r.`{spec.key}`").isNotNull())  # records without the key join no window
        keys = [win.alias("_w"), F.col(f"_r.`{spec.key}`").alias("_k")]
        if per_site:
            keys.append(F.col("site").alias("_site"))
        grouped = parsed.groupBy(*keys).agg(*aggs)
        start = F.unix_micros(F.col("_w.start")) / F.lit(1_000_000.0)
        end = F.unix_micros(F.col("_w.end")) / F.lit(1_000_000.0)
        site = F.col("_site") if per_site else F.lit(a.group or self.plan.hub)
        shaped = grouped.select(
            site.alias("site"),
            F.lit(op.name).alias("stream"),
            F.lit(None).cast("bigint").alias("seq"),
            (end - F.lit(0.001)).alias("event_time"),
            F.col("_k").alias("key"),
            start.alias("window_start"),
            end.alias("window_end"),
            *[F.col(f"`{out}`") for out, _ in spec.aggs],
        )
        if not customs:
            value = F.to_json(
                F.struct(
                    F.col("key").alias(spec.key),
                    F.col("window_start"),
                    F.col("window_end"),
                    *[F.col(f"`{out}`") for out, _ in spec.aggs],
                )
            )
            return shaped.select("site", "stream", "seq", "event_time", "key", value.alias("value"))
        for _, ag in customs:
            _pickle_user_code(ag.custom.add if ag.custom else None)
        return shaped.mapInArrow(_window_finisher(spec.key, [o for o, _ in spec.aggs], dict(customs)), SCHEMA_DDL)

    def _transform(self, op: Operator, df: DataFrame) -> DataFrame:
        from pyspark.sql import DataFrame as SparkDataFrame
        from pyspark.sql import functions as F
        from pyspark.sql.types import DoubleType, NumericType, TimestampType

        from spanedge.dag import known_fields

        upstream = op.inputs[0]
        fields = known_fields(self.graph, upstream)
        if fields is None:
            msg = (
                f"transform {op.describe()} reads '{upstream}', whose record fields are unknown; "
                f"declare them with .schema(...) on '{upstream}' (a dataclass or a Spark DDL string "
                "such as 'unit STRING, temp_c DOUBLE') so the hub can parse the records"
            )
            raise InvalidDataflow(msg)
        ddl = ", ".join(f"`{name}` {kind}" for name, kind in fields.items())
        parsed = df.select(
            F.from_json("value", ddl).alias("_r"), F.timestamp_seconds("event_time").alias("_event_time")
        ).select("_r.*", "_event_time")
        if "event_time" not in fields:
            parsed = parsed.withColumnRenamed("_event_time", "event_time")
        assert op.func is not None
        result = op.func(parsed)
        if not isinstance(result, SparkDataFrame):
            msg = f"transform {op.describe()} must return a pyspark DataFrame, got {type(result).__name__}"
            raise InvalidDataflow(msg)
        names = result.columns
        time_col = "_event_time" if "_event_time" in names else ("event_time" if "event_time" in names else None)
        if time_col is None:
            event_time = F.unix_micros(F.current_timestamp()) / F.lit(1_000_000.0)
        else:
            dtype = result.schema[time_col].dataType
            if isinstance(dtype, TimestampType):
                event_time = F.unix_micros(F.col(time_col)) / F.lit(1_000_000.0)
            elif isinstance(dtype, NumericType):
                event_time = F.col(time_col).cast(DoubleType())
            else:
                event_time = F.unix_micros(F.col(time_col).cast("timestamp")) / F.lit(1_000_000.0)
        payload = [c for c in names if c not in ("_event_time", "event_time") or c in fields]
        return result.select(
            F.lit(self.plan.hub).alias("site"),
            F.lit(op.name).alias("stream"),
            F.lit(None).cast("bigint").alias("seq"),
            event_time.alias("event_time"),
            F.lit(None).cast("string").alias("key"),
            F.to_json(F.struct(*[F.col(f"`{c}`") for c in payload])).alias("value"),
        )


def _window_finisher(
    key_field: str, outs: list[str], customs: dict[str, Any]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Return a ``mapInArrow`` function that applies custom aggregators and encodes window results."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import json

        import pyarrow as pa

        from hub.spark_source import ROW_SCHEMA as schema

        for batch in batches:
            rows = batch.to_pylist()
            out: dict[str, list[Any]] = {c: [] for c in COLUMNS}
            for row in rows:
                value: dict[str, Any] = {
                    key_field: row["key"],
                    "window_start": row["window_start"],
                    "window_end": row["window_end"],
                }
                for name in outs:
                    ag = customs.get(name)
                    if ag is None:
                        value[name] = row[name]
                        continue
                    agg = ag.custom
                    acc = agg.zero()
                    for item in row[name] or []:
                        acc = agg.add(acc, json.loads(item))
                    value[name] = agg.result(acc)
                for c in ("site", "stream", "seq", "event_time", "key"):
                    out[c].append(row[c])
                out["value"].append(json.dumps(value, default=str))
            yield pa.RecordBatch.from_pydict(out, schema=schema)

    return run
