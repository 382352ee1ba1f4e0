"""A hub sink writing to PostgreSQL: dead letters filed before the commit, a replay the database had skipped, setup errors."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pyarrow as pa
import pytest

pytest.importorskip("psycopg", reason="pip install 'spanedge[postgres]'")

from hub.engine.builder import postgres_writer
from hub.engine.connectors.postgres import Result, Written, results_of
from hub.engine.rows import ROW_SCHEMA
from hub.engine.sinks import BatchSink, MemoryStore
from spanedge import App, sinks
from spanedge.errors import InvalidDataflow, MissingExtra
from spanedge.operators import PostgresSinkSpec

REJECTED = b'{"reason":"does not fit"}'
STAGED = b'{"reason":"map raised"}'


class FakeWriter:
    """Writes nothing; a batch in ``written`` counts as written before (the database has its mark)."""

    def __init__(self, written: set[int], letters: Path) -> None:
        self.written = written
        self.letters = letters
        self.filed_before_commit: list[bytes] = []
        self.results: list[Sequence[Result]] = []

    def write(self, results: Sequence[Result], batch_id: int, file_letters: Callable[[list[bytes]], None]) -> Written:
        self.results.append(results)
        if batch_id in self.written:
            return Written(True)
        file_letters([REJECTED])
        path = self.letters / f"q-fp-batch-{batch_id:012d}.jsonl"
        self.filed_before_commit = path.read_bytes().splitlines()  # what is on disk when the transaction commits
        self.written.add(batch_id)
        return Written(False, len(results) - 1, (REJECTED,))

    def status(self) -> dict[str, Any]:
        return {}

    def stop(self) -> None: ...

    def close(self) -> None: ...


def table(n: int = 2) -> pa.Table:
    rows = [
        {
            "site": "s1",
            "stream": "w",
            "seq": i,
            "event_time": 10.0 + i,
            "key": "k",
            "value": orjson.dumps({"n": i}).decode(),
        }
        for i in range(n)
    ]
    return pa.Table.from_pylist(rows, ROW_SCHEMA)


def make_sink(tmp_path: Path, written: set[int]) -> tuple[BatchSink, FakeWriter]:
    state = tmp_path / "checkpoints" / "app" / "q-fp" / "sink.json"
    sink = BatchSink("to_db", "postgres", "results", state, MemoryStore())
    writer = FakeWriter(written, sink.dead_letters)
    sink.postgres = writer  # type: ignore[assignment]
    return sink, writer


def stage(sink: BatchSink, batch_id: int) -> Path:
    staging = sink.staging / f"batch-{batch_id:012d}"
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "part-0.jsonl").write_bytes(STAGED + b"\n")
    return staging


def test_the_batch_s_dead_letters_are_filed_before_its_transaction_commits(tmp_path: Path) -> None:
    sink, writer = make_sink(tmp_path, set())
    sink._write_batch(SimpleNamespace(toArrow=table), 3, stage(sink, 3))  # type: ignore[arg-type]
    assert writer.filed_before_commit == [STAGED, REJECTED]
    assert [r.record["value"] for r in writer.results[0]] == [{"n": 0}, {"n": 1}]
    assert [r.text for r in writer.results[0]] == ['{"n":0}', '{"n":1}']
    assert (sink.dead_lettered, sink.rows, sink._last) == (2, 2, 3)


def test_a_replay_of_a_batch_the_database_has_writes_nothing_and_sends_the_letters_filed_then(tmp_path: Path) -> None:
    sink, _ = make_sink(tmp_path, set())
    sink._write_batch(SimpleNamespace(toArrow=table), 3, stage(sink, 3))  # type: ignore[arg-type]
    # The hub stopped after the commit, before the sink's own file said so; Spark replays batch 3.
    sink.state_file.unlink()
    again, writer = make_sink(tmp_path, {3})
    assert again._last == -1
    again._write_batch(SimpleNamespace(toArrow=table), 3, stage(again, 3))  # type: ignore[arg-type]
    assert len(writer.results) == 1  # asked, and the database had it
    assert writer.filed_before_commit == []
    assert again.dead_lettered == 2  # the letters the first run filed, published and counted again
    assert again._last == 3


def test_a_batch_with_neither_results_nor_letters_is_not_sent_to_the_database(tmp_path: Path) -> None:
    sink, writer = make_sink(tmp_path, set())
    sink._write_batch(SimpleNamespace(toArrow=lambda: table(0)), 0, sink.staging / "none")  # type: ignore[arg-type]
    assert writer.results == []


def test_results_keep_their_envelope_and_their_value_as_text() -> None:
    (first, _) = results_of(table())
    assert first.record == {"site": "s1", "stream": "w", "seq": 0, "event_time": 10.0, "key": "k", "value": {"n": 0}}


def postgres_op() -> Any:
    app = App("db")
    app.source("a").sink(sinks.postgres("results", dsn_env="SPANEDGE_TEST_UNSET_DSN"), name="to_db")
    op = app.operators["to_db"]
    assert isinstance(op.sink, PostgresSinkSpec)
    return op


def test_a_deploy_without_the_connection_string_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SPANEDGE_TEST_UNSET_DSN", raising=False)
    op = postgres_op()
    with pytest.raises(
        InvalidDataflow, match=r"sink 'to_db' \(.*\): the hub's environment variable SPANEDGE_TEST_UNSET_DSN is not set"
    ):
        postgres_writer(op, op.sink, "db", "to_db-fp", tmp_path)


def test_a_deploy_without_psycopg_gives_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPANEDGE_TEST_UNSET_DSN", "postgresql://u@h/db")
    for name in [m for m in sys.modules if m == "psycopg" or m.startswith(("psycopg.", "hub.engine.connectors.p"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    op = postgres_op()
    with pytest.raises(MissingExtra, match=r"psycopg is not installed; .* run pip install 'spanedge\[postgres\]'"):
        postgres_writer(op, op.sink, "db", "to_db-fp", tmp_path)
