"""Keyed event-time windows (tumbling, sliding, session) with snapshot and restore.

A window fires once, when the watermark passes its end plus the allowed
lateness; a record whose windows have all fired is late. Window state holds
only JSON values, so :meth:`WindowState.snapshot` can be checkpointed as is.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from spanedge.aggregations import Agg
from spanedge.keyrange import Share, key_hash
from spanedge.operators import WindowKind, WindowSpec


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


def _number(value: Any, field: str | None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
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


class Aggregations:
    """The aggregations of one window, applied to accumulator lists."""

    def __init__(self, aggs: tuple[tuple[str, Agg], ...]) -> None:
        """Compile ``aggs`` (output field, aggregation) pairs."""
        self._fns = [_compile(out, a) for out, a in aggs]
        self._numeric = [a.custom is None and a.func != "count" for _, a in aggs]
        self._plan = [(f.field, numeric, f.out) for f, numeric in zip(self._fns, self._numeric, strict=True)]
        self._adders = [f.add for f in self._fns]

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
                    value = _number(value, field)
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


Emitted = tuple[Any, float, float, dict[str, Any]]
"""A fired window: ``(key, start, end, aggregation results)``."""


_KEY_TYPES = frozenset({str, int, float})


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
        self._session_min_end = math.inf
        self.errors: list[str] = []  # windows whose results could not be computed
        # the windows this replica owns, by start (a session: by record time); see own()
        self.owns_from = -math.inf
        self.owns_before = math.inf
        self.shares: tuple[Share, ...] | None = None  # by key too; see own_shares()
        self._split = False

    def own(self, start_from: float, start_before: float) -> None:
        """Keep only windows starting in ``[start_from, start_before)``: one side of a handover.

        Records of other windows are ignored (not late: another owner adds
        them); a session window is split by record time instead.
        """
        self.owns_from, self.owns_before = start_from, start_before
        self._split = start_from > -math.inf or start_before < math.inf

    def own_shares(self, shares: tuple[Share, ...]) -> None:
        """Keep only the windows of ``shares``: by key hash and start (a session: by record time).

        The replica's keys are divided between sites (a split, or a split or
        merge handed over at a switch time); records of keys or windows no
        share holds are another site's (ignored, not late).
        """
        self.shares = shares
        self._split = True

    def _mine(self, key: Any, start: float) -> bool:
        shares = self.shares
        if shares is None:
            return self.owns_from <= start < self.owns_before
        hashed = key_hash(key)
        return any(s.holds(hashed, start) for s in shares)

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
        key = self.key_of(record)
        values = self.aggs.values(record)
        if self._tumbling:
            size = self._size
            starts: Iterable[float] = ((t // size) * size,)
        elif self.spec.kind is WindowKind.SESSION:
            if self._split and not self._mine(key, t):
                return True
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
                heapq.heappush(self._ends, (end, start))
            slot = bucket.get(key)
            if slot is None:
                slot = bucket[key] = [key, start, end, self.aggs.zero()]
            self.aggs.add(slot[3], values)
            accepted = True
        return accepted

    def _add_session(self, key: Any, t: float, values: list[Any], watermark: float) -> bool:
        gap = self.spec.gap or 1.0
        if t + gap + self.lateness <= watermark:
            return False
        sessions = self._sessions.setdefault(key, [])
        accs = self.aggs.zero()
        self.aggs.add(accs, values)
        merged: list[Any] = [t, t, accs]
        keep = []
        for s in sessions:
            if s[0] - gap < merged[1] and merged[0] < s[1] + gap:
                merged = [min(s[0], merged[0]), max(s[1], merged[1]), self._merge(s[2], merged[2])]
            else:
                keep.append(s)
        keep.append(merged)
        keep.sort(key=lambda s: s[0])
        self._session_min_end = min(self._session_min_end, merged[1] + gap)
        self._sessions[key] = keep
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
            if limit < self._session_min_end:
                return fired
            self._session_min_end = math.inf
            for key in list(self._sessions):
                remaining = []
                for s in self._sessions[key]:
                    if s[1] + gap <= limit:
                        fired.append(self._result(key, s[0], s[1] + gap, s[2]))
                    else:
                        remaining.append(s)
                        self._session_min_end = min(self._session_min_end, s[1] + gap)
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
        return fired

    def _result(self, key: Any, start: float, end: float, accs: list[Any]) -> Emitted:
        try:
            return (key, start, end, self.aggs.results(accs))
        except AggregationError as exc:
            self.errors.append(f"window [{start}, {end}) of key {key!r}: {exc}")
            return (key, start, end, {})

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

    def restore(self, data: dict[str, Any]) -> None:
        """Replace the state by a :meth:`snapshot`."""
        self._open.clear()
        self._ends.clear()
        self._sessions.clear()
        self._session_min_end = math.inf
        if self.spec.kind is WindowKind.SESSION:
            for key, session in data.get("sessions", []):
                if self._split and not self._mine(key, session[0]):
                    continue
                self._sessions.setdefault(key, []).append(session)
                self._session_min_end = min(self._session_min_end, session[1] + (self.spec.gap or 1.0))
            return
        through = data.get("fired_through")
        self.fired_through = -math.inf if through is None else float(through)
        for key, start, end, accs in data.get("open", []):
            if self._split and not self._mine(key, start):
                continue  # a window of another owner (a handover, or a part's keys)
            bucket = self._open.get(start)
            if bucket is None:
                bucket = self._open[start] = {}
                heapq.heappush(self._ends, (end, start))
            bucket[key] = [key, start, end, accs]
