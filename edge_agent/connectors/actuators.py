"""Connector sinks at the edge: each value waits in a durable queue until its device took it.

A commit's sink values are appended to ``<state dir>/actuators.db`` (SQLite) and written by one
task per sink, oldest first, each deleted once the device acknowledged the write (at most
:data:`MAX_PENDING` wait per sink: past that the oldest are dropped and counted). A device that
is unreachable is retried with backoff, so a value is written at least once, even across an agent
restart. With ``last_value_wins`` a value replaces the one of the same point still waiting,
so after an outage only the newest command per point is written. A value that can never be
written (an unknown point, out of range) is dropped, counted and logged with the point.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
from pathlib import Path
from typing import Any

import orjson

from edge_agent.connectors.api import Sink, make_sink
from edge_agent.connectors.runner import RETRY_DELAYS_S
from spanedge.logsafe import escaped
from spanedge.sinks import ConnectorSinkSpec

log = logging.getLogger(__name__)

#: Values waiting per sink; past this the oldest are dropped, counted and logged (a device down for long).
MAX_PENDING = 100_000


class Actuators:
    """The durable queue of the connector sinks and their writer tasks."""

    def __init__(self, path: Path, delays: tuple[float, ...] = RETRY_DELAYS_S, max_pending: int = MAX_PENDING) -> None:
        """Open (or create) the queue; writers start with the first value of their sink."""
        self.max_pending = max_pending
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS pending (id INTEGER PRIMARY KEY AUTOINCREMENT, sink TEXT NOT NULL, "
            "point TEXT NOT NULL, slot TEXT, value BLOB NOT NULL, UNIQUE (sink, slot))"
        )
        self.db.execute("CREATE INDEX IF NOT EXISTS pending_by_sink ON pending (sink, id)")
        self.delays = delays
        self.written = 0
        self.refused = 0
        self.dropped = 0
        self._specs: dict[str, ConnectorSinkSpec] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.up: dict[str, bool] = {}
        self.failures: dict[str, int] = {}
        """Failed attempts to reach each sink's device since the agent started."""
        self.last_error: dict[str, str] = {}
        """Each sink's last failure, kept after its device is reachable again."""

    def put(self, sink: str, spec: ConnectorSinkSpec, value: Any) -> None:
        """Queue ``value`` (a result mapping) for ``sink`` (``<app>/<operator>``) and wake its writer."""
        whole = spec.value_field == ""  # a webhook: the whole result is the value, keyed by key_field if any
        point = value.get(spec.key_field) if isinstance(value, dict) else None
        if whole and not spec.key_field:
            point = ""
        if point is None or not (whole or (isinstance(value, dict) and spec.value_field in value)):
            self.refused += 1
            log.error(
                "sink %s: result %s has no %r and %r fields; it is not written",
                sink,
                escaped(str(value)[:200]),
                spec.key_field,
                spec.value_field,
            )
            return
        body = orjson.dumps(value if whole else value[spec.value_field], default=str)
        slot = str(point) if spec.last_value_wins else None
        with self.db:
            self.db.execute("DELETE FROM pending WHERE sink = ? AND slot = ?", (sink, slot))
            self.db.execute(
                "INSERT INTO pending (sink, point, slot, value) VALUES (?, ?, ?, ?)", (sink, str(point), slot, body)
            )
            over = self.pending(sink) - self.max_pending
            if over > 0:
                self.db.execute(
                    "DELETE FROM pending WHERE id IN (SELECT id FROM pending WHERE sink = ? ORDER BY id LIMIT ?)",
                    (sink, over),
                )
                self.dropped += over
                if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                    log.warning(
                        "sink %s: more than %d values wait for the device; %d oldest dropped so far",
                        sink,
                        self.max_pending,
                        self.dropped,
                    )
        self._start(sink, spec)

    def pending(self, sink: str | None = None) -> int:
        """Values not yet written (of ``sink``, or of all sinks)."""
        if sink is None:
            row = self.db.execute("SELECT count(*) FROM pending").fetchone()
        else:
            row = self.db.execute("SELECT count(*) FROM pending WHERE sink = ?", (sink,)).fetchone()
        return int(row[0])

    def resume(self, specs: dict[str, ConnectorSinkSpec]) -> None:
        """Start the writers of ``specs`` (by sink) that have values left from before a restart."""
        for sink, spec in specs.items():
            if self.pending(sink):
                self._start(sink, spec)

    def _start(self, sink: str, spec: ConnectorSinkSpec) -> None:
        self._specs[sink] = spec
        wake = self._wake.setdefault(sink, asyncio.Event())
        wake.set()
        if sink not in self._tasks:
            self._tasks[sink] = asyncio.get_running_loop().create_task(self._writer(sink), name=f"sink {sink}")

    async def _writer(self, sink: str) -> None:
        spec = self._specs[sink]
        device: Sink | None = None
        failures = 0
        wake = self._wake[sink]
        while True:
            rows = self.db.execute(
                "SELECT id, point, value FROM pending WHERE sink = ? ORDER BY id LIMIT 100", (sink,)
            ).fetchall()
            if not rows:
                wake.clear()
                await wake.wait()
                continue
            try:
                if device is None:
                    device = make_sink(spec)
                    await device.connect()
                    self.up[sink] = True
                    if failures:
                        log.info("sink %s: %s reachable again", sink, device.name)
                for row_id, point, body in rows:
                    try:
                        await device.write(point, orjson.loads(body))
                        self.written += 1
                    except ValueError as exc:
                        self.refused += 1
                        log.error("sink %s: %s; the value is not written", sink, escaped(str(exc)))
                    self.db.execute("DELETE FROM pending WHERE id = ?", (row_id,))
                failures = 0
            except asyncio.CancelledError:
                if device is not None:
                    await device.close()
                raise
            except Exception as exc:  # the device is unreachable or the connection broke: retry
                failures += 1
                self.up[sink] = False
                self.failures[sink] = self.failures.get(sink, 0) + 1
                self.last_error[sink] = f"{type(exc).__name__}: {exc}"
                delay = self.delays[min(failures, len(self.delays)) - 1] * (1 + 0.2 * random.random())
                if failures in (1, 2, 5) or failures % 20 == 0:
                    log.warning("sink %s: %s: %s; retrying in %.1f s", sink, type(exc).__name__, exc, delay)
                if device is not None:
                    await device.close()
                device = None
                await asyncio.sleep(delay)

    def close(self) -> None:
        """Stop the writers (values not written stay queued for the next start) and close the queue."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        self.db.close()
