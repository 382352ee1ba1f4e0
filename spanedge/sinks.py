"""Sink constructors: where a stream's results go."""

from __future__ import annotations

import re
from collections.abc import Sequence

from spanedge.errors import InvalidDataflow
from spanedge.operators import PostgresSinkSpec, SinkSpec

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def mqtt(topic: str) -> SinkSpec:
    """Publish results to an MQTT topic on the broker of the site where the sink runs."""
    return SinkSpec("mqtt", topic)


def file(path: str) -> SinkSpec:
    """Append results as JSON lines (edge) or Parquet files (hub) under ``path``."""
    return SinkSpec("file", path)


def console() -> SinkSpec:
    """Print results to standard output."""
    return SinkSpec("console")


def memory(name: str) -> SinkSpec:
    """Keep results in memory under ``name``, for tests."""
    return SinkSpec("memory", name)


def parquet(path: str) -> SinkSpec:
    """Write results at the hub as a Parquet dataset under ``path``, with Spark's writer.

    ``path`` is a directory or a URI Spark writes to (``s3a://...``,
    ``hdfs://...``). The dataset is partitioned by ``app``, ``sink``, ``date``
    (of the event time, UTC) and ``batch`` (the micro-batch). The sink runs at
    the hub.
    """
    if not path:
        msg = "sinks.parquet(path): the path is empty; give the dataset's directory or URI"
        raise InvalidDataflow(msg)
    return SinkSpec("parquet", path)


def postgres(table: str, *, key: Sequence[str] | None = None, dsn_env: str = "SPANEDGE_PG_DSN") -> PostgresSinkSpec:
    """Write results at the hub to the PostgreSQL table ``table`` (``name`` or ``schema.name``), exactly once.

    Each micro-batch is one transaction that also records the batch's id, so
    a batch replayed after a hub restart writes nothing twice. A result's
    fields go to the columns of the same name; a table with a primary key
    (or the columns ``key`` names, which need a unique index) is upserted on
    it, so the last result for a key wins. The hub reads the connection
    string from its environment variable ``dsn_env``; the app never holds it.
    Needs ``spanedge[postgres]`` on the hub.

    Raises:
        InvalidDataflow: ``table``, a ``key`` column or ``dsn_env`` is not a plain name.
    """
    parts = table.split(".")
    if len(parts) > 2 or not all(_IDENTIFIER.fullmatch(p) for p in parts):
        msg = (
            f"sinks.postgres({table!r}): the table must be 'name' or 'schema.name', each a letter or _ "
            "followed by letters, digits, _ or $"
        )
        raise InvalidDataflow(msg)
    if isinstance(key, str):
        key = (key,)
    columns = tuple(key) if key is not None else None
    if columns is not None and (not columns or not all(_IDENTIFIER.fullmatch(c) for c in columns)):
        msg = f"sinks.postgres({table!r}, key={key!r}): the key must be one or more column names"
        raise InvalidDataflow(msg)
    if not _ENV_NAME.fullmatch(dsn_env):
        msg = f"sinks.postgres({table!r}, dsn_env={dsn_env!r}): dsn_env is the name of an environment variable"
        raise InvalidDataflow(msg)
    return PostgresSinkSpec("postgres", table, dsn_env=dsn_env, key=columns)
