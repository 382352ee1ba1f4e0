"""The SQL of the PostgreSQL sink, and how a result's fields become the parameters of a row.

A result's fields are its envelope (``site``, ``stream``, ``seq``,
``event_time``, ``key``), ``value`` (the whole value) and, when the value
is a JSON object, each of its fields (which win over the envelope's of the
same name). A row takes the fields named like the table's columns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from psycopg import sql
from psycopg.types.json import Json, Jsonb

from spanedge.errors import SpanEdgeError

MARKS_TABLE = "spanedge_sink_batches"
"""The table, in the sink table's schema, that holds each query's last written micro-batch."""

ENVELOPE = ("site", "stream", "seq", "event_time", "key")
"""The fields every result has besides its value."""

DESCRIBE_COLUMNS = sql.SQL(
    "SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typname, t.typcategory"
    " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
    " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)
"""A table's columns in order: name, type as PostgreSQL prints it, internal type name, type category."""

DESCRIBE_UNIQUE = sql.SQL(
    "SELECT i.indisprimary, array_agg(a.attname::text ORDER BY k.n)"
    " FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
    " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
    " WHERE i.indrelid = %s::regclass AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL"
    " GROUP BY i.indexrelid, i.indisprimary"
)
"""A table's primary key and unique indexes (on plain columns, without a predicate): primary?, columns."""


class TableProblem(SpanEdgeError):
    """The sink's table does not suit it: no such column, or no unique index on the key."""


class Misfit(Exception):
    """A result that does not fit the table; it goes to the dead letters."""

    def __init__(self, column: str | None, reason: str) -> None:
        """Say which ``column`` (if one) and why."""
        super().__init__(reason)
        self.column = column
        self.reason = reason


@dataclass(frozen=True)
class Column:
    """A column of the sink's table."""

    name: str
    type: str
    """The type as PostgreSQL prints it: ``integer``, ``timestamp with time zone``, ``character varying(20)``."""
    base: str
    """The type's internal name: ``int4``, ``timestamptz``, ``jsonb``, ``_float8`` (an array)."""
    category: str
    """``pg_type.typcategory``: ``N`` numeric, ``S`` string, ``A`` array, ``D`` date and time, ``U`` json, ..."""


@dataclass(frozen=True)
class Target:
    """The sink's table as the database describes it, and the columns it upserts on (none: inserts)."""

    name: tuple[str, ...]
    columns: Mapping[str, Column]
    key: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The table's name as written in the app."""
        return ".".join(self.name)


def table_name(target: str) -> tuple[str, ...]:
    """``schema.table`` or ``table`` as its parts."""
    return tuple(target.split("."))


def quoted(name: Sequence[str]) -> str:
    """The name quoted as PostgreSQL reads it (a ``regclass`` parameter)."""
    return sql.Identifier(*name).as_string()


def marks_name(table: Sequence[str]) -> tuple[str, ...]:
    """The marks table beside ``table``: in its schema, if it names one."""
    return (*table[:-1], MARKS_TABLE)


def create_marks(table: Sequence[str]) -> sql.Composed:
    """Create the marks table beside ``table`` unless it exists."""
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (app text NOT NULL, query text NOT NULL, run text NOT NULL,"
        " batch_id bigint NOT NULL, sink_table text NOT NULL, written_at timestamptz NOT NULL DEFAULT now(),"
        " PRIMARY KEY (app, query))"
    ).format(sql.Identifier(*marks_name(table)))


def mark(table: Sequence[str]) -> sql.Composed:
    """Record a micro-batch of a query as written; it returns a row only if the batch was not written before.

    Parameters: app, query, run (the checkpoint's id), batch id, the sink
    table. The row of the query is taken over by a later batch of the same
    run, or by any batch of a new run (a checkpoint started afresh under the
    same query name counts its batches from 0 again). The row stays locked
    until the transaction ends, so two writers of one query wait for each
    other and the second sees the first's batch.
    """
    return sql.SQL(
        "INSERT INTO {} AS m (app, query, run, batch_id, sink_table) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (app, query) DO UPDATE SET run = EXCLUDED.run, batch_id = EXCLUDED.batch_id,"
        " sink_table = EXCLUDED.sink_table, written_at = now()"
        " WHERE m.run <> EXCLUDED.run OR m.batch_id < EXCLUDED.batch_id"
        " RETURNING m.batch_id"
    ).format(sql.Identifier(*marks_name(table)))


def insert(target: Target, columns: Sequence[str]) -> sql.Composed:
    """Insert a row of ``columns``; with a key, update the row with the same key instead (the last result wins)."""
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(*target.name),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
    )
    if not target.key:
        return statement
    conflict = sql.SQL(" ON CONFLICT ({})").format(sql.SQL(", ").join(map(sql.Identifier, target.key)))
    rest = [c for c in columns if c not in target.key]
    if not rest:
        return statement + conflict + sql.SQL(" DO NOTHING")
    updates = sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in rest)
    return statement + conflict + sql.SQL(" DO UPDATE SET ") + updates


def target_of(
    name: tuple[str, ...],
    columns: Iterable[tuple[str, str, str, str]],
    unique: Iterable[tuple[bool, Sequence[str]]],
    key: Sequence[str] | None,
) -> Target:
    """The target from the rows of :data:`DESCRIBE_COLUMNS` and :data:`DESCRIBE_UNIQUE`.

    ``key`` None upserts on the primary key (inserts without one).

    Raises:
        TableProblem: a key column is not in the table, or no unique index covers exactly the key.
    """
    found = {c[0]: Column(*c) for c in columns}
    indexes = [(primary, tuple(cols)) for primary, cols in unique]
    label = ".".join(name)
    if key is None:
        primary = next((cols for is_primary, cols in indexes if is_primary), ())
        return Target(name, found, primary)
    missing = [c for c in key if c not in found]
    if missing:
        msg = f"table {label} has no column {missing[0]!r} of the sink's key; its columns: {', '.join(found)}"
        raise TableProblem(msg)
    if not any(set(cols) == set(key) for _, cols in indexes):
        cols = ", ".join(key)
        msg = (
            f"table {label} has no primary key or unique index on ({cols}), which an upsert on that key needs: "
            f"CREATE UNIQUE INDEX ON {label} ({cols})"
        )
        raise TableProblem(msg)
    return Target(name, found, tuple(key))


def fields_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """A result's fields: its envelope, ``value``, and the value's own fields if it is an object."""
    value = record.get("value")
    fields = {name: record.get(name) for name in ENVELOPE}
    fields["value"] = value
    if isinstance(value, dict):
        fields.update(value)
    return fields


def row_of(target: Target, record: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The columns a result fills and their parameters.

    Raises:
        Misfit: no field is a column, a key column has no value, or a value cannot go in its column.
    """
    fields = fields_of(record)
    columns = tuple(c for c in target.columns if c in fields)
    if not columns:
        msg = f"none of its fields ({', '.join(sorted(fields))}) is a column of table {target.label}"
        raise Misfit(None, msg)
    for column in target.key:
        if fields.get(column) is None:
            raise Misfit(column, f"it has no value for {column!r}, a column of the key of table {target.label}")
    return columns, tuple(adapt(fields[c], target.columns[c]) for c in columns)


def adapt(value: Any, column: Column) -> Any:
    """``value`` (from JSON) as a parameter of ``column``; anything else the database checks itself.

    JSON and JSONB columns take any value; a text column takes an object or a
    list as JSON text; a timestamp or date column takes a number as epoch
    seconds (UTC).

    Raises:
        Misfit: an object or a list for a column that holds neither, or an epoch out of range.
    """
    if value is None:
        return None
    if column.base == "jsonb":
        return Jsonb(value)
    if column.base == "json":
        return Json(value)
    if isinstance(value, dict | list):
        if column.category == "S":
            return orjson.dumps(value).decode()
        if isinstance(value, list) and column.category == "A":
            return value
        kind = "an object" if isinstance(value, dict) else "a list"
        raise Misfit(column.name, f"{kind} does not fit column {column.name!r} ({column.type})")
    if column.base in ("timestamptz", "timestamp", "date") and isinstance(value, int | float):
        if isinstance(value, bool) or not math.isfinite(value):
            raise Misfit(column.name, f"{value!r} is no time for column {column.name!r} ({column.type})")
        try:
            at = datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):
            reason = f"{value!r} s is out of range for column {column.name!r} ({column.type})"
            raise Misfit(column.name, reason) from None
        if column.base == "timestamp":
            return at.replace(tzinfo=None)
        if column.base == "date":
            return at.date()
        return at
    return value
