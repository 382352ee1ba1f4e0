"""The ``drift:<site>:<field>:<shift>@<t>`` fault: one site's sensors read ``shift`` more from ``t`` on.

From ``t`` seconds after the sensors start, every message a device of
``site`` generates carries its numeric ``field`` plus ``shift``: the sensors'
distribution moves, as when a machine wears or a sensor is recalibrated. The
shift is applied where the value is made (:class:`simulate.sensors.Device`),
so the messages the run records, and the reference computed from them, hold
the shifted values: nothing is lost or changed on the way. A site's models
see their features drift (:mod:`spanedge.models.drift`), and the hub retrains
them when the drift crosses a threshold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: A field a drift shifts: a record field name.
FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


@dataclass(frozen=True)
class Drift:
    """``field`` of the values of ``site``'s sensors reads ``shift`` more from ``at`` s after the start."""

    site: str
    field: str
    shift: float
    at: float


def parse_shift(field: str, shift: str) -> tuple[str, float]:
    """The field and the shift of a drift fault's arguments.

    Raises:
        ValueError: the field is not a record field name, or the shift not a finite number.
    """
    if not FIELD.match(field):
        msg = f"the field must be a record field name such as rms, got {field!r}"
        raise ValueError(msg)
    try:
        value = float(shift)
    except ValueError:
        msg = f"the shift must be a number such as 2.5 or -10, got {shift!r}"
        raise ValueError(msg) from None
    if not math.isfinite(value) or value == 0:
        msg = f"the shift must be a finite number other than 0, got {shift!r}"
        raise ValueError(msg)
    return field, value


def drifts_by_site(drifts: Iterable[Drift]) -> dict[str, list[Drift]]:
    """The drifts of each site, in time order."""
    out: dict[str, list[Drift]] = {}
    for d in sorted(drifts, key=lambda d: d.at):
        out.setdefault(d.site, []).append(d)
    return out


def shifted(value: dict[str, Any], drifts: Iterable[Drift], offset: float) -> dict[str, Any]:
    """``value`` with the shift of every drift begun by ``offset`` added to its (numeric) field."""
    for d in drifts:
        if offset < d.at:
            break
        v = value.get(d.field)
        if isinstance(v, int | float) and not isinstance(v, bool):
            value[d.field] = v + d.shift
    return value
