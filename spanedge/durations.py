"""Parsing of human-friendly durations such as ``"10s"`` or ``"5m"``."""

from __future__ import annotations

import re

from spanedge.numbers import is_number

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: str | float | int) -> float:
    """Return ``value`` in seconds; raise ``ValueError`` with a hint if invalid.

    Numbers are seconds; strings take a unit suffix: ms, s, m, h or d.
    """
    if isinstance(value, int | float):
        if not is_number(value):
            msg = f"expected a duration such as '10s' or 2.5, got {value!r}"
            raise ValueError(msg)
        seconds = float(value)
    else:
        match = _PATTERN.match(str(value))
        if match is None:
            msg = f"expected a duration such as '10s', '500ms' or '5m', got {value!r}"
            raise ValueError(msg)
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds <= 0:
        msg = f"a duration must be positive, got {value!r}"
        raise ValueError(msg)
    return seconds
