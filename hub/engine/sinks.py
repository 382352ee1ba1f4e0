"""Sinks of the hub's streaming queries, idempotent per micro-batch id.

Each sink is the ``foreachBatch`` function of one query. It remembers the
last batch id it completed in a small file next to the query's checkpoint
and discards the output of a batch it has already completed, which is what
Spark replays after a crash (the batch still runs, so window state commits). Files are named by batch id and written atomically, so a
replay of a half-written batch overwrites rather than duplicates; memory
results are keyed by batch id; a Parquet dataset gives each batch its own
partition, which a replay overwrites (:mod:`hub.engine.connectors.parquet`); a PostgreSQL
table gets each batch in one transaction with its id, so a replay finds the
id and writes nothing (:mod:`hub.engine.connectors.postgres`). MQTT cannot take a message back: a crash in
the middle of publishing a batch republishes, when Spark replays it, only
the messages the broker had not acknowledged (:mod:`hub.engine.publish_progress`;
at most the client's in-flight window, at least once).
While a handover to or from the hub runs, a sink writes only its query's
share of the results (:mod:`hub.handover.cutoffs`) and counts the rest. The sink
of a window query in update mode closes the windows itself
(:mod:`hub.engine.window_close`) before anything else.

Dead letters of the query's Python operators (see
:mod:`hub.engine.python_operators`) are part of the batch: before running it, the
sink names a staging directory for it (a Spark local property the tasks
read) and empties it; after it, the sink gathers what the tasks staged,
writes it to ``<state-dir>/dlq/<app>/<query>-batch-<id>.jsonl`` (atomically,
so a replay overwrites), publishes each letter to
``spanedge/v1/<app>/dlq/hub`` (whatever the sink's kind, when it has the hub
broker), counts them, and only then records the batch as completed. Once it
is, the sink counts each record an operator raised on under the site it came
from (:data:`hub.engine.dead_letters.OPERATOR_ERRORS`; a replay the sink skips
is not counted again).

Every sink's query computes its own upstream operators, so an operator that
feeds several sinks fails on a record once in each of their queries. Only
one query files its letters: the one the deployment names for it
(:attr:`BatchSink.letters_of`); and while a handover runs a sink's two
queries side by side, the one whose share holds the record's event time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from hub.engine.dead_letters import DEAD_LETTERS, OPERATOR_ERRORS
from hub.engine.publish_progress import PublishProgress, digest, publish_order
from hub.engine.python_operators import STAGING_PROPERTY
from hub.engine.stopped_batch import StoppedMidBatch
from hub.engine.window_close import OBSERVATION as CLOSED_COUNT
from hub.engine.window_close import WindowCloser
from hub.handover.cutoffs import Share
from hub.ingest import fence
from spanedge import topics
from spanedge.result_latency import ResultLatency, Summary
from spanedge.sites import Broker

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from hub.engine.connectors.postgres import PostgresWriter

log = logging.getLogger(__name__)


class MemoryStore:
    """Results of memory sinks by sink name and batch id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[tuple[str, int], tuple[float, list[dict[str, Any]]]]] = {}

    def put(self, name: str, query: str, batch_id: int, rows: list[dict[str, Any]]) -> None:
        """Store (or replace, for a replayed batch) the rows of one batch of ``query``."""
        now = time.time()
        with self._lock:
            self._data.setdefault(name, {})[(query, batch_id)] = (now, rows)

    def timed(self, name: str) -> list[tuple[float, dict[str, Any]]]:
        """All rows of ``name`` with the wall-clock time their batch reached the sink."""
        with self._lock:
            return [(at, row) for at, rows in self._data.get(name, {}).values() for row in rows]

    def get(self, name: str) -> list[dict[str, Any]]:
        """All rows of ``name`` in arrival order."""
        with self._lock:
            return [row for _, rows in self._data.get(name, {}).values() for row in rows]

    def names(self) -> list[str]:
        """The memory sinks that received something."""
        with self._lock:
            return sorted(self._data)


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    """Turn a result table into dicts with the value parsed from JSON."""
    rows: list[dict[str, Any]] = table.select(["site", "stream", "event_time", "key", "value"]).to_pylist()
    for row in rows:
        row["value"] = orjson.loads(row["value"]) if row["value"] is not None else None
    return rows


def staged_letters(folder: Path) -> list[bytes]:
    """The dead letters the tasks of a batch staged in ``folder``, file by file (one JSON object a line)."""
    if not folder.is_dir():
        return []
    letters: list[bytes] = []
    for path in sorted(folder.glob("*.jsonl")):
        letters.extend(line for line in path.read_bytes().splitlines() if line)
    return letters


def sink_client_id(checkpoint: Path, name: str) -> str:
    """The MQTT client id of the sink of the query whose checkpoint is ``checkpoint``: the same at every hub.

    Hubs on ``--ha`` share the state directory, so the hub that takes over connects its sink with the id
    the old leader's sink had, and the broker drops the old leader's connection. A leader paused in the
    middle of a batch, whose client still holds messages it had not yet written, can then not send them
    once it resumes (it exits on its lost lease before its client reconnects), so the batch the new leader
    replays is not published twice. A query of another state directory gets another id.
    """
    where = hashlib.sha256(str(checkpoint.resolve()).encode()).hexdigest()[:12]
    return f"spanedge-sink-{where}-{name}"[:64]


class BatchSink:
    """The ``foreachBatch`` function of one query: skip completed batches, write, remember."""

    def __init__(
        self,
        name: str,
        kind: str,
        target: str,
        state_file: Path,
        memory: MemoryStore,
        broker: Broker | None = None,
        dead_letters: Path | None = None,
    ) -> None:
        """Prepare a sink of ``kind`` (mqtt, file, console, memory) writing to ``target``.

        ``state_file`` lives in the query's checkpoint directory
        (``<state-dir>/checkpoints/<app>/<query>/``), whose name identifies the
        query generation in file names and memory keys. ``dead_letters`` is the
        app's dead-letter directory, ``<state-dir>/dlq/<app>`` by default.
        """
        self.name = name
        self.query = state_file.parent.name
        self.app = state_file.parent.parent.name
        self.dead_letters = dead_letters or state_file.parent.parent.parent.parent / "dlq" / self.app
        self.staging = state_file.parent / "dead-letters"
        self.dead_lettered = 0
        self.kind = kind
        self.target = target
        self.state_file = state_file
        self.memory = memory
        self.broker = broker
        self.batches = 0
        self.rows = 0
        self.latency = ResultLatency()
        """The latency of the results it wrote in the last minute (:mod:`spanedge.result_latency`)."""
        self._client: Any = None
        self._last = self._load_last()
        self.progress = PublishProgress(state_file.with_name(f"{state_file.stem}.published"))
        self.letters_progress = PublishProgress(state_file.with_name(f"{state_file.stem}.published-letters"))
        self.share: Share | None = None
        """The part of the results this query writes while a handover to or from the hub runs (:mod:`hub.handover.cutoffs`)."""
        self.left_to_other = 0
        self.closer: WindowCloser | None = None
        """Closes the windows of a query in update mode (:mod:`hub.engine.window_close`); None in append mode."""
        self.letters_of: frozenset[str] | None = None
        """The operators whose dead letters this query files (None: all of its own); others' queries file the rest."""
        self.operator = name.split("@")[0]
        """The sink operator's name (its replicas' names add ``@<site>``)."""
        self.postgres: PostgresWriter | None = None
        """Writes a ``postgres`` sink's batches (:mod:`hub.engine.connectors.postgres`)."""
        self.stop_requested = False
        """Set once the hub stops the query: a batch that fails from then on was cut short by the stop."""

    def status(self) -> dict[str, Any]:
        """The figures of the sink's external store for ``/metrics`` (a PostgreSQL sink's: reachable, failures, ...)."""
        return self.postgres.status() if self.postgres is not None else {}

    def stopping(self) -> None:
        """The query is about to stop: stop waiting for an unreachable store; a batch it cuts short says so."""
        self.stop_requested = True
        if self.postgres is not None:
            self.postgres.stop()

    def observed(self) -> dict[str, tuple[int, float]]:
        """The counts the sink observes itself, as :meth:`hub.engine.operator_counts.ObservedCounts.of` gives Spark's."""
        if self.closer is None:
            return {}
        return {CLOSED_COUNT: (self.closer.closed, self.closer.rate)}

    def result_latency(self) -> Summary | None:
        """p50/p95 (ms) and count of the latency of the results it wrote in the last minute; None if it wrote none."""
        return self.latency.summary().get(self.name)

    def _load_last(self) -> int:
        try:
            return int(json.loads(self.state_file.read_text())["batch"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return -1

    def _save_last(self, batch_id: int) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_name(f".{self.state_file.name}.tmp")
        with tmp.open("w") as fh:
            fh.write(json.dumps({"batch": batch_id}))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.state_file)
        self._last = batch_id

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Write one micro-batch and its dead letters unless it was completed before (and this hub still leads)."""
        fence.check(f"write batch {batch_id} of sink {self.name}")
        staging = self.staging / f"batch-{batch_id:012d}"
        shutil.rmtree(staging, ignore_errors=True)  # what an interrupted run of this batch staged
        context = df.sparkSession.sparkContext
        context.setLocalProperty(STAGING_PROPERTY, str(staging))
        try:
            if batch_id <= self._last:
                log.info("sink %s: batch %d already written, skipping the replay", self.name, batch_id)
                # The batch still has to run: its stateful operators commit their state only then,
                # and Spark fails a query whose batch left a state store uncommitted.
                df.write.format("noop").mode("overwrite").save()
            else:
                self._write_batch(df, batch_id, staging)
        except Exception as exc:
            if not self.stop_requested:
                raise
            msg = f"sink {self.name}: batch {batch_id} was cut short by its query's stop and stays uncommitted"
            raise StoppedMidBatch(msg) from exc
        finally:
            context.setLocalProperty(STAGING_PROPERTY, None)  # type: ignore[arg-type]  # None removes it
        shutil.rmtree(staging, ignore_errors=True)

    def _write_batch(self, df: DataFrame, batch_id: int, staging: Path) -> None:
        table = df.toArrow()
        if self.closer is not None:
            table = self.closer.close(table, batch_id)
        share = self.share
        if share is not None and table.num_rows:
            table, left = share.select(table)
            if left:
                self.left_to_other += left
                log.info(
                    "sink %s: batch %d: %d results outside this query's share of a handover (%s) left to the other query",
                    self.name,
                    batch_id,
                    left,
                    share.describe(),
                )
        letters = self._own_letters(staged_letters(staging))
        if self.postgres is not None:
            self._write_postgres(self.postgres, table, batch_id, letters)
        else:
            if table.num_rows and self.kind == "parquet":
                self._write_parquet(df.sparkSession, table, batch_id)
            elif table.num_rows:
                getattr(self, f"_write_{self.kind}")(table, batch_id)
            if letters:
                self._write_dead_letters(letters, batch_id)
        if table.num_rows and "event_time" in table.column_names:
            self.latency.written(self.name, table.column("event_time").to_pylist())
        self.batches += 1
        self.rows += table.num_rows
        self._save_last(batch_id)
        if letters:  # counted once the batch is written, by the site each record came from
            OPERATOR_ERRORS.add(self.app, (orjson.loads(line).get("source_site") for line in letters))

    def _own_letters(self, letters: list[bytes]) -> list[bytes]:
        """The staged ``letters`` this query files: of the operators it files for, with an origin in its share."""
        if self.letters_of is None and self.share is None:
            return letters
        kept = []
        for line in letters:
            letter = orjson.loads(line)
            if self.letters_of is not None and letter.get("operator") not in self.letters_of:
                continue  # another sink's query files this operator's letters
            at = letter.get("event_time")
            if self.share is not None and at is not None and not self.share.holds(float(at)):
                continue  # the other query of the handover files it
            kept.append(line)
        return kept

    def _write_dead_letters(self, letters: list[bytes], batch_id: int) -> None:
        """File the batch's dead letters and publish them to the app's hub dead-letter topic (with a broker)."""
        self._file_dead_letters(letters, batch_id)
        self._send_dead_letters(letters, batch_id)

    def _letters_file(self, batch_id: int) -> Path:
        return self.dead_letters / f"{self.query}-batch-{batch_id:012d}.jsonl"

    def _file_dead_letters(self, letters: list[bytes], batch_id: int) -> None:
        """Write the batch's dead letters to its file (atomically: a replay overwrites it)."""
        self.dead_letters.mkdir(parents=True, exist_ok=True)
        final = self._letters_file(batch_id)
        tmp = self.dead_letters / f".{final.name}.tmp"
        with tmp.open("wb") as fh:
            fh.write(b"".join(line + b"\n" for line in letters))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)

    def _send_dead_letters(self, letters: list[bytes], batch_id: int) -> None:
        """Publish the filed letters to the app's hub dead-letter topic (with a broker) and count them."""
        if self.broker is not None:
            self._publish(topics.dlq(self.app, "hub"), letters, batch_id, self.letters_progress)
        self.dead_lettered += len(letters)
        DEAD_LETTERS.add(self.app, self.query, len(letters))
        log.warning(
            "sink %s: batch %d: %d dead letters in %s", self.name, batch_id, len(letters), self._letters_file(batch_id)
        )

    def _write_postgres(self, writer: PostgresWriter, table: pa.Table, batch_id: int, letters: list[bytes]) -> None:
        """Write the batch in one transaction with its id; its dead letters are filed before the commit.

        A batch the database has already (written before a restart, its
        letters filed then) is not written again; its filed letters are
        published again, at least once as ever.
        """
        from hub.engine.connectors.postgres import results_of

        results = results_of(table) if table.num_rows else []
        if not results and not letters:
            return
        filed: list[bytes] = []

        def file(rejected: list[bytes]) -> None:
            filed[:] = letters + rejected
            if filed:
                self._file_dead_letters(filed, batch_id)
            else:  # what a run of the batch that never committed had filed
                self._letters_file(batch_id).unlink(missing_ok=True)

        done = writer.write(results, batch_id, file)
        if done.skipped:
            path = self._letters_file(batch_id)
            filed = [line for line in path.read_bytes().splitlines() if line] if path.exists() else []
        if filed:
            self._send_dead_letters(filed, batch_id)

    def _write_parquet(self, spark: SparkSession, table: pa.Table, batch_id: int) -> None:
        from hub.engine.connectors.parquet import batch_label, write_parquet

        write_parquet(spark, table, self.target, self.app, self.operator, batch_label(self.query, batch_id))

    def _write_memory(self, table: pa.Table, batch_id: int) -> None:
        self.memory.put(self.target, self.query, batch_id, rows_of(table))

    def _write_console(self, table: pa.Table, batch_id: int) -> None:
        for row in table.select(["site", "stream", "event_time", "key", "value"]).to_pylist():
            sys.stdout.write(f"[{self.name} #{batch_id}] {row['site']} {row['stream']} {row['key']} {row['value']}\n")
        sys.stdout.flush()

    def _write_file(self, table: pa.Table, batch_id: int) -> None:
        import pyarrow.parquet as pq

        folder = Path(self.target)
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{self.query}-batch-{batch_id:012d}.parquet"
        tmp = folder / f".{final.name}.tmp"
        pq.write_table(table, tmp)
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)

    def _mqtt_client(self) -> Any:
        if self._client is None:
            from spanedge.mqtt import HUB_SINK, connect, make_client

            if self.broker is None:
                msg = f"sink {self.name}: an MQTT sink needs the hub broker"
                raise ValueError(msg)
            client_id = sink_client_id(self.state_file.parent, self.name)
            client = make_client(self.broker, client_id, HUB_SINK)
            connect(client, self.broker, HUB_SINK, wait=True)
            self._client = client
        return self._client

    def _write_mqtt(self, table: pa.Table, batch_id: int) -> None:
        self._publish(self.target, table.column("value").to_pylist(), batch_id, self.progress)

    def _publish(self, topic: str, payloads: list[Any], batch_id: int, progress: PublishProgress) -> None:
        """Publish ``payloads`` at QoS 1 in publish order, less those an earlier run of the batch had acknowledged."""
        ordered = publish_order(payloads)
        of = digest(topic, ordered)
        skip = min(len(ordered), progress.acknowledged(batch_id, of))
        if skip:
            log.info(
                "sink %s: batch %d: %d messages to %s the broker acknowledged before a restart, not published again",
                self.name,
                batch_id,
                skip,
                topic,
            )
        client = self._mqtt_client()
        infos = [client.publish(topic, value, qos=1) for value in ordered[skip:]]
        for done, info in enumerate(infos, start=skip + 1):
            info.wait_for_publish(timeout=60)
            if not info.is_published():
                msg = f"sink {self.name}: publishing batch {batch_id} to {topic} timed out"
                raise TimeoutError(msg)
            progress.record(batch_id, of, done)

    def close(self) -> None:
        """Disconnect from MQTT and PostgreSQL if connected."""
        self.progress.close()
        self.letters_progress.close()
        if self.postgres is not None:
            self.postgres.close()
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
            self._client = None
