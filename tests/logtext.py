"""Checking log lines for characters that must never reach them raw (see :mod:`spanedge.logsafe`)."""

from __future__ import annotations

import unicodedata

#: The bidirectional marks, embeddings, overrides and isolates.
BIDI = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}


def raw_controls(text: str) -> list[str]:
    """The control, separator, bidirectional and surrogate characters in ``text``."""
    return [c for c in text if c in BIDI or unicodedata.category(c) in ("Cc", "Zl", "Zp", "Cs")]
