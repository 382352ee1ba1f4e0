"""Transform operators at the hub: the user's function over a parsed Spark DataFrame.

The records reach the function parsed with the input stream's declared
schema, with ``event_time`` as a timestamp; whatever columns it returns
become the JSON value of its output records, and their event time comes
from its ``event_time`` column (timestamp or epoch seconds), else the
processing time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spanedge.errors import InvalidDataflow
from spanedge.operators import Operator

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def transform_frame(op: Operator, df: DataFrame, fields: dict[str, str] | None, site: str) -> DataFrame:
    """The output records of transform ``op`` over ``df``.

    Args:
        op: the transform operator.
        df: its input records.
        fields: the declared field types of its input, None if undeclared.
        site: the ``site`` of every output record (the hub).

    Raises:
        InvalidDataflow: the input's fields are undeclared, or the function
            does not return a DataFrame.
    """
    from pyspark.sql import DataFrame as SparkDataFrame
    from pyspark.sql import functions as F

    upstream = op.inputs[0]
    if fields is None:
        msg = (
            f"transform {op.describe()} reads '{upstream}', whose record fields are unknown; "
            f"declare them with .schema(...) on '{upstream}' (a dataclass or a Spark DDL string "
            "such as 'unit STRING, temp_c DOUBLE') so the hub can parse the records"
        )
        raise InvalidDataflow(msg)
    ddl = ", ".join(f"`{name}` {kind}" for name, kind in fields.items())
    parsed = df.select(
        F.from_json("value", ddl).alias("_r"), F.timestamp_seconds("event_time").alias("_event_time")
    ).select("_r.*", "_event_time")
    if "event_time" not in fields:
        parsed = parsed.withColumnRenamed("_event_time", "event_time")
    assert op.func is not None
    result = op.func(parsed)
    if not isinstance(result, SparkDataFrame):
        msg = f"transform {op.describe()} must return a pyspark DataFrame, got {type(result).__name__}"
        raise InvalidDataflow(msg)
    names = result.columns
    payload = [c for c in names if c not in ("_event_time", "event_time") or c in fields]
    return result.select(
        F.lit(site).alias("site"),
        F.lit(op.name).alias("stream"),
        F.lit(None).cast("bigint").alias("seq"),
        _event_time(result).alias("event_time"),
        F.lit(None).cast("string").alias("key"),
        F.to_json(F.struct(*[F.col(f"`{c}`") for c in payload])).alias("value"),
    )


def _event_time(result: DataFrame) -> Column:
    """Epoch seconds from the result's ``_event_time`` or ``event_time`` column, else the processing time."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, NumericType, TimestampType

    names = result.columns
    time_col = "_event_time" if "_event_time" in names else ("event_time" if "event_time" in names else None)
    if time_col is None:
        return F.unix_micros(F.current_timestamp()) / F.lit(1_000_000.0)
    dtype = result.schema[time_col].dataType
    if isinstance(dtype, TimestampType):
        return F.unix_micros(F.col(time_col)) / F.lit(1_000_000.0)
    if isinstance(dtype, NumericType):
        return F.col(time_col).cast(DoubleType())
    return F.unix_micros(F.col(time_col).cast("timestamp")) / F.lit(1_000_000.0)
