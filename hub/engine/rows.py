"""The columns of every stream between the hub's operators.

They are the columns of the ingest log: ``site``, ``stream``, ``seq``,
``event_time`` (epoch seconds), ``key`` and ``value`` (JSON text), so a
record read from the log and a record an operator emits look the same.
"""

from __future__ import annotations

#: The column names, in order.
COLUMNS = ("site", "stream", "seq", "event_time", "key", "value")

#: The same columns as a Spark DDL schema (the output schema of every ``mapInArrow`` function).
SCHEMA_DDL = "site STRING, stream STRING, seq BIGINT, event_time DOUBLE, key STRING, value STRING"
