"""Hub windows as Spark aggregations: records without the key, and each value parsed once, with its log line where it can be."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import orjson

from hub.engine.rows import COLUMNS, SCHEMA_DDL
from hub.engine.source import read_log
from hub.engine.windows import window_frame
from hub.ingest import log as ingest_log
from hub.ingest.log import AppLog, encode_records
from spanedge import App, agg, sinks
from spanedge.wire.batch import Record

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


def _records() -> list[Record]:
    values: list[Any] = [{"k": "a", "v": 1}, {"v": 100}, {"k": "a", "v": 2.5}, {"k": "b", "v": 5}, 7, {"k": "a"}]
    values.append({"k": "b", "v": 1, "more": {"nested": [1, 2.50, "é\n"]}})
    return [Record("edge", "readings", i + 1, 10.0 + i / 10, None, v) for i, v in enumerate(values)] + [
        Record("edge", "readings", 99, 12.5, None, {"v": 0})  # moves the watermark past the first window
    ]


def _windows(spark: Any, log_dir: Path, fields: dict[str, str] | None) -> tuple[list[tuple[str, Any]], str]:
    """The window's results over the log in ``log_dir``, read with ``fields``, and the read schema's value type."""
    df = read_log(spark, log_dir, "windows", "reader", fields).select(*COLUMNS)
    value_type = dict(df.dtypes)["value"]
    name = f"windows_{uuid.uuid4().hex}"
    query = (
        window_frame(_window_op(), df, {}, "cloud")
        .writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(log_dir.parent / name))
        .start()
    )
    query.awaitTermination()
    rows = spark.sql(f"SELECT key, value FROM {name}").collect()
    return sorted((r["key"], orjson.loads(r["value"])) for r in rows), value_type


def test_a_window_reads_values_parsed_with_their_log_line_unless_the_log_predates_it(
    spark: Any, tmp_path: Path
) -> None:
    fields = {"k": "STRING", "v": "DOUBLE"}
    log_dir = tmp_path / "log"
    writer = AppLog(log_dir)
    writer.append(encode_records(_records()))
    writer.flush()
    writer.seal()
    ingest_log.subscribe(log_dir, "reader")
    lines = [orjson.loads(line) for line in ingest_log.read_bytes(log_dir, 0, writer.position).splitlines()]
    assert lines[0]["value"] == {"k": "a", "v": 1}  # objects embedded, the rest as their JSON text
    assert lines[4]["value"] == "7"
    assert [r["value"] for r in ingest_log.iter_lines(log_dir, 0, writer.position)][-2] == (
        '{"k":"b","v":1,"more":{"nested":[1,2.5,"é\\n"]}}'
    )

    parsed, value_type = _windows(spark, log_dir, fields)
    assert value_type == "struct<k:string,v:double>"
    shutil.rmtree(ingest_log.inbox(log_dir, "reader"))
    ingest_log.subscribe(log_dir, "reader", 0)
    as_text, text_type = _windows(spark, log_dir, None)
    assert text_type == "string"
    assert parsed == as_text
    assert [(key, v["window_start"], v["n"], v["total"]) for key, v in parsed] == [
        ("a", 10.0, 3, 3.5),
        ("b", 10.0, 2, 6.0),
    ]


def _batches(spark: Any, folder: Path, closing: bool) -> tuple[list[tuple[int, list[tuple[str, Any]]]], int]:
    """Per micro-batch (one file each) the window's results, closed by Spark (append) or by the sink (update); late records the sink dropped."""
    from hub.engine.window_close import WindowCloser

    name = f"closing_{closing}_{uuid.uuid4().hex[:8]}"
    checkpoint = folder.parent / name
    closer = WindowCloser(checkpoint, 0)
    written: list[tuple[int, list[tuple[str, Any]]]] = []

    def sink(df: Any, batch_id: int) -> None:
        table = df.toArrow()
        if closing:
            table = closer.close(table, batch_id)
        values = [(r["key"], orjson.loads(r["value"])) for r in table.to_pylist()]
        rows = sorted(values, key=lambda kv: (kv[1]["window_start"], kv[0]))
        if rows:
            written.append((batch_id, rows))

    records = spark.readStream.schema(LINE).option("maxFilesPerTrigger", "1").json(str(folder))
    query = (
        window_frame(_window_op(), records, {}, "cloud", closing=closing)
        .writeStream.foreachBatch(sink)
        .outputMode("update" if closing else "append")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    query.awaitTermination()
    return written, closer.late


def test_a_sink_closes_each_window_one_micro_batch_earlier_and_drops_what_arrives_after_it(
    spark: Any, tmp_path: Path
) -> None:
    def line(seq: int, t: float, value: Any) -> bytes:
        record = {"site": "edge", "stream": "readings", "seq": seq, "event_time": t, "key": None, "value": value}
        return orjson.dumps(record)

    files = [
        [(10.1, {"k": "a", "v": 1}), (10.2, {"k": "b", "v": 2}), (10.4, {"v": 100})],
        [(10.6, {"k": "a", "v": 3}), (11.3, {"k": "a", "v": 4})],  # moves the watermark past [10, 11)
        [(10.9, {"k": "b", "v": 50}), (11.5, {"k": "b", "v": 5}), (12.2, {"v": 7})],  # late; a record without the key
        [(12.5, {"k": "a", "v": 6}), (11.8, {"k": "a", "v": 60}), (12.7, {"k": "a", "v": 7})],  # late again
        [(14.0, {"k": "b", "v": 8})],  # closes [12, 13)
    ]
    folder = tmp_path / "lines"
    folder.mkdir()
    seq = 0
    for i, records in enumerate(files):
        path = folder / f"{i:03d}.json"
        lines = []
        for t, value in records:
            seq += 1
            lines.append(line(seq, t, orjson.dumps(value).decode()) + b"\n")
        path.write_bytes(b"".join(lines))
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # the file source reads them in this order

    appended, _ = _batches(spark, folder, closing=False)
    closed, late = _batches(spark, folder, closing=True)

    def summary(written: list[tuple[int, list[tuple[str, Any]]]]) -> list[tuple[int, str, float, int, float]]:
        return [(b, k, v["window_start"], v["n"], v["total"]) for b, rows in written for k, v in rows]

    # each window once, in the micro-batch whose records moved the watermark past it, without the records after
    assert summary(closed) == [
        (1, "a", 10.0, 2, 4.0),
        (1, "b", 10.0, 1, 2.0),
        (2, "a", 11.0, 1, 4.0),
        (2, "b", 11.0, 1, 5.0),
        (4, "a", 12.0, 2, 13.0),
    ]
    assert late == 2
    # Spark's append mode writes each a micro-batch later, and still adds a record that arrives in that batch
    assert summary(appended) == [
        (2, "a", 10.0, 2, 4.0),
        (2, "b", 10.0, 2, 52.0),
        (3, "a", 11.0, 2, 64.0),
        (3, "b", 11.0, 1, 5.0),
        (5, "a", 12.0, 2, 13.0),
    ]
