"""Closing a hub window in the micro-batch that reads the record past its end, instead of the one after.

In Spark's append mode a window result takes two micro-batches: the batch
that reads a record past the window's end (plus the allowed lateness) moves
the watermark, and only the next batch, which runs with that watermark,
emits the window. A query whose sink reads a window directly runs in update
mode instead: each micro-batch hands the sink the aggregates of the windows
its records changed, and :class:`WindowCloser` keeps each open window's
latest aggregate and writes it as soon as the watermark has passed its end:
the largest event time seen so far, in milliseconds as Spark counts it,
minus the allowed lateness, including the records of the batch at hand.

That is the edge agents' rule (:mod:`spanedge.runtime.windows`): a record
whose window has been written is late, and a record behind the watermark
whose window never opened for its key opens it, to be written at once.
Spark is one micro-batch more lenient: it drops a record only behind the
watermark the batch *before* ran with, so a record that arrives in the
batch after its window closed still reaches the window's aggregate. The
closer drops such an update of a window it has written, and counts the
records it added (:attr:`late`, with Spark's own count of late records in
the query's metrics).

The open windows, the windows written in the last batch (with how many
records they had) and the largest event time are the closer's state. It
belongs to the query's checkpoint: after batch N it is kept in
``closing/<N>.json`` (written atomically, before the sink records the batch
as written), and batch N starts from the state of the latest batch before
N, so a batch Spark replays after a crash closes the same windows again,
which the sink's batch-id idempotence then discards or overwrites.

The window query adds what the closer needs to each result (:data:`EXTRA`):
the window's start and end and the latest event time of its records, in
milliseconds, and how many of them had the window's key (the group of the
records without it only moves the watermark and is never written).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

START_MS = "_start_ms"
END_MS = "_end_ms"
MAX_MS = "_max_ms"
KEYED = "_keyed"
EXTRA = (START_MS, END_MS, MAX_MS, KEYED)
"""The columns a closing window adds to its results, for the closer only."""

log = logging.getLogger(__name__)

STATE_DIR = "closing"
"""The closer's folder in the query's checkpoint directory."""

KEPT_STATES = 3
"""Closer states kept on disk (a replay needs the one before the batch it replays)."""

OBSERVATION = "window.closed"
"""The name under which the closer reports the windows it wrote, next to Spark's observed counts."""

_Key = tuple[str, str, str, int, int]


class WindowCloser:
    """The open windows of one query's window and its watermark; writes each window the watermark passed, once."""

    def __init__(self, checkpoint: Path, lateness_ms: int) -> None:
        """Keep the state under ``checkpoint``; a window closes ``lateness_ms`` after its end in event time."""
        self.folder = checkpoint / STATE_DIR
        self.lateness_ms = lateness_ms
        self._batch = -1
        self._max_ms: int | None = None
        self._open: dict[_Key, dict[str, Any]] = {}
        self._written: dict[_Key, int] = {}
        """The windows written by the last batch that wrote some, with their records (Spark may still update them once)."""
        self.late = 0
        """Records that reached a window after it was written, by this process."""
        self.closed = 0
        """Windows written so far, by this process."""
        self.rate = 0.0
        """Windows written per second, over the last batch that wrote some and the time since the one before."""
        self._closed_at: float | None = None

    @property
    def watermark_ms(self) -> int | None:
        """The latest event time so far minus the allowed lateness, in epoch milliseconds (None before any record)."""
        return None if self._max_ms is None else self._max_ms - self.lateness_ms

    def close(self, table: pa.Table, batch_id: int) -> pa.Table:
        """The windows batch ``batch_id`` closes, given the aggregates it changed (with :data:`EXTRA`), as result rows."""
        import pyarrow as pa

        self._resume(batch_id)
        columns = [c for c in table.column_names if c not in EXTRA]
        late = 0
        for row in table.to_pylist():
            latest = row[MAX_MS]
            if latest is not None and (self._max_ms is None or latest > self._max_ms):
                self._max_ms = int(latest)
            if not row[KEYED]:
                continue  # the records without the key: no window
            key = (row["site"], row["stream"], row["key"], int(row[START_MS]), int(row[END_MS]))
            if key in self._written:  # written already: what changed it is late
                late += int(row[KEYED]) - self._written[key]
                continue
            self._open[key] = {c: row[c] for c in columns}
            self._open[key][KEYED] = int(row[KEYED])
        mark = self.watermark_ms
        done = sorted(
            (k for k in self._open if mark is not None and k[4] <= mark), key=lambda k: (k[4], k[3], k[0], k[1], k[2])
        )
        if done:
            self._written = {k: self._open[k][KEYED] for k in done}
        rows = [self._open.pop(k) for k in done]
        for row in rows:
            del row[KEYED]
        if late:
            self.late += late
            log.warning("%d records reached windows already written, after the watermark; dropped", late)
        self._save(batch_id)
        self._count(len(rows))
        schema = table.schema
        for name in EXTRA:
            schema = schema.remove(schema.get_field_index(name))
        return pa.Table.from_pylist(rows, schema=schema)

    def _count(self, n: int) -> None:
        """Add ``n`` windows written now to the total and the rate."""
        if not n:
            return
        now = time.time()
        self.rate = n / (now - self._closed_at) if self._closed_at is not None and now > self._closed_at else 0.0
        self._closed_at = now
        self.closed += n

    def _resume(self, batch_id: int) -> None:
        """Take the state after the latest batch before ``batch_id`` (from disk unless it is the one in memory)."""
        if self._batch == batch_id - 1:
            return
        self._batch, self._max_ms, self._open, self._written = -1, None, {}, {}
        earlier = [b for b in self._saved() if b < batch_id]
        if not earlier:
            return
        data = json.loads((self.folder / f"{max(earlier)}.json").read_text())
        self._batch = batch_id - 1
        self._max_ms = data["max_ms"]
        self._open = {tuple(w["key"]): w["row"] for w in data["open"]}
        self._written = {tuple(w["key"]): w["records"] for w in data["written"]}

    def _saved(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        return [int(p.stem) for p in self.folder.glob("*.json") if p.stem.isdigit()]

    def _save(self, batch_id: int) -> None:
        """Keep the state after ``batch_id`` (durably, before the sink records the batch), and drop old states."""
        self.folder.mkdir(parents=True, exist_ok=True)
        data = {
            "max_ms": self._max_ms,
            "open": [{"key": list(k), "row": r} for k, r in self._open.items()],
            "written": [{"key": list(k), "records": n} for k, n in self._written.items()],
        }
        final = self.folder / f"{batch_id}.json"
        tmp = self.folder / f".{batch_id}.json.tmp"
        with tmp.open("w") as fh:
            fh.write(json.dumps(data))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        self._batch = batch_id
        for old in sorted(self._saved())[:-KEPT_STATES]:
            (self.folder / f"{old}.json").unlink(missing_ok=True)
