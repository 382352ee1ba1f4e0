"""The hub's Python operators over Arrow batches, without Spark: outputs and failed records."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest

from hub.engine.python_operators import FailedRecord, LogFailures, record_level
from hub.engine.rows import COLUMNS
from spanedge import App
from spanedge.operators import Operator


def batch(values: list[Any]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "site": ["a"] * n,
            "stream": ["raw"] * n,
            "seq": list(range(n)),
            "event_time": [100.0 + i for i in range(n)],
            "key": [None] * n,
            "value": [orjson.dumps(v).decode() for v in values],
        }
    )


def inverse() -> Operator:
    app = App("t")
    app.source("raw").map(lambda r: {"inv": 1 / r["x"]}, name="inverse")
    return app.operators["inverse"]


def test_outputs_keep_the_input_record_fields_on_the_operator_stream() -> None:
    out = list(record_level(inverse())(iter([batch([{"x": 2}, {"x": 4}])])))
    rows = pa.Table.from_batches(out).to_pylist()
    assert list(rows[0]) == list(COLUMNS)
    assert [(r["stream"], r["seq"], r["event_time"], orjson.loads(r["value"])) for r in rows] == [
        ("inverse", 0, 100.0, {"inv": 0.5}),
        ("inverse", 1, 101.0, {"inv": 0.25}),
    ]


def test_failed_records_go_to_the_failure_policy_and_the_others_pass() -> None:
    failed: list[FailedRecord] = []
    run = record_level(inverse(), lambda op: failed.append)
    rows = pa.Table.from_batches(list(run(iter([batch([{"x": 0}, {"x": 1}, {"x": 0}])])))).to_pylist()
    assert [orjson.loads(r["value"]) for r in rows] == [{"inv": 1.0}]
    assert [(f.site, f.seq, f.value) for f in failed] == [("a", 0, '{"x":0}'), ("a", 2, '{"x":0}')]
    assert all(isinstance(f.error, ZeroDivisionError) for f in failed)


def test_by_default_the_first_ten_failures_of_a_partition_are_written_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = list(record_level(inverse())(iter([batch([{"x": 0}] * 12)])))
    assert sum(b.num_rows for b in rows) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 10
    assert "inverse" in lines[0]
    assert "ZeroDivisionError" in lines[0]


def test_log_failures_counts_past_the_limit() -> None:
    policy = LogFailures(inverse(), limit=1)
    for _ in range(3):
        policy(FailedRecord("a", 0, 0.0, None, "{}", ValueError("bad")))
    assert policy.failures == 3


def test_dead_letters_are_staged_per_partition_with_reason_origin_and_a_bounded_excerpt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import hub.engine.python_operators as ops
    from hub.engine.sinks import staged_letters

    monkeypatch.setattr(ops, "_staging", lambda: (tmp_path / "batch-7", 3))
    run = record_level(inverse())
    big = {"x": 0, "pad": "é" * 2000}
    rows = pa.Table.from_batches(list(run(iter([batch([{"x": 0}, {"x": 1}, big])])))).to_pylist()
    assert [orjson.loads(r["value"]) for r in rows] == [{"inv": 1.0}]
    (staged,) = (tmp_path / "batch-7").iterdir()
    assert staged.name.endswith("-000003.jsonl")
    first, second = (orjson.loads(line) for line in staged_letters(tmp_path / "batch-7"))
    assert first["operator"] == "inverse"
    assert first["reason"].startswith("inverse (")
    assert first["reason"].endswith("raised ZeroDivisionError: division by zero")
    assert (first["site"], first["source_site"], first["seq"], first["event_time"]) == ("hub", "a", 0, 100.0)
    assert (first["payload"], first["truncated"]) == ('{"x":0}', False)
    assert second["truncated"]
    assert second["size"] > 4000
    assert len(second["payload"].encode()) <= 1024
    # a retried task writes the same file again rather than a second one
    list(run(iter([batch([{"x": 0}, {"x": 1}, big])])))
    assert [p.name for p in (tmp_path / "batch-7").iterdir()] == [staged.name]
    assert staged_letters(tmp_path / "nothing") == []
