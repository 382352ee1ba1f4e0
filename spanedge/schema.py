"""Output schemas of streams that cross to the hub, as Spark DDL strings."""

from __future__ import annotations

import dataclasses
import datetime
import re
import types
import typing
from typing import Any

_PY_TO_DDL: dict[Any, str] = {
    int: "BIGINT",
    float: "DOUBLE",
    str: "STRING",
    bool: "BOOLEAN",
    bytes: "BINARY",
    datetime.datetime: "TIMESTAMP",
    datetime.date: "DATE",
}
_FIELD = re.compile(r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s+([A-Za-z][A-Za-z0-9_<>(),\s]*)$")


def _ddl_type(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _ddl_type(args[0])
    if origin in (list, tuple):
        (item, *_) = typing.get_args(tp) or (str,)
        return f"ARRAY<{_ddl_type(item)}>"
    if tp in _PY_TO_DDL:
        return _PY_TO_DDL[tp]
    msg = f"cannot map type {tp!r} to a Spark type; use int, float, str, bool or a DDL string"
    raise TypeError(msg)


def to_ddl(schema: Any) -> str:
    """Return a Spark DDL string for a dataclass type or a DDL string.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class R:
    ...     truck: str
    ...     temp_c: float
    >>> to_ddl(R)
    'truck STRING, temp_c DOUBLE'
    """
    if isinstance(schema, str):
        fields(schema)
        return schema.strip()
    if dataclasses.is_dataclass(schema) and isinstance(schema, type):
        hints = typing.get_type_hints(schema)
        return ", ".join(f"{f.name} {_ddl_type(hints[f.name])}" for f in dataclasses.fields(schema))
    msg = f"a schema is a dataclass type or a Spark DDL string such as 'truck STRING, temp_c DOUBLE', got {schema!r}"
    raise TypeError(msg)


def _split_top_level(ddl: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in ddl:
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def fields(ddl: str) -> dict[str, str]:
    """Return ``{field: type}`` of a DDL string; raise ``TypeError`` if malformed."""
    result: dict[str, str] = {}
    for part in _split_top_level(ddl):
        match = _FIELD.match(part)
        if match is None:
            msg = f"malformed Spark DDL field {part.strip()!r} in {ddl!r}; expected 'name TYPE'"
            raise TypeError(msg)
        result[match.group(1)] = match.group(2).strip().upper()
    if not result:
        msg = f"empty Spark DDL schema {ddl!r}"
        raise TypeError(msg)
    return result
