"""Sinks of the hub's streaming queries, idempotent per micro-batch id.

Each sink is the ``foreachBatch`` function of one query. It remembers the
last batch id it completed in a small file next to the query's checkpoint
and discards the output of a batch it has already completed, which is what
Spark replays after a crash (the batch still runs, so window state commits). Files are named by batch id and written atomically, so a
replay of a half-written batch overwrites rather than duplicates; memory
results are keyed by batch id. MQTT cannot take a message back: a crash in
the middle of publishing a batch republishes that batch (at least once).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from spanedge.sites import Broker

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

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
    ) -> None:
        """Prepare a sink of ``kind`` (mqtt, file, console, memory) writing to ``target``.

        ``state_file`` lives in the query's checkpoint directory, whose name
        identifies the query generation in file names and memory keys.
        """
        self.name = name
        self.query = state_file.parent.name
        self.kind = kind
        self.target = target
        self.state_file = state_file
        self.memory = memory
        self.broker = broker
        self.batches = 0
        self.rows = 0
        self._client: Any = None
        self._last = self._load_last()

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
        """Write one micro-batch unless it was completed before."""
        if batch_id <= self._last:
            log.info("sink %s: batch %d already written, skipping the replay", self.name, batch_id)
            # The batch still has to run: its stateful operators commit their state only then,
            # and Spark fails a query whose batch left a state store uncommitted.
            df.write.format("noop").mode("overwrite").save()
            return
        table = df.toArrow()
        if table.num_rows:
            getattr(self, f"_write_{self.kind}")(table, batch_id)
        self.batches += 1
        self.rows += table.num_rows
        self._save_last(batch_id)

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
            import paho.mqtt.client as mqtt
            from paho.mqtt.enums import CallbackAPIVersion

            if self.broker is None:
                msg = f"sink {self.name}: an MQTT sink needs the hub broker"
                raise ValueError(msg)
            client_id = f"spanedge-sink-{uuid.uuid4().hex[:8]}-{self.name}"[:64]  # unique across apps and hubs
            client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
            client.max_inflight_messages_set(1000)
            client.max_queued_messages_set(0)
            self.broker.authenticate(client)
            client.reconnect_delay_set(min_delay=1, max_delay=30)
            client.connect(self.broker.host, self.broker.port, keepalive=30)
            client.loop_start()
            self._client = client
        return self._client

    def _write_mqtt(self, table: pa.Table, batch_id: int) -> None:
        client = self._mqtt_client()
        infos = [client.publish(self.target, value, qos=1) for value in table.column("value").to_pylist()]
        for info in infos:
            info.wait_for_publish(timeout=60)
            if not info.is_published():
                msg = f"sink {self.name}: publishing batch {batch_id} to {self.target} timed out"
                raise TimeoutError(msg)

    def close(self) -> None:
        """Disconnect from MQTT if connected."""
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
            self._client = None
