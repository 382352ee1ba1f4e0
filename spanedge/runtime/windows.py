"""Keyed event-time windows (tumbling, sliding, session) with snapshot and restore.

A window fires once, when the watermark passes its end plus the allowed
lateness; a record whose windows have all fired is late. Window state holds
only JSON values, so :meth:`WindowState.snapshot` can be checkpointed as is.

A replica on one side of a handover (:meth:`WindowState.own`) emits only the
windows whose start it owns. Sessions too belong to the owner of their start
(their earliest record), but both sides add every record to their sessions,
since a session's start is known only from all its records: each side emits
the sessions it owns and drops the others. A session that began before the
switch T accepts no record at or after the cut, ``T +``
:data:`SESSION_CUT_S`; such a record starts a session of its own (the new
owner's), so the old owner's part ends. A move to or from the hub splits
sessions by record time instead (``sessions_by_record_time``): the hub cuts
sessions by their end, so each side keeps only the records of its time and a
session open across T comes out in two parts.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from spanedge.aggregations import Agg
from spanedge.keyrange import Share, key_hash
from spanedge.numbers import is_number
from spanedge.operators import WindowKind, WindowSpec
from spanedge.runtime.operators import WINDOW_TIME_OFFSET


class FieldError(ValueError):
    """A record lacks a field a window needs, or the field has the wrong type."""


class AggregationError(ValueError):
    """A user-defined aggregation raised."""


@dataclass(frozen=True, slots=True)
class _AggFns:
    """One aggregation as accumulator functions over JSON values."""

    out: str
    field: str | None
    zero: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    result: Callable[[Any], Any]


def _operand(value: Any, field: str | None) -> float:
    if not is_number(value):
        msg = f"field '{field}' must be a number, got {value!r}"
        raise FieldError(msg)
    return float(value)


def _mean_add(acc: list[float], v: Any) -> list[float]:
    acc[0] += v
    acc[1] += 1
    return acc


def _compile(out: str, agg: Agg) -> _AggFns:
    if agg.custom is not None:
        custom = agg.custom
        return _AggFns(out, agg.field, custom.zero, custom.add, custom.result)
    func = agg.func
    if func == "count":
        return _AggFns(out, None, lambda: 0, lambda acc, _v: acc + 1, int)
    if func == "sum":
        return _AggFns(out, agg.field, lambda: 0.0, lambda acc, v: acc + v, float)
    if func == "mean":
        return _AggFns(out, agg.field, lambda: [0.0, 0], _mean_add, lambda acc: acc[0] / acc[1] if acc[1] else None)
    if func == "min":
        return _AggFns(out, agg.field, lambda: None, lambda acc, v: v if acc is None or v < acc else acc, _opt_float)
    if func == "max":
        return _AggFns(out, agg.field, lambda: None, lambda acc, v: v if acc is None or v > acc else acc, _opt_float)
    msg = f"unknown aggregation {agg.describe()}; use count, sum, mean, min, max or custom"
    raise ValueError(msg)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


#: The statement that folds the operand ``x{i}`` into accumulator ``i``, per built-in aggregation.
_FOLD_STEPS = {
    "count": "    accs[{i}] += 1",
    "sum": "    accs[{i}] += x{i}",
    "mean": "    a = accs[{i}]\n    a[0] += x{i}\n    a[1] += 1",
    "min": "    a = accs[{i}]\n    if a is None or x{i} < a:\n        accs[{i}] = x{i}",
    "max": "    a = accs[{i}]\n    if a is None or x{i} > a:\n        accs[{i}] = x{i}",
}


class Aggregations:
    """The aggregations of one window, applied to accumulator lists."""

    def __init__(self, aggs: tuple[tuple[str, Agg], ...]) -> None:
        """Compile ``aggs`` (output field, aggregation) pairs."""
        self._fns = [_compile(out, a) for out, a in aggs]
        self._numeric = [a.custom is None and a.func != "count" for _, a in aggs]
        self._plan = [(f.field, numeric, f.out) for f, numeric in zip(self._fns, self._numeric, strict=True)]
        self._adders = [f.add for f in self._fns]
        self.fold = self._compile_fold([a for _, a in aggs])

    def _compile_fold(self, aggs: list[Agg]) -> Callable[[list[Any], dict[str, Any]], None]:
        """One function that does :meth:`values` then :meth:`add` for a record, without the lists in between.

        The function checks every operand before it changes an accumulator,
        as :meth:`values` does, and raises the same errors.
        """
        names: dict[str, Any] = {"_operand": _operand, "_missing": self._missing}
        lines = ["def fold(accs, record):"]
        for i, (field, numeric, _) in enumerate(self._plan):
            if field is None:
                continue
            names[f"f{i}"] = field
            lines += [f"    try:\n        x{i} = record[f{i}]\n    except KeyError:\n        _missing({i})"]
            if numeric:
                lines.append(
                    f"    if type(x{i}) is not float and type(x{i}) is not int:\n        x{i} = _operand(x{i}, f{i})"
                )
        for i, a in enumerate(aggs):
            field = self._plan[i][0]
            if a.custom is None and a.func in _FOLD_STEPS and (field is not None or a.func == "count"):
                lines.append(_FOLD_STEPS[a.func].format(i=i))
            else:
                names[f"add{i}"] = self._adders[i]
                lines.append(f"    accs[{i}] = add{i}(accs[{i}], {'None' if field is None else f'x{i}'})")
        lines.append("    return")  # a body even with no aggregation
        exec("\n".join(lines), names)  # noqa: S102 -- the source is built above from indices only
        fold: Callable[[list[Any], dict[str, Any]], None] = names["fold"]
        return fold

    def _missing(self, i: int) -> None:
        field, _, name = self._plan[i]
        msg = f"record has no field '{field}' (aggregation '{name}')"
        raise FieldError(msg) from None

    def zero(self) -> list[Any]:
        """Return fresh accumulators."""
        return [f.zero() for f in self._fns]

    def values(self, record: dict[str, Any]) -> list[Any]:
        """Extract (and check) the field values the aggregations read from ``record``."""
        out: list[Any] = []
        for field, numeric, name in self._plan:
            if field is None:
                out.append(None)
                continue
            try:
                value = record[field]
            except KeyError:
                msg = f"record has no field '{field}' (aggregation '{name}')"
                raise FieldError(msg) from None
            if numeric:
                kind = type(value)
                if kind is not float and kind is not int:
                    value = _operand(value, field)
            out.append(value)
        return out

    def add(self, accs: list[Any], values: list[Any]) -> None:
        """Fold one record's field values into ``accs`` in place."""
        for i, add in enumerate(self._adders):
            accs[i] = add(accs[i], values[i])

    def results(self, accs: list[Any]) -> dict[str, Any]:
        """Return ``{output field: result}``.

        Raises:
            AggregationError: if a custom aggregation's ``result`` raised.
        """
        try:
            return {f.out: f.result(acc) for f, acc in zip(self._fns, accs, strict=True)}
        except Exception as exc:
            msg = f"an aggregation's result() raised {type(exc).__name__}: {exc}"
            raise AggregationError(msg) from exc


#: Event-time seconds past a handover's switch after which a session that began before it takes no record:
#: half of how long a plan lists a handover (``hub.handover.switches.DEFAULT_KEEP_S``), so the old owner's part ends in time.
SESSION_CUT_S = 300.0

Emitted = tuple[Any, float, float, dict[str, Any]]
"""A fired window: ``(key, start, end, aggregation results)``."""


_KEY_TYPES = frozenset({str, int, float})
_ABSENT = object()


def _hashable(key: Any) -> Any:
    if isinstance(key, str | int | float | bool) or key is None:
        return key
    msg = f"window key must be a string or number, got {type(key).__name__} {key!r}"
    raise FieldError(msg)


class WindowState:
    """Open windows of one window operator, keyed by record key.

    Call :meth:`add` per record and :meth:`advance` when the watermark moves;
    both return the windows that fired.
    """

    def __init__(self, spec: WindowSpec) -> None:
        """Create empty state for ``spec``."""
        self.spec = spec
        self.aggs = Aggregations(spec.aggs)
        self._fold = self.aggs.fold
        self._key_field = spec.key
        self.lateness = spec.allowed_lateness
        self.fingerprint = "|".join(
            [spec.key, spec.kind.value, str(spec.size), str(spec.slide), str(spec.gap)]
            + [f"{out}={a.describe()}" for out, a in spec.aggs]
        )
        self._tumbling = spec.kind is WindowKind.TUMBLING
        self._size = spec.size or 1.0
        self.fired_through = -math.inf  # windows ending at or before this have fired
        # tumbling/sliding: start -> key -> [key, start, end, accs]; a heap of (end, start)
        self._open: dict[float, dict[Any, list[Any]]] = {}
        self._ends: list[tuple[float, float]] = []
        # session: key -> list of [start, last, accs]
        self._sessions: dict[Any, list[list[Any]]] = {}
        # the earliest end of an open window (a session's: its last record plus the gap); advance() fires
        # nothing while it is past the watermark less the lateness
        self.next_end = math.inf
        self.errors: list[str] = []  # windows whose results could not be computed
        # the windows this replica owns, by start; see own()
        self.owns_from = -math.inf
        self.owns_before = math.inf
        self.shares: tuple[Share, ...] | None = None  # by key too; see own_shares()
        self._split = False
        self.whole_tumbling = self._tumbling  # tumbling, and not one side of a handover nor a share of the keys
        self.sessions_by_record_time = False  # a move to or from the hub; see own()
        self.key_records: dict[Any, int] = {}  # records taken per key since take_key_records()

    def own(self, start_from: float, start_before: float, *, sessions_by_record_time: bool = False) -> None:
        """Keep only windows starting in ``[start_from, start_before)``: one side of a handover.

        Records of other windows are ignored (not late: another owner adds
        them). Sessions take every record and emit only those starting in
        the range (see the module's docstring); with
        ``sessions_by_record_time`` (a move to or from the hub) they take
        only the records whose time is in the range instead.
        """
        self.owns_from, self.owns_before = start_from, start_before
        self._split = start_from > -math.inf or start_before < math.inf
        self.whole_tumbling = self._tumbling and not self._split
        self.sessions_by_record_time = self._split and sessions_by_record_time

    def own_shares(self, shares: tuple[Share, ...]) -> None:
        """Keep only the windows of ``shares``: by key hash and start.

        The replica's keys are divided between sites (a split, or a split or
        merge handed over at a switch time); records of keys or windows no
        share holds are another site's (ignored, not late). Sessions of a
        key some share holds take every record of it and emit only those
        starting in its shares' times.
        """
        self.shares = shares
        self._split = True
        self.whole_tumbling = False
        self.sessions_by_record_time = False

    def _mine(self, key: Any, start: float) -> bool:
        shares = self.shares
        if shares is None:
            return self.owns_from <= start < self.owns_before
        hashed = key_hash(key)
        return any(s.holds(hashed, start) for s in shares)

    def _span(self, key: Any) -> tuple[float, float] | None:
        """The starts of ``key``'s sessions this replica owns, ``[from, before)``; ``None`` if no share holds the key."""
        if self.shares is None:
            return self.owns_from, self.owns_before
        hashed = key_hash(key)
        held = [s for s in self.shares if s.keys_from <= hashed < s.keys_before]
        return (min(s.start_from for s in held), max(s.start_before for s in held)) if held else None

    def epoch_of(self, key: Any, start: float) -> int | None:
        """The epoch of the share holding ``key``'s window starting at ``start`` (``None`` without shares)."""
        if self.shares is None:
            return None
        hashed = key_hash(key)
        return next((s.epoch for s in self.shares if s.holds(hashed, start)), None)

    def key_of(self, record: Any) -> Any:
        """Return the window key of ``record`` or raise :class:`FieldError`."""
        if type(record) is not dict:
            msg = f"window '{self.spec.key}' needs records that are JSON objects, got {type(record).__name__}"
            raise FieldError(msg)
        try:
            key = record[self.spec.key]
        except KeyError:
            msg = f"record has no key field '{self.spec.key}'"
            raise FieldError(msg) from None
        if type(key) in _KEY_TYPES:
            return key
        return _hashable(key)

    def _starts(self, t: float) -> list[float]:
        size = self.spec.size or 1.0
        slide = self.spec.slide or size
        k = math.floor(t / slide)
        starts = []
        while k * slide > t - size:  # multiples of the slide: no drift from repeated subtraction
            starts.append(k * slide)
            k -= 1
        return starts[::-1]

    def add(self, record: Any, t: float, watermark: float) -> bool:
        """Fold ``record`` at event time ``t`` into its windows; return False if it is late.

        Raises:
            FieldError: if the record lacks the key or an aggregated field.
        """
        if self.whole_tumbling:
            return self.add_tumbling(record, t)
        key = self.key_of(record)
        values = self.aggs.values(record)
        if self._tumbling:
            size = self._size
            starts: Iterable[float] = ((t // size) * size,)
        elif self.spec.kind is WindowKind.SESSION:
            return self._add_session(key, t, values, watermark)
        else:
            size = self.spec.size or 1.0
            starts = self._starts(t)
        if self._split:
            starts = [start for start in starts if self._mine(key, start)]
            if not starts:
                return True  # windows of the other owner of a handover
        accepted = False
        for start in starts:
            end = start + size
            if end <= self.fired_through:
                continue
            bucket = self._open.get(start)
            if bucket is None:
                bucket = self._open[start] = {}
                self._push_end(end, start)
            slot = bucket.get(key)
            if slot is None:
                slot = bucket[key] = [key, start, end, self.aggs.zero()]
            self.aggs.add(slot[3], values)
            accepted = True
        if accepted:
            self.key_records[key] = self.key_records.get(key, 0) + 1
        return accepted

    def add_tumbling(self, record: Any, t: float) -> bool:
        """:meth:`add` for a tumbling window that owns all its windows (:attr:`whole_tumbling`), kept short."""
        key = record.get(self._key_field, _ABSENT) if type(record) is dict else _ABSENT
        if type(key) not in _KEY_TYPES:  # absent, not a JSON object, or a key of another type
            key = self.key_of(record)
        size = self._size
        start = (t // size) * size
        end = start + size
        if end <= self.fired_through:
            self.aggs.values(record)  # a record that lacks a field is a dead letter, late or not
            return False
        bucket = self._open.get(start)
        slot = None if bucket is None else bucket.get(key)
        if slot is None:
            accs = self.aggs.zero()
            self._fold(accs, record)  # raises before the state changes
            if bucket is None:
                bucket = self._open[start] = {}
                self._push_end(end, start)
            bucket[key] = [key, start, end, accs]
        else:
            self._fold(slot[3], record)
        records = self.key_records
        records[key] = records.get(key, 0) + 1
        return True

    def _push_end(self, end: float, start: float) -> None:
        heapq.heappush(self._ends, (end, start))
        if end < self.next_end:
            self.next_end = end

    def _add_session(self, key: Any, t: float, values: list[Any], watermark: float) -> bool:
        gap = self.spec.gap or 1.0
        cut = math.inf
        if not self._split:
            if t + gap + self.lateness <= watermark:
                return False
        elif self.sessions_by_record_time:
            if not self._mine(key, t):
                return True  # a record of the other side's time
            if t + gap + self.lateness <= watermark:
                return False
        else:
            span = self._span(key)
            if span is None:
                return True  # another site's key
            if t + gap + self.lateness <= watermark:
                return not span[0] <= t < span[1]  # late: reported by the owner of its time
            cut = _cut(span)
            if t >= cut and span[1] < math.inf:
                return True  # after the cut: only in sessions that began at or after the switch
        after = t >= cut
        sessions = self._sessions.setdefault(key, [])
        accs = self.aggs.zero()
        self.aggs.add(accs, values)
        merged: list[Any] = [t, t, accs]
        keep = []
        for s in sessions:
            # sessions before the cut and after it are kept apart; advance() joins those that make one
            if (s[0] >= cut) == after and s[0] - gap < merged[1] and merged[0] < s[1] + gap:
                merged = [min(s[0], merged[0]), max(s[1], merged[1]), self._merge(s[2], merged[2])]
            else:
                keep.append(s)
        keep.append(merged)
        keep.sort(key=lambda s: s[0])
        self.next_end = min(self.next_end, merged[1] + gap)
        self._sessions[key] = keep
        self.key_records[key] = self.key_records.get(key, 0) + 1
        return True

    def _merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        out = []
        for spec_agg, x, y in zip(self.spec.aggs, a, b, strict=True):
            agg = spec_agg[1]
            if agg.custom is not None:
                out.append(agg.custom.merge(x, y))
            elif agg.func in ("count", "sum"):
                out.append(x + y)
            elif agg.func == "mean":
                out.append([x[0] + y[0], x[1] + y[1]])
            elif agg.func == "min":
                out.append(y if x is None else x if y is None else min(x, y))
            else:
                out.append(y if x is None else x if y is None else max(x, y))
        return out

    def advance(self, watermark: float) -> list[Emitted]:
        """Fire every window whose end plus the allowed lateness the watermark passed."""
        limit = watermark - self.lateness
        fired: list[Emitted] = []
        if self.spec.kind is WindowKind.SESSION:
            gap = self.spec.gap or 1.0
            if limit < self.next_end:
                return fired
            self.next_end = math.inf
            if self._split and not self.sessions_by_record_time:
                self._fire_owned(limit, fired)
            else:
                for key in list(self._sessions):
                    remaining = []
                    for s in self._sessions[key]:
                        if s[1] + gap <= limit:
                            fired.append(self._result(key, s[0], s[1] + gap, s[2]))
                        else:
                            remaining.append(s)
                            self.next_end = min(self.next_end, s[1] + gap)
                    if remaining:
                        self._sessions[key] = remaining
                    else:
                        del self._sessions[key]
            fired.sort(key=lambda w: w[2])
            return fired
        ends = self._ends
        while ends and ends[0][0] <= limit:
            end, start = heapq.heappop(ends)
            for key, s, e, accs in self._open.pop(start, {}).values():
                fired.append(self._result(key, s, e, accs))
            self.fired_through = max(self.fired_through, end)
        self.next_end = ends[0][0] if ends else math.inf
        return fired

    def _fire_owned(self, limit: float, fired: list[Emitted]) -> None:
        """On a side of a handover: fire the sessions that ended by ``limit``, those it owns into ``fired``.

        A session that began at or after the switch and ends within a gap of
        the cut is one with the first session after the cut (kept apart until
        both have ended).
        """
        gap = self.spec.gap or 1.0
        same = _bounds((self.owns_from, self.owns_before)) if self.shares is None else None
        min_end = math.inf
        for key in list(self._sessions):
            sessions = self._sessions[key]
            lo, hi, switch, cut = same or _bounds(self._span(key))
            remaining: list[list[Any]] = []
            i, n = 0, len(sessions)
            while i < n:
                s = last = sessions[i]
                i += 1
                if i < n and switch <= s[0] < cut <= sessions[i][0] and sessions[i][0] - s[1] < gap:
                    last = sessions[i]
                    i += 1
                end = last[1] + gap
                if end > limit:
                    remaining += (s, last) if last is not s else (s,)
                    min_end = min(min_end, end)
                elif lo <= s[0] < hi:
                    fired.append(self._result(key, s[0], end, s[2] if last is s else self._merge(s[2], last[2])))
                # else: another owner's session, dropped
            if remaining:
                self._sessions[key] = remaining
            else:
                del self._sessions[key]
        self.next_end = min_end

    def session_part_done_at(self, switch: float) -> float:
        """Where the watermark must be for the old owner's part of a handover switching at ``switch`` to be done.

        Every session it owns that is still open must have fired, and no
        record before the switch may still open one; the cut bounds the wait.
        Split by record time, the part is done a gap and the lateness past
        the switch.
        """
        gap = self.spec.gap or 1.0
        done = switch + gap
        if self.sessions_by_record_time:
            return done + self.lateness
        for key, sessions in self._sessions.items():
            lo, hi, *_ = _bounds(self._span(key))
            for s in sessions:
                if lo <= s[0] < hi:
                    done = max(done, float(s[1]) + gap)
        return min(done, switch + SESSION_CUT_S + gap) + self.lateness

    def take_key_records(self) -> dict[Any, int]:
        """The records taken per key since the last call (how the replica's load spreads over its keys)."""
        taken, self.key_records = self.key_records, {}
        return taken

    def _result(self, key: Any, start: float, end: float, accs: list[Any]) -> Emitted:
        try:
            return (key, start, end, self.aggs.results(accs))
        except AggregationError as exc:
            self.errors.append(f"window [{start}, {end}) of key {key!r}: {exc}")
            return (key, start, end, {})

    def last_end_before(self, switch: float) -> float:
        """The end of the last tumbling or sliding window that starts before ``switch`` (starts are slide multiples)."""
        size = self.spec.size or 1.0
        slide = self.spec.slide or size
        k = math.floor(switch / slide)
        if k * slide >= switch:
            k -= 1
        return k * slide + size

    def earliest_result(self, watermark: float) -> float:
        """The lowest event time a result of this window can still carry, at ``watermark``.

        A result carries its window's end less :data:`WINDOW_TIME_OFFSET`, and
        every window still to fire ends past the watermark less the allowed
        lateness, unless a record later than the pipeline's
        ``out_of_orderness`` opens one that ends before (a tumbling or sliding
        window takes records of any window it has not fired).
        """
        return watermark - self.lateness - WINDOW_TIME_OFFSET

    def horizon(self) -> float:
        """How far past the start of its last window the watermark must be for that window to fire."""
        span = self.spec.gap if self.spec.kind is WindowKind.SESSION else self.spec.size
        return (span or 1.0) + self.lateness

    def pending(self) -> int:
        """Number of open windows (over all keys)."""
        return sum(len(b) for b in self._open.values()) + sum(len(v) for v in self._sessions.values())

    def snapshot(self) -> dict[str, Any]:
        """Return the state as JSON-ready data."""
        if self.spec.kind is WindowKind.SESSION:
            return {"sessions": [[k, s] for k, v in self._sessions.items() for s in v]}
        return {
            "fired_through": None if self.fired_through == -math.inf else self.fired_through,
            "open": [slot for bucket in self._open.values() for slot in bucket.values()],
        }

    def _keeps(self, key: Any, start: float) -> bool:
        """Whether a restored session of ``key`` starting at ``start`` may still be emitted here or merge with one that is.

        The new owner keeps every session (one that began before the switch
        stays another's, but its records must not open one of its own); the
        old owner those before the cut (one after the switch may still merge
        with an earlier one). Split by record time, each side keeps those
        starting in its time.
        """
        if self.sessions_by_record_time:
            return self._mine(key, start)
        span = self._span(key)
        if span is None:
            return False
        return span[1] == math.inf or start < _cut(span)

    def restore(self, data: dict[str, Any]) -> None:
        """Replace the state by a :meth:`snapshot`."""
        self._open.clear()
        self._ends.clear()
        self._sessions.clear()
        self.next_end = math.inf
        if self.spec.kind is WindowKind.SESSION:
            for key, session in data.get("sessions", []):
                if self._split and not self._keeps(key, session[0]):
                    continue
                self._sessions.setdefault(key, []).append(session)
                self.next_end = min(self.next_end, session[1] + (self.spec.gap or 1.0))
            for sessions in self._sessions.values():
                sessions.sort(key=lambda s: s[0])
            return
        through = data.get("fired_through")
        self.fired_through = -math.inf if through is None else float(through)
        for key, start, end, accs in data.get("open", []):
            if self._split and not self._mine(key, start):
                continue  # a window of another owner (a handover, or a part's keys)
            bucket = self._open.get(start)
            if bucket is None:
                bucket = self._open[start] = {}
                self._push_end(end, start)
            bucket[key] = [key, start, end, accs]


def _bounds(span: tuple[float, float] | None) -> tuple[float, float, float, float]:
    """``(from, before, switch, cut)`` of the sessions owned in ``span``; a span of ``None`` owns none.

    The switch is the end of the span that is finite, if any; the cut is
    :data:`SESSION_CUT_S` past it (``inf`` without a switch).
    """
    lo, hi = span or (math.inf, math.inf)
    switch = hi if hi < math.inf else lo
    return lo, hi, switch, switch + SESSION_CUT_S if -math.inf < switch < math.inf else math.inf


def _cut(span: tuple[float, float]) -> float:
    """The cut of the sessions owned in ``span``: see :func:`_bounds`."""
    return _bounds(span)[3]
