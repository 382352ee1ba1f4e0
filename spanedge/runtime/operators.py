"""Record-level operator semantics, shared by every place that runs a user's function on a record.

The edge pipeline, the hub's Python operators and the simulator's reference
all call :func:`apply`, so a map, filter or flat_map means the same wherever
the placement puts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spanedge.operators import Kind, Operator

#: A window's result carries the event time ``window_end`` less this, at the edge, at the hub and in
#: the reference, so that a downstream window puts it in the window that contains its upstream window.
WINDOW_TIME_OFFSET = 0.001


def apply(op: Operator, value: Any, event_time: float | None = None) -> Sequence[Any]:
    """Run a map, filter, flat_map or predict on one record value and return its outputs.

    A predict scores with the version its model has for ``event_time``
    (None: the newest; see :mod:`spanedge.models.predict`).

    Raises:
        TypeError: if ``op`` is not a record-level operator.
        Exception: whatever the user's function raised (see :func:`failure`).
    """
    func = op.func
    kind = op.kind
    if func is None:
        msg = f"operator {op.describe()} of kind {kind} has no function"
        raise TypeError(msg)
    if kind is Kind.MAP:
        return (func(value),)
    if kind is Kind.FILTER:
        return (value,) if func(value) else ()
    if kind is Kind.FLAT_MAP:
        return list(func(value))
    if kind is Kind.PREDICT:
        return (func(value, event_time),)
    msg = f"operator {op.describe()} of kind {kind} is not record-level"
    raise TypeError(msg)


def failure(op: Operator, exc: BaseException) -> str:
    """The dead-letter reason for a user's function that raised ``exc``."""
    return f"{op.name} ({op.location}) raised {type(exc).__name__}: {exc}"
