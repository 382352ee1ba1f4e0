"""The share of a hub query's results a handover gives it: an event-time cut its sink applies at run time.

When a plan moves a replica to or from the hub, the Spark query of each sink
downstream of it changes (the hub starts or stops computing the replica),
and Spark's window state can be neither seeded nor split. So the hub runs
the sink's query of the previous placement and the one of the new placement
side by side (:func:`hub.handover.switches.before_placement`), each reading the whole
log, and each writes only its share of the results: the *before* query those
whose origin is before the switch time T, the *after* query those at or
after it. A result's origin is the start of its window (its event time minus
the window's length, plus :data:`~spanedge.runtime.operators.WINDOW_TIME_OFFSET`)
or, for a record-level result, its event time; T is a multiple of the period
of every window involved, so each window is written once, by the query that
had all its records: the old owner's windows came whole from it (or from the
hub's state), the new owner's from the records that reached the hub since
the plan, before T.

The share lives outside the query plan: the sink holds it, and it is kept in
``handover.json`` in the query's checkpoint, so neither adding nor dropping a
handover changes a query's plan, fingerprint or state, and a hub restart
keeps each share. Shares accumulate: a query that was *after* one switch and
is *before* the next owns the interval between them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from spanedge.dag import OperatorGraph
from spanedge.operators import Kind
from spanedge.runtime.operators import WINDOW_TIME_OFFSET

if TYPE_CHECKING:
    import pyarrow as pa

#: The file in a query's checkpoint directory that holds its share.
SHARE_FILE = "handover.json"

Interval = tuple[float, float]
"""``[from, before)`` in event-time seconds; either end may be infinite."""

_EPSILON = 1e-6  # a window start rebuilt from its result's event time is off by float rounding


@dataclass(frozen=True)
class Share:
    """The origins whose results a query writes, and how to find the origin of a result of each stream.

    Args:
        intervals: the origins it owns, as ``[from, before)`` intervals.
        lags: per stream reaching the sink, the seconds from a result's origin to its event time.
    """

    intervals: tuple[Interval, ...]
    lags: dict[str, float] = field(default_factory=dict)

    def owns(self, stream: str, event_time: float) -> bool:
        """Whether a result of ``stream`` at ``event_time`` is this query's to write."""
        lag = self.lags.get(stream, 0.0)
        return self.holds(event_time - lag + _EPSILON if lag else event_time)

    def holds(self, origin: float) -> bool:
        """Whether ``origin`` (a record's own event time) lies in this query's intervals."""
        return any(lo <= origin < hi for lo, hi in self.intervals)

    def select(self, table: pa.Table) -> tuple[pa.Table, int]:
        """The rows of ``table`` (columns ``stream``, ``event_time``) this query writes, and how many it leaves out."""
        import pyarrow as pa

        streams = table.column("stream").to_pylist()
        times = table.column("event_time").to_pylist()
        mask = [t is None or self.owns(s, t) for s, t in zip(streams, times, strict=True)]
        kept = table.filter(pa.array(mask, pa.bool_()))
        return kept, table.num_rows - kept.num_rows

    def describe(self) -> str:
        """The intervals as text, e.g. ``[1700000030, inf)``."""
        return " and ".join(f"[{_time(lo)}, {_time(hi)})" for lo, hi in self.intervals) or "nothing"


def _time(t: float) -> str:
    """``t`` in full, to the millisecond: ``1700000030``, ``1700000030.5``, ``-inf``."""
    return f"{t:.3f}".rstrip("0").rstrip(".") if math.isfinite(t) else f"{t}"


def after(previous: Iterable[Interval] | None, at: float) -> tuple[Interval, ...]:
    """The intervals of the query of the new placement: what it owned before, and everything from ``at``."""
    return _merge([*(previous or ()), (at, math.inf)])


def before(previous: Iterable[Interval] | None, at: float) -> tuple[Interval, ...]:
    """The intervals of the query of the old placement: what it owned (everything, if nothing was cut), before ``at``."""
    owned = list(previous) if previous is not None else [(-math.inf, math.inf)]
    return _merge([(lo, min(hi, at)) for lo, hi in owned if lo < at])


def _merge(intervals: list[Interval]) -> tuple[Interval, ...]:
    merged: list[Interval] = []
    for lo, hi in sorted(i for i in intervals if i[0] < i[1]):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def lags(graph: OperatorGraph, sink: str) -> dict[str, float]:
    """Per stream reaching sink ``sink``: the seconds from a result's origin to its event time.

    A window's result comes ``size - WINDOW_TIME_OFFSET`` after its start;
    record-level operators and unions keep the lag of their input (the first
    one of a union whose inputs differ); sources, transforms and session
    windows have none (a session's start is not its end minus a fixed length:
    its results are cut by their end).
    """
    memo: dict[str, float] = {}

    def lag(name: str) -> float:
        if name not in memo:
            op = graph.op(name)
            spec = op.window
            if spec is not None:
                memo[name] = (spec.size - WINDOW_TIME_OFFSET) if spec.size else 0.0
            elif op.record_level or op.kind is Kind.UNION:
                memo[name] = lag(op.inputs[0]) if op.inputs else 0.0
            else:
                memo[name] = 0.0
        return memo[name]

    return {name: lag(name) for name in graph.op(sink).inputs}


def load(checkpoint: Path) -> tuple[Interval, ...] | None:
    """The intervals kept in ``checkpoint`` (``None``: no handover cut this query, it owns everything)."""
    try:
        data = json.loads((checkpoint / SHARE_FILE).read_text())
        return tuple((_num(lo, -math.inf), _num(hi, math.inf)) for lo, hi in data["intervals"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        msg = f"{checkpoint / SHARE_FILE} is not a handover share ({exc}); remove it if no handover is under way"
        raise ValueError(msg) from None


def save(checkpoint: Path, intervals: tuple[Interval, ...] | None) -> None:
    """Keep ``intervals`` in ``checkpoint`` (atomically); ``None`` removes the file."""
    path = checkpoint / SHARE_FILE
    if intervals is None:
        path.unlink(missing_ok=True)
        return
    checkpoint.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{SHARE_FILE}.tmp")
    text = json.dumps({"intervals": [[_finite(lo), _finite(hi)] for lo, hi in intervals]})
    with tmp.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _num(value: float | None, unbounded: float) -> float:
    return unbounded if value is None else float(value)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
