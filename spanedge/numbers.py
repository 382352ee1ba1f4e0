"""What counts as a number in data that comes from outside: one rule, used everywhere.

A number is an ``int`` or a ``float`` that is finite: a bool is not a number
(``True`` is an ``int`` to Python, but a flag to whoever wrote it), nor are
NaN and the infinities (a NaN poisons every sum and comparison it meets). The
wire messages (:mod:`spanedge.wire`) declare their numeric fields with
:data:`Finite`, which applies the same rule when msgspec decodes them.
"""

from __future__ import annotations

import math
import sys
from typing import Annotated, TypeGuard

import msgspec

Finite = Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)]
"""A float field of a msgspec Struct that refuses NaN, the infinities and bools (ints are taken)."""

NonNegative = Annotated[float, msgspec.Meta(ge=0.0, le=sys.float_info.max)]
"""A finite float field >= 0."""


def is_number(value: object) -> TypeGuard[int | float]:
    """True if ``value`` is a number: an int or a finite float, not a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def number(value: object) -> float | None:
    """``value`` as a float if it is a number (:func:`is_number`), else None."""
    return float(value) if is_number(value) else None


def count(value: object) -> int | None:
    """``value`` as an int if it is a whole number >= 0, else None."""
    if not is_number(value) or value < 0 or not float(value).is_integer():
        return None
    return int(value)


def require_number(
    value: object,
    what: str,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    hint: str = "",
    error: type[Exception] = ValueError,
) -> float:
    """``value`` as a float; raise ``error`` saying ``what`` must be a number, with what it got and ``hint``.

    Args:
        value: the value to check.
        what: what it is and where, e.g. ``"plan issued_at"`` or ``"app.py:12: cost"``.
        minimum: the least value allowed, if any.
        above: a value it must exceed, if any.
        maximum: the greatest value allowed, if any.
        hint: how to fix it, appended after a semicolon.
        error: the exception type to raise (a :class:`ValueError` subclass of :mod:`spanedge.errors`, say).

    Raises:
        error: ``value`` is not a number (:func:`is_number`) or is out of the bounds.
    """
    if (
        is_number(value)
        and (minimum is None or value >= minimum)
        and (above is None or value > above)
        and (maximum is None or value <= maximum)
    ):
        return float(value)
    bounds = [
        f"{op} {bound:.15g}" for op, bound in ((">=", minimum), (">", above), ("<=", maximum)) if bound is not None
    ]
    rule = " and ".join(["a finite number " + bounds[0], *bounds[1:]]) if bounds else "a finite number"
    msg = f"{what} must be {rule}, got {value!r}" + (f"; {hint}" if hint else "")
    raise error(msg)


__all__ = ["Finite", "NonNegative", "count", "is_number", "number", "require_number"]
