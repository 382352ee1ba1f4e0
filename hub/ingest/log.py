"""The hub's durable ingest log: segmented, append-only files per app.

Layout of one app's log under ``<state>/ingest/<app>/``::

    00000000000000000000.jsonl   a sealed segment whose first byte has global offset 0
    00000000000000016310.jsonl   the next segment, named by its first global offset
    hwm.json                     dedupe high-water marks and the log position they cover
    format.json                  the format version of its lines
    inbox/<reader>/              one folder per Spark query: hard links to the sealed
                                 segments it has not processed yet, and ``.from``

Offsets are byte positions in the concatenation of all segments ever
written, so a reader finds the bytes of ``[start, end)`` from the file
names alone. Every line is one record as JSON
(:class:`spanedge.wire.log_line.LogLine`): a record value that is a JSON
object is embedded as one, any other value is its JSON text (so a hub
window parses each line once, value included: :mod:`hub.engine.source`).
``format.json`` holds the lines' format version (``line_version``;
:func:`check_format`). Only whole lines are visible: the tail position is
the end of the last complete line.

The last segment is the active one, the only one ever appended to. The
writer *seals* it (:meth:`AppLog.seal`: fsync, start a new segment) at
most every :data:`SEAL_INTERVAL_S` while records arrive, just before each
micro-batch of its readers starts, and at once after a record that can
close one of the app's hub windows (:mod:`hub.ingest.seal_points`), and hands every
sealed segment to every subscribed reader as a hard link in the reader's
inbox (:func:`subscribe`). A sealed segment never changes again, so Spark's
built-in file source reads an inbox as a directory of JSON-lines files
(parsed in the JVM, no Python worker), records the files it processed in
its checkpoint, and deletes each link once its batch is committed
(``cleanSource``). :mod:`hub.engine.source` is the one place that turns a
log into a DataFrame.

A :class:`Hold` keeps the sealed segments holding a record at or after a
given event time from some inboxes (the queries that run a window) until
it is lifted, while a moved replica's old owner or a site that is behind
still owes the hub earlier records (:mod:`hub.handover.holds`,
:mod:`hub.handover.frontiers`), and never hands a query a run of segments that
would close a window of a record still waiting in the log; the writer knows
each segment's earliest and latest event time from what it appended.

A segment is deleted from the log once every reader is past it: an inbox
reader is at its oldest unprocessed link (or at ``.from`` when its inbox is
empty), a byte-offset reader at its committed offset.

The writer (:class:`AppLog`) lives in the ingest process; the functions at
module level are also used by the engine, so they only touch the files.
Inboxes change under an advisory file lock (``inbox/.lock``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import orjson

from hub.ingest import fence
from hub.ingest.seal_points import Closings
from spanedge.wire.batch import Record
from spanedge.wire.log_line import VERSION as LINE_VERSION
from spanedge.wire.log_line import LogLine, decode_lines, encode_lines, value_text

log = logging.getLogger(__name__)

SUFFIX = ".jsonl"
DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024
HWM_FILE = "hwm.json"
FORMAT_FILE = "format.json"
INBOX_DIR = "inbox"
FROM_FILE = ".from"
LOCK_FILE = ".lock"
SEAL_INTERVAL_S = 0.1
"""While records arrive, the active segment is sealed at most this often (a bound on the added latency)."""
HELD_SEAL_INTERVAL_S = 0.5
"""The seal interval while a :class:`Hold` holds many segments back: they reach a window's query in few micro-batches."""
HELD_MANY = 10
"""From this many segments held back, the log is sealed every :data:`HELD_SEAL_INTERVAL_S` (a brief hold keeps 0.1 s)."""
SEAL_AHEAD_S = 0.02
"""A seal timed for a micro-batch comes this long before the batch starts (linked before Spark lists the inbox)."""
KNOWN_TIMES = 10_000
"""How many sealed segments' latest event times a writer remembers (older ones are never held)."""


def segment_name(base: int) -> str:
    """Return the file name of the segment starting at global offset ``base``."""
    return f"{base:020d}{SUFFIX}"


def segments(log_dir: Path) -> list[tuple[int, Path]]:
    """Return ``(base offset, path)`` of the segments of a log, oldest first."""
    found: list[tuple[int, Path]] = []
    try:
        entries = list(os.scandir(log_dir))
    except FileNotFoundError:
        return []
    for entry in entries:
        name = entry.name
        if name.endswith(SUFFIX) and name[: -len(SUFFIX)].isdigit():
            found.append((int(name[: -len(SUFFIX)]), Path(entry.path)))
    found.sort()
    return found


def _complete_size(path: Path) -> int:
    """Return the size of ``path`` up to and including its last newline."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with path.open("rb") as fh:
        pos = size
        while pos > 0:
            step = min(pos, 65536)
            fh.seek(pos - step)
            chunk = fh.read(step)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                return pos - step + idx + 1
            pos -= step
    return 0


def tail(log_dir: Path) -> int:
    """Return the global offset just after the last complete record of the log."""
    segs = segments(log_dir)
    if not segs:
        return 0
    base, path = segs[-1]
    return base + _complete_size(path)


def head(log_dir: Path) -> int:
    """Return the global offset of the oldest retained byte of the log."""
    segs = segments(log_dir)
    return segs[0][0] if segs else 0


def read_bytes(log_dir: Path, start: int, end: int) -> bytes:
    """Return the raw lines between global offsets ``start`` and ``end``.

    Raises:
        FileNotFoundError: part of the range was already deleted.
    """
    if end <= start:
        return b""
    segs = segments(log_dir)
    parts: list[bytes] = []
    covered = start
    for i, (base, path) in enumerate(segs):
        seg_end = segs[i + 1][0] if i + 1 < len(segs) else end
        if seg_end <= start or base >= end:
            continue
        if base > covered:
            break
        lo = max(start, base)
        hi = min(end, seg_end)
        with path.open("rb") as fh:
            fh.seek(lo - base)
            data = fh.read(hi - lo)
        parts.append(data)
        covered = lo + len(data)
    if covered < end:
        msg = f"log {log_dir}: bytes [{covered}, {end}) are missing (deleted or never written)"
        raise FileNotFoundError(msg)
    return b"".join(parts)


def split_ranges(log_dir: Path, start: int, end: int) -> list[tuple[int, int]]:
    """Split ``[start, end)`` at segment boundaries (each piece holds whole lines)."""
    ranges: list[tuple[int, int]] = []
    segs = segments(log_dir)
    bounds = [b for b, _ in segs[1:]]
    lo = start
    for b in bounds:
        if lo < b < end:
            ranges.append((lo, b))
            lo = b
    if lo < end:
        ranges.append((lo, end))
    return ranges


def _write_atomic(path: Path, data: bytes, fsync: bool = False) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def collect_garbage(log_dir: Path) -> list[Path]:
    """Delete the segments every inbox reader is past (never the active one)."""
    committed = list(inbox_positions(log_dir).values())
    if not committed:
        return []
    floor = min(committed)
    segs = segments(log_dir)
    deleted: list[Path] = []
    for i in range(len(segs) - 1):
        next_base = segs[i + 1][0]
        if next_base <= floor:
            with contextlib.suppress(FileNotFoundError):
                segs[i][1].unlink()
                deleted.append(segs[i][1])
        else:
            break
    return deleted


# -- inboxes: the sealed segments a Spark file source has still to read --------


def inbox(log_dir: Path, reader: str) -> Path:
    """The folder Spark's file source of ``reader`` lists (it may not be subscribed yet)."""
    return log_dir / INBOX_DIR / reader


@contextlib.contextmanager
def _inbox_lock(log_dir: Path) -> Iterator[None]:
    folder = log_dir / INBOX_DIR
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / LOCK_FILE).open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _linked_to(folder: Path) -> int | None:
    """The offset below which every sealed segment was handed to the inbox ``folder`` (None: not subscribed)."""
    try:
        return int(json.loads((folder / FROM_FILE).read_bytes())["offset"])
    except (FileNotFoundError, NotADirectoryError, ValueError, KeyError, TypeError):
        return None


def _set_linked_to(folder: Path, offset: int) -> None:
    _write_atomic(folder / FROM_FILE, json.dumps({"offset": offset}).encode())


def _link(path: Path, folder: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.link(path, folder / path.name)


def _sealed(log_dir: Path) -> tuple[list[tuple[int, Path]], int]:
    """The sealed segments (all but the last) and the offset where the active one starts."""
    segs = segments(log_dir)
    if not segs:
        return [], 0
    return segs[:-1], segs[-1][0]


def subscribe(log_dir: Path, reader: str, offset: int | None = None) -> int:
    """Give ``reader`` an inbox holding every sealed segment from ``offset`` on; return where it starts.

    A reader that is already subscribed keeps its inbox. A new one starts at
    ``offset`` (a segment boundary; default: the oldest retained segment).
    """
    folder = inbox(log_dir, reader)
    with _inbox_lock(log_dir):
        existing = _linked_to(folder)
        if existing is not None:
            position = inbox_position(log_dir, reader)
            return existing if position is None else position
        folder.mkdir(parents=True, exist_ok=True)
        sealed, active = _sealed(log_dir)
        start = head(log_dir) if offset is None else offset
        for base, path in sealed:
            if base >= start:
                _link(path, folder)
        _set_linked_to(folder, max(active, start))
    return start


def unsubscribe(log_dir: Path, reader: str) -> None:
    """Drop ``reader``'s inbox; it no longer holds back segment deletion."""
    with _inbox_lock(log_dir):
        shutil.rmtree(inbox(log_dir, reader), ignore_errors=True)


def hand_over(log_dir: Path, reader: str, successor: str, processed: set[str]) -> None:
    """Move the links ``reader`` has not processed (by file name) to ``successor``'s inbox; drop ``reader``'s.

    The successor then reads exactly what its predecessor had not: nothing
    twice, nothing skipped. A successor that is already subscribed keeps its
    own inbox.
    """
    old = inbox(log_dir, reader)
    new = inbox(log_dir, successor)
    with _inbox_lock(log_dir):
        linked = _linked_to(old)
        if linked is not None and _linked_to(new) is None:
            new.mkdir(parents=True, exist_ok=True)
            for path in sorted(inbox_files(old)):
                if path.name not in processed:
                    _link(path, new)
            _set_linked_to(new, linked)
        shutil.rmtree(old, ignore_errors=True)


def inbox_files(folder: Path) -> list[Path]:
    """The segment links in an inbox folder, oldest first."""
    return [path for _, path in segments(folder)]


def inbox_position(log_dir: Path, reader: str) -> int | None:
    """The offset ``reader`` has processed everything below (None if not subscribed)."""
    folder = inbox(log_dir, reader)
    linked = _linked_to(folder)
    if linked is None:
        return None
    files = segments(folder)
    return files[0][0] if files else linked


def inbox_positions(log_dir: Path) -> dict[str, int]:
    """:func:`inbox_position` of every subscribed reader."""
    out: dict[str, int] = {}
    try:
        entries = list(os.scandir(log_dir / INBOX_DIR))
    except FileNotFoundError:
        return out
    for entry in entries:
        if entry.is_dir() and not entry.name.startswith("."):
            position = inbox_position(log_dir, entry.name)
            if position is not None:
                out[entry.name] = position
    return out


@dataclass(frozen=True)
class Hold:
    """Sealed segments with a record at or after ``from_time`` wait before they reach the inboxes of ``readers``.

    The writer's way to keep a window query's watermark below ``from_time``
    while a site still owes it earlier records (:mod:`hub.handover.holds`,
    :mod:`hub.handover.frontiers`): the segments stay in the log, in order, and
    reach those inboxes once the hold moves past them. Other readers get
    every segment as it is sealed.
    """

    from_time: float
    readers: frozenset[str]
    grid: float = 0.0
    """The shortest slide (or size, or gap) of the readers' windows, or 0: the windows' ends lie on this grid.

    With a grid, a held reader also gets no segment whose release would
    move its watermark past the end of a window that a record still waiting
    in a later segment (or the active one) belongs to: such a prefix waits
    until it can take that record along. Without one, segments are released
    by ``from_time`` alone.
    """
    own: Mapping[str, float] = field(default_factory=dict)
    """A reader's own ``from_time`` where it is later (its windows need less of what is owed; :mod:`hub.handover.scope`)."""

    def start_of(self, reader: str) -> float:
        """The event time from which segments wait for ``reader``."""
        return max(self.from_time, self.own.get(reader, self.from_time))


def closes_before(watermark: float, earliest: float, grid: float) -> bool:
    """Whether a watermark of ``watermark`` would close a window that a record at ``earliest`` falls in.

    Windows end on multiples of ``grid`` (a record at ``t`` falls in one that
    ends at the first multiple past ``t``, or later), so the record is safe
    while that end lies past the watermark.
    """
    return grid > 0 and math.isfinite(earliest) and (math.floor(earliest / grid) + 1) * grid <= watermark


_EVENT_TIME = re.compile(rb'"seq":-?[0-9]+,"event_time":(-?[0-9.eE+-]+)')
"""A log line's own event time (:func:`encode_records` writes ``seq`` then ``event_time``, before the value)."""


def _unhanded_times(log_dir: Path, readers: Iterable[str]) -> dict[int, float]:
    """The latest event time of each sealed segment not yet handed to one of ``readers``, read from its lines."""
    linked = [at for r in readers if (at := _linked_to(inbox(log_dir, r))) is not None]
    if not linked:
        return {}
    sealed, _ = _sealed(log_dir)
    first = min(linked)
    times = {}
    for base, path in sealed:
        if base >= first:
            found = [float(m) for m in _EVENT_TIME.findall(path.read_bytes())]
            if found:
                times[base] = max(found)
    return times


def distribute(
    log_dir: Path,
    hold: Hold | None = None,
    latest: Mapping[int, float] | None = None,
    earliest: Mapping[int, float] | None = None,
    active_earliest: float = math.inf,
) -> int:
    """Link every sealed segment into each subscribed inbox that does not have it yet.

    With ``hold``, a held reader's inbox gets the sealed segments before the
    first one whose latest event time (``latest``, by segment offset; unknown:
    none) is at or after the hold's ``from_time``, and the rest later. With
    a grid, it gets the longest such run of segments whose latest event time
    closes no window of a record in a later segment (``earliest``: each
    segment's earliest event time, unknown: none; ``active_earliest``: the
    active segment's), see :class:`Hold`.

    Returns:
        The most sealed segments an inbox is still waiting for (0 without a hold).
    """
    held = 0
    with _inbox_lock(log_dir):
        sealed, active = _sealed(log_dir)
        try:
            folders = [Path(e.path) for e in os.scandir(log_dir / INBOX_DIR) if e.is_dir()]
        except FileNotFoundError:
            return held
        times = latest or {}
        for folder in folders:
            linked = _linked_to(folder)
            if linked is None or linked >= active:
                continue
            waiting = [(base, path) for base, path in sealed if base >= linked]
            if hold is None or folder.name not in hold.readers:
                count = len(waiting)
            else:
                count = _releasable(waiting, hold, folder.name, times, earliest or {}, active_earliest)
                held = max(held, len(waiting) - count)
            for _, path in waiting[:count]:
                _link(path, folder)
            _set_linked_to(folder, waiting[count][0] if count < len(waiting) else active)
    return held


def _releasable(
    waiting: list[tuple[int, Path]],
    hold: Hold,
    reader: str,
    latest: Mapping[int, float],
    earliest: Mapping[int, float],
    active_earliest: float,
) -> int:
    """How many of the ``waiting`` segments a reader under ``hold`` may have now (see :func:`distribute`)."""
    after = [active_earliest] * (len(waiting) + 1)  # after[i]: the earliest event time past the first i segments
    for i in range(len(waiting) - 1, -1, -1):
        after[i] = min(after[i + 1], earliest.get(waiting[i][0], math.inf))
    count = 0
    newest = -math.inf
    start = hold.start_of(reader)
    for i, (base, _) in enumerate(waiting):
        newest = max(newest, latest.get(base, -math.inf))
        if newest >= start:
            break
        if not closes_before(newest, after[i + 1], hold.grid):
            count = i + 1
    return count


def sealed_tail(log_dir: Path) -> int:
    """The offset where the active segment starts: every record below it is readable from inboxes."""
    return _sealed(log_dir)[1]


def encode_records(records: Iterable[Record]) -> bytes:
    """Encode records as log lines (:class:`spanedge.wire.log_line.LogLine`)."""
    return encode_lines(
        LogLine(
            site=r.site,
            stream=r.stream,
            seq=r.seq,
            event_time=r.event_time,
            key=r.key,
            value=value_text(r.value),
            epoch=r.epoch,
        )
        for r in records
    )


def iter_lines(log_dir: Path, start: int, end: int) -> Iterator[dict[str, Any]]:
    """Yield the decoded records between two offsets, each ``value`` as JSON text (slow path, for recovery and tests)."""
    for line in decode_lines(read_bytes(log_dir, start, end)):
        row = msgspec.structs.asdict(line)
        if isinstance(line.value, dict):
            row["value"] = orjson.dumps(line.value).decode()
        if not line.epoch:
            del row["epoch"]
        yield row


def check_format(log_dir: Path) -> None:
    """Check that the lines of the log in ``log_dir`` have this hub's format version.

    Raises:
        ValueError: the log's lines have a format version other than :data:`spanedge.wire.log_line.VERSION`.
    """
    try:
        version = json.loads((log_dir / FORMAT_FILE).read_bytes())["line_version"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return  # a log its writer has not opened yet
    if version != LINE_VERSION:
        msg = f"log {log_dir}: its lines have format version {version!r}, not {LINE_VERSION}; run the hub that wrote it"
        raise ValueError(msg)


@dataclass
class HighWaterMarks:
    """The last accepted ``seq`` per (site, stream, epoch) of one app, and the log position they cover.

    Each ownership epoch of a stream has a mark of its own: the old owner of a
    moved replica finishing its windows and the new owner starting its
    sequence at 1 never drop each other's records.
    """

    marks: dict[tuple[str, str, int], int]
    position: int = 0

    def accept(self, record: Record) -> bool:
        """Return True (and advance the mark) if ``record`` was not seen before."""
        key = (record.site, record.stream, record.epoch)
        last = self.marks.get(key)
        if last is not None and record.seq <= last:
            return False
        self.marks[key] = record.seq
        return True

    def to_json(self) -> bytes:
        """Serialise the marks and the position."""
        return orjson.dumps(
            {
                "position": self.position,
                "marks": [[site, stream, seq, epoch] for (site, stream, epoch), seq in sorted(self.marks.items())],
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> HighWaterMarks:
        """Parse :meth:`to_json` output; raise ``ValueError`` if malformed."""
        try:
            raw = orjson.loads(data)
            marks = {(str(m[0]), str(m[1]), int(m[3])): int(m[2]) for m in raw["marks"]}
            return cls(marks, int(raw["position"]))
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as exc:
            msg = f"malformed high-water marks: {exc}"
            raise ValueError(msg) from None


class AppLog:
    """The writer side of one app's log, with its dedupe high-water marks.

    Only one process may write a log. On open, a partial last line (left by
    a crash mid-write) is cut off, the high-water marks are rebuilt from
    their snapshot plus the records appended after it, so a crash between
    the append and the snapshot cannot let a duplicate through, and a
    non-empty last segment is sealed (it may have been read already, so it
    is never appended to again).

    Appended records become readable by the inbox readers when the active
    segment is sealed: the writer calls :meth:`seal_if_due` after each
    flush, and again at :meth:`seal_due_at` while nothing arrives.
    """

    def __init__(
        self,
        log_dir: Path,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        seal_interval: float = SEAL_INTERVAL_S,
        hold: Hold | None = None,
        closings: Closings | None = None,
        batch_every: Sequence[float] = (),
    ) -> None:
        """Open (or create) the log in ``log_dir``, its sealed segments held back as ``hold`` says.

        With a hold, the latest event times of the sealed segments its readers
        have not been handed yet are read back from the segments. A record
        that crosses one of ``closings`` makes the active segment due at once
        (:meth:`set_closings`). With ``batch_every``, the readers' trigger
        intervals in seconds, the active segment is also due just before each
        micro-batch of any of them starts (Spark starts one at every multiple of
        an interval since the epoch), so a record waits for its micro-batch, not
        for a seal and then for the micro-batch after it.
        """
        self.dir = log_dir
        self.segment_bytes = segment_bytes
        self.seal_interval = seal_interval
        self.batch_every = tuple(batch_every)
        self._sealed_at = time.monotonic()  # the first interval counts from the opening, whatever the uptime
        self._held = 0  # the most sealed segments a held reader waits for
        self.set_closings(closings)
        self._seen = -math.inf  # the latest event time appended since the log was opened
        self._crossed = False  # a record crossed a closing point since the last seal
        log_dir.mkdir(parents=True, exist_ok=True)
        segs = segments(log_dir)
        if not segs:
            self._base = 0
            self._path = log_dir / segment_name(0)
            self._path.touch()
        else:
            self._base, self._path = segs[-1]
            complete = _complete_size(self._path)
            if complete != self._path.stat().st_size:
                log.warning("log %s: cutting a partial record at the end of %s", log_dir, self._path.name)
                with self._path.open("r+b") as fh:
                    fh.truncate(complete)
                    os.fsync(fh.fileno())
        self._fh = self._path.open("ab")
        self.position = self._base + self._path.stat().st_size
        self._latest = -math.inf
        self._earliest = math.inf
        self.latest: dict[int, float] = {}
        """The latest event time in each segment this writer sealed, by offset (at most :data:`KNOWN_TIMES`)."""
        self.earliest: dict[int, float] = {}
        """The earliest event time in each segment this writer sealed, by offset (as :attr:`latest`)."""
        self.hwm = self._recover_marks()
        self._dirty = False
        if self.position > self._base:
            self._roll()
        check_format(log_dir)
        if not (log_dir / FORMAT_FILE).exists():
            _write_atomic(log_dir / FORMAT_FILE, json.dumps({"line_version": LINE_VERSION}).encode(), fsync=True)
        self.hold = hold
        if hold is not None:
            self.latest.update(_unhanded_times(log_dir, hold.readers))
        self._held = distribute(log_dir, hold, self.latest, self.earliest)  # segments sealed just before a crash

    def _recover_marks(self) -> HighWaterMarks:
        path = self.dir / HWM_FILE
        hwm = HighWaterMarks({}, head(self.dir))
        if path.exists():
            try:
                hwm = HighWaterMarks.from_json(path.read_bytes())
            except ValueError as exc:
                log.warning("log %s: %s; rebuilding the marks from the retained segments", self.dir, exc)
        start = max(hwm.position, head(self.dir))
        replayed = 0
        for line in decode_lines(read_bytes(self.dir, start, self.position)):
            key = (line.site, line.stream, line.epoch)
            if line.seq > hwm.marks.get(key, -(2**63)):
                hwm.marks[key] = line.seq
            replayed += 1
        if replayed:
            log.info("log %s: replayed %d records after the marks snapshot", self.dir, replayed)
        hwm.position = self.position
        return hwm

    def append(self, data: bytes, latest: float | None = None, earliest: float | None = None) -> None:
        """Append encoded lines with event times from ``earliest`` to ``latest`` (not yet durable: call :meth:`flush`)."""
        if not data:
            return
        fence.check("append to an ingest log")
        if self.position - self._base >= self.segment_bytes:
            self._roll()
        self._fh.write(data)
        self.position += len(data)
        if latest is not None and latest > self._latest:
            self._latest = latest
        if latest is not None and latest > self._seen:
            self._crossed = self._crossed or self._closings.crossed(self._seen, latest)
            self._seen = latest
        if earliest is not None and earliest < self._earliest:
            self._earliest = earliest
        self._dirty = True

    def _roll(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        if self._latest > -math.inf:  # known before the segment counts as sealed
            self.latest[self._base] = self._latest
            while len(self.latest) > KNOWN_TIMES:
                del self.latest[next(iter(self.latest))]
        if self._earliest < math.inf:
            self.earliest[self._base] = self._earliest
            while len(self.earliest) > KNOWN_TIMES:
                del self.earliest[next(iter(self.earliest))]
        self._latest = -math.inf
        self._earliest = math.inf
        self._base = self.position
        self._path = self.dir / segment_name(self._base)
        self._fh = self._path.open("ab")
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def seal(self) -> bool:
        """Seal the active segment if it holds records, hand it to every inbox; return whether it did.

        Call after :meth:`flush` (sealed bytes must be durable).
        """
        self._sealed_at = time.monotonic()
        self._crossed = False
        if self.position == self._base:
            return False
        fence.check("seal an ingest log segment")
        self._roll()
        self._held = distribute(self.dir, self.hold, self.latest, self.earliest, self._earliest)
        collect_garbage(self.dir)
        return True

    def set_hold(self, hold: Hold | None) -> None:
        """Hold sealed segments back from some readers (:class:`Hold`), or lift the hold (``None``)."""
        if hold == self.hold:
            return
        self._held = distribute(self.dir, hold, self.latest, self.earliest, self._earliest)
        self.hold = hold

    def set_closings(self, closings: Closings | None) -> None:
        """Seal at once after a record that crosses one of ``closings`` (:mod:`hub.ingest.seal_points`); None: never.

        Grids no coarser than :data:`SEAL_INTERVAL_S` are left to the regular seal (too many segments).
        """
        self._closings = (closings or Closings()).coarser_than(SEAL_INTERVAL_S)

    def seal_due_at(self) -> float | None:
        """The :func:`time.monotonic` time the active segment should be sealed at (None if it is empty)."""
        if self.position == self._base:
            return None
        slow = self.hold is not None and self._held >= HELD_MANY
        if self._crossed and not slow:
            return 0.0  # a window can close: now
        interval = max(self.seal_interval, HELD_SEAL_INTERVAL_S) if slow else self.seal_interval
        due = self._sealed_at + interval
        if slow:
            return due
        return min((due, *(self._before_next_batch(every) for every in self.batch_every)))

    def _before_next_batch(self, every: float) -> float:
        """The :func:`time.monotonic` time :data:`SEAL_AHEAD_S` before the first micro-batch after the last seal."""
        wall, mono = time.time(), time.monotonic()
        sealed = self._sealed_at - mono + wall  # the last seal in wall-clock time, as Spark's schedule runs
        start = (math.floor((sealed + SEAL_AHEAD_S + 1e-3) / every) + 1) * every
        return start - SEAL_AHEAD_S - wall + mono

    def seal_if_due(self, now: float | None = None) -> bool:
        """Seal (see :meth:`seal`) if the active segment is due (:meth:`seal_due_at`); return whether it did."""
        due = self.seal_due_at()
        if due is None or (time.monotonic() if now is None else now) < due:
            return False
        return self.seal()

    def flush(self) -> None:
        """Make everything appended durable (fsync), then snapshot the high-water marks."""
        if not self._dirty:
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.hwm.position = self.position
        _write_atomic(self.dir / HWM_FILE, self.hwm.to_json())
        self._dirty = False

    def close(self) -> None:
        """Flush and close the active segment."""
        self.flush()
        self._fh.close()
