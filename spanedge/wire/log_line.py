"""A line of the hub's ingest log: one record, as JSON, read by Spark with a fixed schema.

A line is::

    {"site": "barn", "stream": "readings", "seq": 7, "event_time": 1700000000.0,
     "key": "u1", "value": {"temp": 4.5}}

``value`` is the record's value embedded if it is a JSON object, any other
value as its JSON text (so a reader asking for text gets the same JSON text
either way); ``epoch`` (the stream's ownership epoch, for the ingest's dedupe)
follows when it is not 0. The format version of a log's lines is written
once per log, in its ``format.json`` (``line_version``), not on every line.

:class:`LogLine` is the one definition: the ingest writes it
(:func:`hub.ingest.log.encode_records`) and reads it back (its dedupe marks),
and the hub's Spark schema is derived from :data:`COLUMNS`
(:mod:`hub.engine.rows`). Every record between the hub's operators has those
columns too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Annotated, Any, get_args, get_origin

import msgspec

VERSION = 1
"""The format version of log lines (``line_version`` in a log's ``format.json``)."""

NOT_A_COLUMN = msgspec.Meta(extra={"column": None})
"""Marks a field of :class:`LogLine` that only the ingest reads: Spark's schema leaves it out."""

JSON_TEXT = msgspec.Meta(extra={"column": "string"})
"""Marks a field that Spark reads as JSON text (or parses into a struct) whatever JSON it holds."""


class LogLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One record as a line of the ingest log (see the module docstring)."""

    site: str
    stream: str
    seq: int
    event_time: float
    key: str | None
    value: Annotated[dict[str, Any] | str, JSON_TEXT]
    epoch: Annotated[int, NOT_A_COLUMN] = 0


_KINDS: dict[Any, str] = {str: "string", int: "int64", float: "float64"}


def _column_kind(kind: Any) -> str | None:
    """The Arrow type name of a field's column, None if it is not a column."""
    if get_origin(kind) is Annotated:
        for meta in get_args(kind)[1:]:
            if isinstance(meta, msgspec.Meta) and meta.extra is not None and "column" in meta.extra:
                return meta.extra["column"]  # type: ignore[no-any-return]
        kind = get_args(kind)[0]
    named = [_KINDS[k] for k in get_args(kind) if k is not type(None)] if get_args(kind) else [_KINDS[kind]]
    if len(set(named)) != 1:
        msg = f"log line field type {kind!r} has no single column type; mark it with JSON_TEXT or NOT_A_COLUMN"
        raise TypeError(msg)
    return named[0]


def _columns() -> tuple[tuple[str, str], ...]:
    out = []
    for field in msgspec.structs.fields(LogLine):
        kind = _column_kind(field.type)
        if kind is not None:
            out.append((field.name, kind))
    return tuple(out)


COLUMNS: tuple[tuple[str, str], ...] = _columns()
"""The columns Spark reads from a line, in order: ``(name, Arrow type name)`` (``string``, ``int64``, ``float64``)."""

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(LogLine)


def encode_lines(lines: Iterable[LogLine]) -> bytes:
    """Lines as newline-terminated JSON."""
    return _encoder.encode_lines(list(lines))


def value_text(value: Any) -> dict[str, Any] | str:
    """What a line holds of a record's value: an object as itself, any other value as its JSON text."""
    return value if isinstance(value, dict) else _encoder.encode(value).decode()


def decode_line(line: bytes) -> LogLine:
    """Parse one line (without its newline).

    Raises:
        ValueError: not a log line; the message says what is wrong.
    """
    try:
        return _decoder.decode(line)
    except msgspec.DecodeError as exc:
        msg = f"malformed log line: {exc}"
        raise ValueError(msg) from None


def decode_lines(data: bytes) -> Iterator[LogLine]:
    """Parse newline-separated lines, skipping empty ones (see :func:`decode_line`)."""
    for line in data.splitlines():
        if line:
            yield decode_line(line)


__all__ = [
    "COLUMNS",
    "JSON_TEXT",
    "NOT_A_COLUMN",
    "VERSION",
    "LogLine",
    "decode_line",
    "decode_lines",
    "encode_lines",
    "value_text",
]
