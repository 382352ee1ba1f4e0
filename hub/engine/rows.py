"""The columns of every stream between the hub's operators, in Spark and Arrow form.

They are the columns of a line of the ingest log
(:data:`spanedge.wire.log_line.COLUMNS`): ``site``, ``stream``, ``seq``,
``event_time`` (epoch seconds), ``key`` and ``value`` (JSON text), so a
record read from the log and a record an operator emits look the same. Both
schemas here are derived from that one definition.
"""

from __future__ import annotations

import pyarrow as pa

from spanedge.wire.log_line import COLUMNS as LINE_COLUMNS

_SPARK = {"string": "STRING", "int64": "BIGINT", "float64": "DOUBLE"}
_ARROW = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}

#: The column names, in order.
COLUMNS = tuple(name for name, _ in LINE_COLUMNS)

#: The same columns as a Spark DDL schema (the output schema of every ``mapInArrow`` function).
SCHEMA_DDL = ", ".join(f"{name} {_SPARK[kind]}" for name, kind in LINE_COLUMNS)

#: The same columns as Arrow.
ROW_SCHEMA = pa.schema([(name, _ARROW[kind]) for name, kind in LINE_COLUMNS])
