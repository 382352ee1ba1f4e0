"""The durable edge→hub outbox: an SQLite (WAL) queue of records, with window snapshots.

Records get their per-(site, stream, epoch) sequence number when they enter the
outbox (the epoch is the plan version at which this site took over the
replica producing the stream, so a moved stream starts a sequence of its own), in the same transaction that stores the pipelines' snapshots, so the
outbox position and the checkpointed window state always agree. A record
leaves only when the hub broker acknowledged the batch carrying it. The queue
is bounded in bytes; when full, the ``oldest`` policy drops the oldest
records and the ``newest`` policy refuses new ones; both count the loss.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from msgspec import Raw

from spanedge import topics
from spanedge.private_files import create_private, private_dir
from spanedge.runtime import HubRecord
from spanedge.wire.batch import VERSION, BatchMessage, WireRecord, encode_message

POLICIES = ("oldest", "newest")
_OVERHEAD = 48  # bytes per record beyond its value: seq, time, key, framing
_ENVELOPE = 512  # bytes of a batch beyond its records: version, app, site, stream, epoch, frontier

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app TEXT NOT NULL, stream TEXT NOT NULL, site TEXT NOT NULL,
    seq INTEGER NOT NULL, t REAL NOT NULL, k TEXT, v BLOB NOT NULL, size INTEGER NOT NULL,
    epoch INTEGER NOT NULL DEFAULT 0, w REAL
);
CREATE TABLE IF NOT EXISTS seqs (
    app TEXT NOT NULL, site TEXT NOT NULL, stream TEXT NOT NULL, epoch INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL,
    PRIMARY KEY (app, site, stream, epoch)
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS state (app TEXT PRIMARY KEY, blob BLOB NOT NULL);
-- every heartbeat asks each app's oldest event time (Outbox.oldest): a lookup, not a scan of the backlog
CREATE INDEX IF NOT EXISTS outbox_app_t ON outbox (app, t);
"""

# acknowledged ids come as one JSON array (text): fixed statements, prepared once
_ACKED_TOTALS = "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM outbox WHERE id IN (SELECT value FROM json_each(?))"
_DELETE_ACKED = "DELETE FROM outbox WHERE id IN (SELECT value FROM json_each(?))"

SeqKey = tuple[str, str, str, int]
"""(app, site, stream, epoch): what a sequence number counts."""


@dataclass(frozen=True)
class Batch:
    """Consecutive outbox records of one (app, site, stream, epoch), encoded as one batch (:mod:`spanedge.wire.batch`)."""

    app: str
    site: str
    stream: str
    ids: tuple[int, ...]
    payload: bytes
    epoch: int = 0

    @property
    def last_id(self) -> int:
        """The highest outbox id in the batch."""
        return self.ids[-1]


class Outbox:
    """An SQLite-backed, bounded, ordered queue of records for the hub.

    Args:
        path: the database file (created with its directory).
        max_bytes: the bound on queued record bytes.
        policy: ``"oldest"`` (drop the oldest when full) or ``"newest"`` (refuse new records).
    """

    def __init__(self, path: str | Path, max_bytes: int = 256 * 2**20, policy: str = "oldest") -> None:
        if policy not in POLICIES:
            msg = f"drop policy must be one of {', '.join(POLICIES)}, got {policy!r}"
            raise ValueError(msg)
        if max_bytes <= 0:
            msg = f"outbox max bytes must be positive, got {max_bytes}"
            raise ValueError(msg)
        self.path = Path(path)
        private_dir(self.path.parent)
        create_private(self.path)  # SQLite gives its -wal and -shm files the mode of the database
        self.max_bytes = max_bytes
        self.policy = policy
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM outbox").fetchone()
        self.records, self.bytes = int(row[0]), int(row[1])
        self._seqs: dict[SeqKey, int] = self._load_seqs()
        counters = dict(self._db.execute("SELECT name, value FROM counters").fetchall())
        self.dropped = int(counters.get("dropped", 0))
        self.sent = int(counters.get("sent", 0))

    def commit(
        self,
        records: Mapping[str, Iterable[HubRecord]],
        states: Mapping[str, bytes] | None = None,
        frontiers: Mapping[str, float] | None = None,
        drop: Iterable[str] = (),
    ) -> int:
        """Append records (by app) and store snapshots (by app) in one transaction; delete the states ``drop`` names.

        ``frontiers`` gives, by app, the event time below which the app sends
        the hub nothing after these records (:meth:`spanedge.runtime.Pipeline.frontier`);
        the last record of the app stored here carries it, and the batch that
        sends that record announces it (``complete``).

        Returns:
            The number of records stored (fewer than given if the ``newest`` policy refused some).
        """
        stored = 0
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                touched: set[SeqKey] = set()
                rows: list[tuple[Any, ...]] = []
                for app, recs in records.items():
                    first = len(rows)
                    for r in recs:
                        ident = (app, r.site, r.stream, r.epoch)
                        seq = self._seqs.get(ident, 0) + 1
                        self._seqs[ident] = seq
                        touched.add(ident)
                        value = r.encoded
                        size = len(value) + len(r.key or "") + _OVERHEAD
                        if self.policy == "newest" and self.bytes + size > self.max_bytes:
                            self.dropped += 1
                            continue
                        rows.append((app, r.stream, r.site, r.epoch, seq, r.event_time, r.key, value, size, None))
                        self.records += 1
                        self.bytes += size
                        stored += 1
                    frontier = (frontiers or {}).get(app)
                    if frontier is not None and len(rows) > first:
                        rows[-1] = (*rows[-1][:-1], frontier)
                if rows:
                    db.executemany(
                        "INSERT INTO outbox (app, stream, site, epoch, seq, t, k, v, size, w)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        rows,
                    )
                if touched:
                    db.executemany(
                        "INSERT OR REPLACE INTO seqs (app, site, stream, epoch, seq) VALUES (?, ?, ?, ?, ?)",
                        [(*ident, self._seqs[ident]) for ident in touched],
                    )
                if self.bytes > self.max_bytes:
                    self._drop_oldest()
                if states:
                    db.executemany("INSERT OR REPLACE INTO state (app, blob) VALUES (?, ?)", list(states.items()))
                gone = [(name,) for name in drop if not states or name not in states]
                if gone:
                    db.executemany("DELETE FROM state WHERE app = ?", gone)
                self._save_counters()
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                self._reload()
                raise
        return stored

    def _drop_oldest(self) -> None:
        excess = self.bytes - self.max_bytes
        freed = 0
        n = 0
        last = 0
        for ident, size in self._db.execute("SELECT id, size FROM outbox ORDER BY id"):
            freed += size
            n += 1
            last = ident
            if freed >= excess:
                break
        self._db.execute("DELETE FROM outbox WHERE id <= ?", (last,))
        self.records -= n
        self.bytes -= freed
        self.dropped += n

    def _save_counters(self) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO counters (name, value) VALUES (?, ?)",
            [("dropped", self.dropped), ("sent", self.sent)],
        )

    def _reload(self) -> None:
        row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM outbox").fetchone()
        self.records, self.bytes = int(row[0]), int(row[1])
        self._seqs = self._load_seqs()

    def _load_seqs(self) -> dict[SeqKey, int]:
        rows = self._db.execute("SELECT app, site, stream, epoch, seq FROM seqs")
        return {(a, si, st, int(e)): int(q) for a, si, st, e, q in rows}

    def last_seqs(self, app: str, site: str, epoch: int) -> list[tuple[str, int]]:
        """The last sequence number given to each stream of ``app`` from ``site`` in ``epoch``: ``(stream, seq)``."""
        with self._lock:
            return sorted((k[2], seq) for k, seq in self._seqs.items() if (k[0], k[1], k[3]) == (app, site, epoch))

    def batches(
        self, after_id: int, max_records: int, batch_size: int = 100, max_bytes: int | None = None
    ) -> list[Batch]:
        """Return up to ``max_records`` records after ``after_id``, in order, as batches.

        With ``max_bytes``, no batch's payload is larger unless it holds a single record that alone is.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT id, app, stream, site, epoch, seq, t, k, v, w FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
                (after_id, max_records),
            ).fetchall()
        budget = max_bytes if max_bytes is not None else float("inf")
        out: list[Batch] = []
        current: list[Any] = []
        size = _ENVELOPE
        for row in rows:
            cost = len(row[8]) + len(row[7] or "") + _OVERHEAD
            if current and (len(current) >= batch_size or current[0][1:5] != row[1:5] or size + cost > budget):
                out += _encode_within(current, budget)
                current, size = [], _ENVELOPE
            current.append(row)
            size += cost
        if current:
            out += _encode_within(current, budget)
        return out

    def ack(self, ids: Iterable[int]) -> None:
        """Remove acknowledged records."""
        wanted = list(ids)
        if not wanted:
            return
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                # the ids as one JSON array: two fixed statements, where an IN list of ``?`` per id
                # would prepare (and cache, up to 128) new statements for every count of ids
                listed = (orjson.dumps(wanted).decode(),)
                row = db.execute(_ACKED_TOTALS, listed).fetchone()
                db.execute(_DELETE_ACKED, listed)
                self.records -= int(row[0])
                self.bytes -= int(row[1])
                self.sent += int(row[0])
                self._save_counters()
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def discard(self, app: str, site: str, epoch: int) -> int:
        """Remove the records of ``app`` from ``site`` in ``epoch`` not sent yet; return how many."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                where = "FROM outbox WHERE app = ? AND site = ? AND epoch = ?"
                n, size = db.execute(f"SELECT COUNT(*), COALESCE(SUM(size), 0) {where}", (app, site, epoch)).fetchone()
                db.execute(f"DELETE {where}", (app, site, epoch))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self.records -= int(n)
            self.bytes -= int(size)
        return int(n)

    def load_state(self, app: str) -> bytes | None:
        """Return the last snapshot stored for ``app``."""
        with self._lock:
            row = self._db.execute("SELECT blob FROM state WHERE app = ?", (app,)).fetchone()
        return None if row is None else bytes(row[0])

    def oldest(self, app: str) -> float | None:
        """The earliest event time among ``app``'s records still here (None: none)."""
        with self._lock:
            row = self._db.execute("SELECT MIN(t) FROM outbox WHERE app = ?", (app,)).fetchone()
        return None if row[0] is None else float(row[0])

    def stats(self) -> dict[str, int]:
        """Backlog and counters: records, bytes, dropped, sent."""
        return {"records": self.records, "bytes": self.bytes, "dropped": self.dropped, "sent": self.sent}

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


def _encode_within(rows: list[Any], max_bytes: float) -> list[Batch]:
    """``rows`` as one batch, or halved until each batch is at most ``max_bytes`` (or holds one record)."""
    batch = _encode(rows)
    if len(batch.payload) <= max_bytes or len(rows) == 1:
        return [batch]
    half = len(rows) // 2
    return _encode_within(rows[:half], max_bytes) + _encode_within(rows[half:], max_bytes)


def _encode(rows: list[Any]) -> Batch:
    _, app, stream, site, epoch = rows[0][:5]
    # every record after a record with a frontier lies at or past it: so do those after this batch
    announced = [r[9] for r in rows if r[9] is not None]
    message = BatchMessage(
        v=VERSION,
        app=app,
        site=site,
        stream=stream,
        epoch=int(epoch),
        complete=max(announced) if announced else None,
        # each value is stored encoded: it goes into the batch as it is
        records=[WireRecord(seq=seq, t=t, k=k, v=Raw(v)) for _, _, _, _, _, seq, t, k, v, _ in rows],
    )
    return Batch(app, site, stream, tuple(r[0] for r in rows), encode_message(message), int(epoch))


class Drainer:
    """Publishes the outbox to the hub broker in order, at a bounded rate, removing on PUBACK.

    Args:
        outbox: the queue to drain.
        transport: the hub broker connection.
        rate: maximum records/s (the backlog must not starve live data).
        max_inflight: batches published but not yet acknowledged.
        batch_size: records per MQTT message.
        max_batch_bytes: the largest MQTT message, the hub's ingest limit (``None``: no limit); a record
            that alone is larger goes alone, and the hub dead-letters it.
        publisher: the site this agent serves. Every batch goes on its data topic
            (``spanedge/v1/<app>/<stream>/<publisher>``), the only ones its broker identity may
            write; a batch of another site's replica run here keeps that site in its envelope.
            ``None``: each batch on the topic of its envelope's site.
    """

    def __init__(
        self,
        outbox: Outbox,
        transport: Any,
        rate: float = 20_000.0,
        max_inflight: int = 20,
        batch_size: int = 100,
        publisher: str | None = None,
        max_batch_bytes: int | None = None,
    ) -> None:
        self.outbox = outbox
        self.max_batch_bytes = max_batch_bytes
        self.publisher = publisher
        self.transport = transport
        self.rate = rate
        self.max_inflight = max_inflight
        self.batch_size = batch_size
        self._inflight: dict[int, Batch] = {}
        self._cursor = 0
        self._acked: collections.deque[int] = collections.deque()
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tokens = float(batch_size)
        self._last = time.monotonic()

    def acked(self, mid: int) -> None:
        """Note a PUBACK (called from the network thread)."""
        self._acked.append(mid)
        self.kick_threadsafe()

    def kick_threadsafe(self) -> None:
        """Wake the drain loop from another thread."""
        if self._loop is not None and self._wake is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake.set)

    def kick(self) -> None:
        """Wake the drain loop (new records were committed)."""
        if self._wake is not None:
            self._wake.set()

    @property
    def inflight(self) -> int:
        """Batches waiting for their PUBACK."""
        return len(self._inflight)

    def _settle(self) -> None:
        ids: list[int] = []
        while self._acked:
            batch = self._inflight.pop(self._acked.popleft(), None)
            if batch is not None:
                ids.extend(batch.ids)
        if ids:
            self.outbox.ack(ids)

    def _refill(self) -> None:
        now = time.monotonic()
        cap = max(self.rate * 0.5, float(self.batch_size))
        self._tokens = min(cap, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def step(self) -> float:
        """Settle acknowledgements and publish what the rate and in-flight bounds allow.

        Returns:
            Seconds to wait before the next step if nothing wakes the loop.
        """
        self._settle()
        if not self.transport.connected:
            return 0.5
        self._refill()
        free = self.max_inflight - len(self._inflight)
        want = min(int(self._tokens), free * self.batch_size)
        if free <= 0 or want < 1:
            return max(0.005, (1 - self._tokens) / self.rate) if free > 0 else 0.2
        for batch in self.outbox.batches(self._cursor, want, self.batch_size, self.max_batch_bytes):
            topic = topics.data(batch.app, batch.stream, self.publisher or batch.site)
            mid = self.transport.publish(topic, batch.payload, 1)
            self._inflight[mid] = batch
            self._cursor = batch.last_id
            self._tokens -= len(batch.ids)
        return 0.2

    async def run(self, stop: asyncio.Event) -> None:
        """Drain until ``stop`` is set."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while not stop.is_set():
            delay = self.step()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def drain(self, timeout: float) -> bool:
        """Publish the whole backlog and wait for its acknowledgements, up to ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step()
            if self.outbox.records == 0 and not self._inflight:
                return True
            await asyncio.sleep(0.02)
        self._settle()
        return self.outbox.records == 0
