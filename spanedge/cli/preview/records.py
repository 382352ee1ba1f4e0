"""Reading the records of ``spanedge preview --input``: JSON Lines, within a size and a line limit.

Each line holds one record: a JSON object, as a sensor would send it, or that
object wrapped with the source stream and the site it belongs to,
``{"stream": "readings", "site": "truck-7", "value": {...}}``. A line is
wrapped when its keys are ``value`` and at least one of ``stream`` and
``site``, and nothing else; ``--stream`` reads every line as a plain record of
that stream instead. A plain record belongs to the app's one source stream
and to the ``--site``. Blank lines are skipped. Every mistake is an
:class:`~spanedge.errors.InvalidRecords` naming the file, the line and the fix.
"""

from __future__ import annotations

import codecs
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from spanedge.errors import InvalidRecords
from spanedge.names import name_problem

#: The keys of a wrapped line; ``value`` and one of the others at least.
WRAPPER_KEYS = frozenset({"stream", "site", "value"})

_FORMAT = 'each line holds one record object, or {"stream": ..., "site": ..., "value": {...}}'


@dataclass(frozen=True, slots=True)
class Line:
    """One record of the input: its line number, its stream and site if the line names them, and the record."""

    number: int
    stream: str | None
    site: str | None
    value: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Limits:
    """The most bytes and records an input may hold."""

    max_bytes: int
    max_lines: int


def read_lines(path: Path, limits: Limits, stream: str | None = None) -> list[Line]:
    """The records of ``path`` (``-``: standard input), each line checked; with ``stream``, all plain records of it.

    Raises:
        InvalidRecords: the file cannot be read, is over ``limits``, or a line is not a record.
    """
    data = _read(path, limits.max_bytes)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    lines: list[Line] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        if len(lines) == limits.max_lines:
            msg = (
                f"{path}:{number}: more than {limits.max_lines} records (--max-lines); "
                "pass a larger --max-lines or a shorter file"
            )
            raise InvalidRecords(msg)
        lines.append(_line(path, number, raw, stream))
    return lines


def _read(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, refused past ``max_bytes`` before more than that is read."""
    too_big = f"{path} holds more than {max_bytes / 1e6:g} MB (--max-mb); pass a larger --max-mb or a smaller file"
    if str(path) == "-":
        data = sys.stdin.buffer.read(max_bytes + 1)
    else:
        try:
            if path.is_dir():
                msg = f"input {path} is a directory; pass a JSON Lines file of records"
                raise InvalidRecords(msg)
            if path.stat().st_size > max_bytes:
                raise InvalidRecords(too_big)
            with path.open("rb") as fh:
                data = fh.read(max_bytes + 1)
        except OSError as exc:
            msg = f"cannot read input {path}: {exc.strerror or exc}; pass a JSON Lines file of records"
            raise InvalidRecords(msg) from None
    if len(data) > max_bytes:
        raise InvalidRecords(too_big)
    return data


def _line(path: Path, number: int, raw: bytes, stream: str | None) -> Line:
    where = f"{path}:{number}"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        msg = f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); {_FORMAT}"
        raise InvalidRecords(msg) from None
    if not isinstance(value, dict):
        msg = f"{where}: the line holds {_kind(value)}, not a JSON object; {_FORMAT}"
        raise InvalidRecords(msg)
    if stream is not None or not _wrapped(value):
        return Line(number, stream, None, value)
    named, site, record = value.get("stream"), value.get("site"), value["value"]
    if named is not None and not isinstance(named, str):
        msg = f'{where}: "stream" must be a stream name (a string), got {_kind(named)}'
        raise InvalidRecords(msg)
    if site is not None and (problem := name_problem(site, "site")) is not None:
        msg = f"{where}: {problem}"
        raise InvalidRecords(msg)
    if not isinstance(record, dict):
        msg = f'{where}: "value" holds {_kind(record)}, not a JSON object; wrap the record object itself'
        raise InvalidRecords(msg)
    return Line(number, named, site, record)


def _wrapped(value: dict[str, Any]) -> bool:
    return "value" in value and len(value) > 1 and value.keys() <= WRAPPER_KEYS


def _kind(value: Any) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def by_site(
    lines: Sequence[Line], path: Path, app: str, streams: Collection[str], site: str
) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """The records of each site (``site`` for lines that name none), as ``(stream, record)`` pairs in file order.

    Raises:
        InvalidRecords: a line names a stream that is not a source stream of ``app``, or names no stream
            while the app has several.
    """
    known = ", ".join(sorted(streams)) or "none"
    only = next(iter(streams)) if len(streams) == 1 else None
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for line in lines:
        stream = line.stream if line.stream is not None else only
        if stream is None:
            msg = (
                f"{path}:{line.number}: the line names no stream, and app {app} has several ({known}); "
                f'wrap the record as {{"stream": "<name>", "value": {{...}}}} or pass --stream'
            )
            raise InvalidRecords(msg)
        if stream not in streams:
            msg = (
                f"{path}:{line.number}: stream {stream!r} is not a source stream of app {app}; "
                f"name one of its streams: {known}"
            )
            raise InvalidRecords(msg)
        out.setdefault(line.site or site, []).append((stream, line.value))
    return out
