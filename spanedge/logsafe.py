r"""Text from outside, made safe to quote in a log line.

What a client, a broker, a sensor or a file sent can hold characters that
forge or hide parts of the line that quotes it: a NUL or a newline ends it
early or starts a fake one, an escape sequence drives the terminal, and a
bidirectional override (U+202E) shows the rest of the line reversed.
:func:`escaped` writes each of them as a Python escape (``\x00``, ``\n``,
``\u202e``), as ``repr`` does; letters of every script, accents and emoji
stay as they are, and so do backslashes, so that a message already quoting
with ``repr`` reads the same once escaped.
"""

from __future__ import annotations

import re

__all__ = ["escaped"]

#: Control characters (C0, DEL, C1), line and paragraph separators, the bidirectional
#: marks, embeddings, overrides and isolates, and lone surrogates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escaped(value: object) -> str:
    r"""``str(value)`` with its control and bidirectional characters escaped: ``/apps/\x00``, ``a\u202eb``."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, text)
