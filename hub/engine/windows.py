"""Window operators at the hub as Spark streaming aggregations.

A window is ``groupBy(window/session_window, key)`` over the records'
event time with a watermark of the allowed lateness and append output (or update
output closed by the sink, :mod:`hub.engine.window_close`), so each window is
emitted once, as ``{<key>, window_start, window_end,
<aggs>}`` with event time ``window_end - 0.001`` like the edge agents.
Built-in aggregations are Spark's; custom aggregators collect the field's
values and are finished in Python (:func:`hub.engine.python_operators.window_finisher`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hub.engine.python_operators import pickle_user_code, window_finisher
from hub.engine.rows import SCHEMA_DDL
from hub.engine.window_close import END_MS, EXTRA, KEYED, MAX_MS, START_MS
from spanedge.errors import InvalidDataflow
from spanedge.operators import Operator, WindowKind
from spanedge.runtime.operators import WINDOW_TIME_OFFSET

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from spanedge.operators import WindowSpec

_KEYED = "_keyed"
"""The aggregate counting a window's records that have the key (0 only in the group of records without it)."""

_NUMERIC = ("INT", "BIGINT", "SMALLINT", "TINYINT", "FLOAT", "DOUBLE", "LONG", "INTEGER", "DECIMAL")


def window_frame(
    op: Operator, df: DataFrame, fields: dict[str, str], site: str, per_site: bool = False, closing: bool = False
) -> DataFrame:
    """The results of window ``op`` over the records of ``df``.

    Args:
        op: the window operator.
        df: its input records.
        fields: the declared field types of its input (parsed as DOUBLE where unknown).
        site: the ``site`` of every result, unless ``per_site``.
        per_site: window the records of each site apart (the merged per-site replicas
            of one operator), each result carrying its site.
        closing: for a query in update mode whose sink closes the windows
            (:mod:`hub.engine.window_close`): every changed aggregate, with the closer's columns.

    Raises:
        InvalidDataflow: an aggregation Spark has no function for.
    """
    from pyspark.sql import functions as F

    spec = op.window
    assert spec is not None
    if dict(df.dtypes)["value"].startswith("struct"):  # parsed with the log line (hub.engine.source)
        record = F.col("value")
    else:
        ddl = ", ".join(f"`{name}` {kind}" for name, kind in parse_fields(spec, fields).items())
        record = F.from_json("value", ddl)
    parsed = df.withColumn("_r", record).withColumn("_ts", F.timestamp_seconds("event_time"))
    lateness_ms = round(spec.allowed_lateness * 1000)
    parsed = parsed.withWatermark("_ts", f"{lateness_ms} milliseconds")
    win = _window_column(spec)
    aggs = _aggregations(op, spec)
    keys = [win.alias("_w"), F.col(f"_r.`{spec.key}`").alias("_k")]
    if per_site:
        keys.append(F.col("site").alias("_site"))
    # Records without the key join no window. Dropping them before the aggregation would parse each
    # value twice (Spark pushes a filter on a parsed field below the parse, where it parses again);
    # their group is dropped after it instead: it is the one that counted no key.
    keyed = F.count(F.col(f"_r.`{spec.key}`")).alias(_KEYED)
    if closing:  # the closer drops the group without the key once its latest event time moved the watermark
        grouped = parsed.groupBy(*keys).agg(*aggs, keyed, F.max(F.unix_millis("_ts")).alias(MAX_MS))
    else:
        grouped = parsed.groupBy(*keys).agg(*aggs, keyed).where(F.col(_KEYED) > 0)
    start = F.unix_micros(F.col("_w.start")) / F.lit(1_000_000.0)
    end = F.unix_micros(F.col("_w.end")) / F.lit(1_000_000.0)
    site_column = F.col("_site") if per_site else F.lit(site)
    shaped = grouped.select(
        site_column.alias("site"),
        F.lit(op.name).alias("stream"),
        F.lit(None).cast("bigint").alias("seq"),
        (end - F.lit(WINDOW_TIME_OFFSET)).alias("event_time"),
        F.col("_k").alias("key"),
        start.alias("window_start"),
        end.alias("window_end"),
        *[F.col(f"`{out}`") for out, _ in spec.aggs],
        *(_closer_columns() if closing else []),
    )
    return _encode(shaped, spec, closing)


def _closer_columns() -> list[Column]:
    """The window's start and end, its latest event time (ms) and its keyed count, for :mod:`hub.engine.window_close`."""
    from pyspark.sql import functions as F

    return [
        F.unix_millis(F.col("_w.start")).alias(START_MS),
        F.unix_millis(F.col("_w.end")).alias(END_MS),
        F.col(MAX_MS),
        F.col(_KEYED).alias(KEYED),
    ]


def closes_early(spec: WindowSpec) -> bool:
    """Whether its sink can close the window (:mod:`hub.engine.window_close`): a tumbling or sliding one Spark aggregates."""
    return spec.kind is not WindowKind.SESSION and parses_once(spec)


def parse_fields(spec: WindowSpec, fields: dict[str, str]) -> dict[str, str]:
    """The fields the window parses record values for, with their Spark SQL types: the key as text, the rest typed.

    Args:
        spec: the window.
        fields: the declared field types of its input (DOUBLE where unknown).
    """
    wanted: dict[str, str] = {spec.key: "STRING"}
    for _, ag in spec.aggs:
        if ag.field is None or ag.custom is not None or ag.field == spec.key:
            continue
        kind = fields.get(ag.field, "DOUBLE")
        if ag.func in ("sum", "mean") or (kind.split("(")[0] not in _NUMERIC and kind != "STRING"):
            kind = "DOUBLE"
        wanted[ag.field] = kind
    return wanted


def parses_once(spec: WindowSpec) -> bool:
    """Whether the window can take its records' values parsed with the log line (no custom aggregator reads text)."""
    return all(ag.custom is None for _, ag in spec.aggs)


def _window_column(spec: WindowSpec) -> Column:
    """The tumbling, sliding or session window over ``_ts``."""
    from pyspark.sql import functions as F

    if spec.kind is WindowKind.SESSION:
        return F.session_window("_ts", f"{round((spec.gap or 1.0) * 1000)} milliseconds")
    if spec.kind is WindowKind.SLIDING:
        return F.window(
            "_ts",
            f"{round((spec.size or 1.0) * 1000)} milliseconds",
            f"{round((spec.slide or 1.0) * 1000)} milliseconds",
        )
    return F.window("_ts", f"{round((spec.size or 1.0) * 1000)} milliseconds")


def _aggregations(op: Operator, spec: WindowSpec) -> list[Column]:
    """One Spark aggregate per result field; a custom aggregator collects the field's JSON values."""
    from pyspark.sql import functions as F

    aggs: list[Column] = []
    for out, ag in spec.aggs:
        if ag.custom is not None:
            aggs.append(F.collect_list(F.get_json_object("value", f"$.{ag.field}")).alias(out))
        elif ag.func == "count":
            col = F.count(F.lit(1)) if ag.field is None else F.count(F.col(f"_r.`{ag.field}`"))
            aggs.append(col.alias(out))
        else:
            col = F.col(f"_r.`{ag.field}`")
            fn = {"sum": F.sum, "mean": F.avg, "min": F.min, "max": F.max}.get(ag.func)
            if fn is None:
                msg = f"window {op.describe()}: unknown aggregation {ag.describe()}"
                raise InvalidDataflow(msg)
            aggs.append(fn(col).alias(out))
    return aggs


def _encode(shaped: DataFrame, spec: WindowSpec, closing: bool = False) -> DataFrame:
    """The window results as records: the result fields as the JSON value (and the closer's columns if ``closing``)."""
    from pyspark.sql import functions as F

    customs: dict[str, Any] = {out: ag for out, ag in spec.aggs if ag.custom is not None}
    if not customs:
        value = F.to_json(
            F.struct(
                F.col("key").alias(spec.key),
                F.col("window_start"),
                F.col("window_end"),
                *[F.col(f"`{out}`") for out, _ in spec.aggs],
            )
        )
        extra = list(EXTRA) if closing else []
        return shaped.select("site", "stream", "seq", "event_time", "key", value.alias("value"), *extra)
    for ag in customs.values():
        pickle_user_code(ag.custom.add if ag.custom else None)
    return shaped.mapInArrow(window_finisher(spec.key, [o for o, _ in spec.aggs], customs), SCHEMA_DDL)
