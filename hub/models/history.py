"""The labelled records one model trains on, kept by the hub for a window of time (:class:`History`).

Layout of one model's history under ``<state_dir>/models/<app>/<model>/history/``::

    00000000000000000000.jsonl   a segment: one record a line, its first record is number 0
    00000000000000010000.jsonl   the next segment, named by the number of its first record
    index.json                   the dedupe marks, the number of the next record, each segment's newest event time

Records come in the order of the app's ingest log (:mod:`hub.models.feed`); one
already kept, by site, stream, ownership epoch and ``seq`` as the ingest
dedupes, is dropped, so reading a log segment twice changes nothing. A new
segment starts after :data:`SEGMENT_ROWS` records or :data:`SEGMENT_BYTES`
bytes, so where segments begin depends only on the records kept. A training
reads the newest ``rows`` records with an event time in the last ``seconds``
(:class:`Bounds`); a segment that holds none of them is deleted, and the
oldest segments go while the history is over ``max_bytes``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from hub.ingest.log import segment_name, segments
from hub.models.registry import write_atomic
from spanedge.models.spec import DEFAULT_HISTORY_ROWS, DEFAULT_HISTORY_S
from spanedge.wire.log_line import LogLine

log = logging.getLogger(__name__)

INDEX_FILE = "index.json"
#: A segment holds at most this many records, and this many bytes (a record past it starts the next).
SEGMENT_ROWS = 10_000
SEGMENT_BYTES = 8 * 1024 * 1024
#: A model's history takes at most about this many bytes (its newest segment whatever its size).
DEFAULT_MAX_BYTES = 512 * 1024 * 1024

Key = tuple[str, str, int]


@dataclass(frozen=True)
class Bounds:
    """What a history keeps: records of the last ``seconds`` (event time), the newest ``rows``, ``max_bytes`` in all."""

    seconds: float = DEFAULT_HISTORY_S
    rows: int = DEFAULT_HISTORY_ROWS
    max_bytes: int = DEFAULT_MAX_BYTES


def _entries(path: Path, data: bytes) -> list[dict[str, Any]]:
    """The records of a segment's bytes; a damaged line is skipped with a warning naming it."""
    out = []
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            entry = orjson.loads(raw)
            float(entry["event_time"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("model history: line %d of %s is damaged and skipped; delete the file to drop it", number, path)
            continue
        out.append(entry)
    return out


def _line(line: LogLine) -> bytes:
    entry = {"site": line.site, "stream": line.stream, "epoch": line.epoch, "seq": line.seq}
    return orjson.dumps({**entry, "event_time": line.event_time, "value": line.value}) + b"\n"


class History:
    """The labelled history of one model in ``folder``, bounded by ``bounds``; ``clock`` gives seconds since the epoch.

    Opening cuts a partial last line (a crash mid-write) and rebuilds what
    the index missed from the segments, so a history reads the same rows
    after a restart.
    """

    def __init__(self, folder: Path, bounds: Bounds | None = None, clock: Callable[[], float] = time.time) -> None:
        """Open (or create) the history in ``folder``."""
        self.folder = Path(folder)
        self.bounds = bounds or Bounds()
        self.clock = clock
        self.folder.mkdir(parents=True, exist_ok=True)
        self.marks: dict[Key, int] = {}
        self.next = 0  # the number of the next record kept
        self._newest: dict[int, float] = {}  # per segment (by its first number): the newest event time in it
        self._active = (0, 0)  # the records and bytes of the newest segment
        self._open()

    # -- opening -------------------------------------------------------------

    def _open(self) -> None:
        try:
            index = orjson.loads((self.folder / INDEX_FILE).read_bytes())
            self.marks = {(str(m[0]), str(m[1]), int(m[2])): int(m[3]) for m in index["marks"]}
            self._newest = {int(b): float(t) for b, t in index["newest"]}
            covered = int(index["next"])
        except FileNotFoundError:
            covered = 0
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as exc:
            log.warning(
                "model history %s: %s is damaged (%s); rebuilding it from the segments", self.folder, INDEX_FILE, exc
            )
            self.marks, self._newest, covered = {}, {}, 0
        segs = segments(self.folder)
        if segs and not self._cut_partial(segs[-1][1]):  # started just before a crash: nothing in it
            segs.pop()[1].unlink()
        self._newest = {b: t for b, t in self._newest.items() if any(b == base for base, _ in segs)}
        for i, (base, path) in enumerate(segs):
            last = i == len(segs) - 1
            if not last and base in self._newest and segs[i + 1][0] <= covered:
                continue
            data = path.read_bytes()
            lines = data.splitlines()
            for number, entry in enumerate(_entries(path, data), start=base):
                self._newest[base] = max(self._newest.get(base, float("-inf")), float(entry["event_time"]))
                if number >= covered:
                    key = (entry["site"], entry["stream"], int(entry["epoch"]))
                    self.marks[key] = max(self.marks.get(key, -(2**63)), int(entry["seq"]))
            if last:
                self.next = base + len(lines)
                self._active = (len(lines), len(data))
        self.next = max(self.next, covered) if segs else covered

    def _reopen(self) -> None:
        self.marks, self.next, self._newest, self._active = {}, 0, {}, (0, 0)
        self._open()

    def _cut_partial(self, path: Path) -> bytes:
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            log.warning("model history %s: cutting a partial record at the end of %s", self.folder, path.name)
            with path.open("r+b") as fh:
                fh.truncate(len(complete))
                os.fsync(fh.fileno())
        return complete

    # -- writing -------------------------------------------------------------

    def add(self, lines: Iterable[LogLine]) -> int:
        """Keep the records of ``lines`` not kept before and still in the window; return how many were kept."""
        cutoff = self.clock() - self.bounds.seconds
        kept = 0
        seen = False
        fh = None
        try:
            for line in lines:
                key = (line.site, line.stream, line.epoch)
                if line.seq <= self.marks.get(key, -(2**63)):
                    continue
                self.marks[key] = line.seq
                seen = True
                if not isinstance(line.value, dict) or line.event_time < cutoff:
                    continue
                fh = self._write(fh, _line(line), line.event_time)
                kept += 1
            if fh is not None:
                fh.flush()
                os.fsync(fh.fileno())
        except OSError:  # a full disk, say: what is on disk is what the history holds, read again
            if fh is not None:
                with contextlib.suppress(OSError):
                    fh.close()
                fh = None
            self._reopen()
            raise
        finally:
            if fh is not None:
                fh.close()
        if seen:
            self._save_index()
        if kept:
            self.trim()
        return kept

    def _write(self, fh: Any, data: bytes, event_time: float) -> Any:
        """Append one encoded record to the newest segment, starting a new one when it is full."""
        rows, size = self._active
        if fh is None or rows >= SEGMENT_ROWS or size >= SEGMENT_BYTES:
            if fh is not None:
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
            if rows >= SEGMENT_ROWS or size >= SEGMENT_BYTES or not self._newest:
                rows, size = 0, 0
                self._newest[self.next] = event_time
            fh = (self.folder / segment_name(self._base())).open("ab")
        fh.write(data)
        base = self._base()
        self._newest[base] = max(self._newest[base], event_time)
        self._active = (rows + 1, size + len(data))
        self.next += 1
        return fh

    def _base(self) -> int:
        return max(self._newest) if self._newest else self.next

    def _save_index(self) -> None:
        marks = [[site, stream, epoch, seq] for (site, stream, epoch), seq in sorted(self.marks.items())]
        index = {"next": self.next, "marks": marks, "newest": sorted(self._newest.items())}
        write_atomic(self.folder / INDEX_FILE, orjson.dumps(index))

    def trim(self) -> list[Path]:
        """Delete the segments (never the newest) past the window, past the row cap, or over the size; return them."""
        segs = segments(self.folder)
        cutoff = self.clock() - self.bounds.seconds
        floor = self.next - self.bounds.rows
        doomed = [
            path
            for i, (base, path) in enumerate(segs[:-1])
            if segs[i + 1][0] <= floor or self._newest.get(base, cutoff) < cutoff
        ]
        left = [(base, path) for base, path in segs if path not in doomed]
        total = sum(path.stat().st_size for _, path in left)
        for _, path in left[:-1]:
            if total <= self.bounds.max_bytes:
                break
            total -= path.stat().st_size
            doomed.append(path)
        for path in doomed:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            self._newest.pop(int(path.stem), None)
        if doomed:
            self._save_index()
        return doomed

    # -- reading -------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        """The record values to train on, each with its ``event_time``, oldest first (see :class:`Bounds`)."""
        cutoff = self.clock() - self.bounds.seconds
        out: list[dict[str, Any]] = []
        for base, path in reversed(segments(self.folder)):
            if self._newest.get(base, cutoff) < cutoff:
                continue
            for entry in reversed(_entries(path, path.read_bytes())):
                if entry["event_time"] >= cutoff:
                    out.append({**entry["value"], "event_time": entry["event_time"]})
                    if len(out) >= self.bounds.rows:
                        return out[::-1]
        return out[::-1]
