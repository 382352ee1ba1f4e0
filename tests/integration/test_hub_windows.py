"""Hub windows as Spark aggregations: records without the key, and each value parsed once."""

from __future__ import annotations

from typing import Any

import orjson

from hub.rows import SCHEMA_DDL
from hub.spark_windows import window_frame
from spanedge import App, agg, sinks

LINE = "site STRING, stream STRING, seq BIGINT, event_time DOUBLE, key STRING, value STRING"


def _window_op() -> Any:
    app = App("windows")
    app.source("readings", time_field="ts").window(
        name="per_key", key="k", size="1s", aggs={"n": agg.count(), "total": agg.sum("v")}
    ).sink(sinks.memory("out"), name="out")
    return app.operators["per_key"]


def test_records_without_the_key_join_no_window_and_values_are_parsed_once(spark: Any) -> None:
    rows = [
        ("edge", "readings", 1, 10.1, "a", '{"k": "a", "v": 1}'),
        ("edge", "readings", 2, 10.2, None, '{"v": 100}'),
        ("edge", "readings", 3, 10.3, "a", '{"k": "a", "v": 2}'),
        ("edge", "readings", 4, 10.4, "b", '{"k": "b", "v": 5}'),
        ("edge", "readings", 5, 11.5, None, '{"v": 7}'),
    ]
    out = window_frame(_window_op(), spark.createDataFrame(rows, LINE), {}, "cloud")

    results = sorted((r["key"], orjson.loads(r["value"])) for r in out.collect())
    assert [(key, v["window_start"], v["n"], v["total"]) for key, v in results] == [
        ("a", 10.0, 2, 3.0),
        ("b", 10.0, 1, 5.0),
    ]
    assert out.schema.simpleString() == spark.createDataFrame([], SCHEMA_DDL).schema.simpleString()
    plan = out._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("from_json") == 1, plan
