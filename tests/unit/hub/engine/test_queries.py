"""Stopping the hub's queries and session: a JVM that already ended them is a line of its own, any other failure an error."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from hub.engine.queries import Query
from hub.engine.session import SPARK_STOPPED, spark_ended


class Py4JNetworkError(Exception):
    """Named as py4j's own: the gateway found no JVM to answer."""


class Py4JError(Exception):
    """Named as py4j's own: what it raises when a lookup in the JVM failed."""


class Unprintable(Exception):
    """An error whose text cannot be had (py4j asks the JVM for it)."""

    def __str__(self) -> str:
        raise ConnectionRefusedError(111, "Connection refused")


def _chained(outer: Exception, inner: BaseException) -> Exception:
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904  (chained implicitly, as py4j's handlers do)
    except Exception as exc:
        return exc


def test_spark_ended_knows_a_stopped_context_and_a_jvm_that_is_gone() -> None:
    assert spark_ended(RuntimeError(f"An error occurred while calling o341.stop.\n: java.lang.{SPARK_STOPPED}."))
    assert spark_ended(ConnectionRefusedError(111, "Connection refused"))
    assert spark_ended(_chained(RuntimeError("stop failed"), Py4JNetworkError("Answer from Java side is empty")))
    assert spark_ended(_chained(Unprintable(), ConnectionRefusedError(111, "Connection refused")))
    # the connection broke while pyspark looked up its own session class (SparkSession.stop)
    assert spark_ended(Py4JError("org.apache.spark.sql.classic.SparkSession does not exist in the JVM"))
    assert not spark_ended(Py4JError("com.example.Missing does not exist in the JVM"))  # a user's class
    assert not spark_ended(Py4JError("An error occurred while calling o12.start"))
    assert not spark_ended(RuntimeError("the sink's directory is not writable"))
    assert not spark_ended(Unprintable())


class Handle:
    """A running query's handle whose ``stop`` raises ``error``."""

    def __init__(self, error: Exception, calls: list[str], active: list[bool] | None = None) -> None:
        self.error = error
        self.calls = calls
        self.active = active  # isTriggerActive, one value per look (None: no status to read)

    @property
    def status(self) -> dict[str, Any]:
        if self.active is None:
            raise AttributeError("status")
        now = self.active.pop(0) if len(self.active) > 1 else self.active[0]
        self.calls.append(f"batch {'running' if now else 'done'}")
        return {"isTriggerActive": now}

    def stop(self) -> None:
        self.calls.append("query stopped")
        raise self.error


class Sink:
    closed = False

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def stopping(self) -> None:
        self.calls.append("sink told")

    def close(self) -> None:
        self.closed = True


def _query(error: Exception, calls: list[str] | None = None, active: list[bool] | None = None) -> tuple[Query, Sink]:
    calls = [] if calls is None else calls
    sink = Sink(calls)
    handle: Any = Handle(error, calls, active)
    return Query("out", sink, Path("checkpoint"), "out-0", "0", handle=handle), sink  # type: ignore[arg-type]


def test_the_sink_stops_waiting_for_its_database_before_the_query_stops() -> None:
    """A batch that waits for an unreachable database would keep Spark's stop waiting for it."""
    calls: list[str] = []
    query, sink = _query(ConnectionRefusedError(111, ""), calls)
    query.stop()
    assert calls == ["sink told", "query stopped"]
    assert sink.closed


def test_stopping_lets_the_running_batch_end_first() -> None:
    """Cancelling a batch's Spark job mid-run makes Spark log its broadcasts and shuffle reads as errors."""
    calls: list[str] = []
    query, _ = _query(ConnectionRefusedError(111, ""), calls, active=[True, True, False])
    query.stop()
    assert calls == ["batch running", "batch running", "batch done", "sink told", "query stopped"]


def test_a_batch_that_does_not_end_in_time_is_cancelled() -> None:
    calls: list[str] = []
    query, sink = _query(ConnectionRefusedError(111, ""), calls, active=[True])
    query.stop(drain=0.2)
    assert calls[-2:] == ["sink told", "query stopped"]
    assert set(calls[:-2]) == {"batch running"}
    assert sink.closed


@pytest.mark.parametrize(
    "error",
    [RuntimeError(f"An error occurred while calling o341.stop.\n: {SPARK_STOPPED}."), ConnectionRefusedError(111, "")],
)
def test_a_query_whose_spark_already_stopped_is_logged_without_a_traceback(
    caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    query, sink = _query(error)
    with caplog.at_level(logging.INFO, logger="hub.engine.queries"):
        query.stop()
    assert [(r.levelno, r.getMessage(), r.exc_info) for r in caplog.records] == [
        (logging.INFO, "query out: Spark had already stopped", None)
    ]
    assert query.handle is None
    assert sink.closed


def test_any_other_failure_to_stop_is_an_error_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    query, sink = _query(RuntimeError("the gateway went away"))
    query.stop()
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert record.getMessage() == "stopping query out failed"
    assert record.exc_info is not None
    assert sink.closed


class Session:
    """A SparkSession whose ``stop`` raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def stop(self) -> None:
        raise self.error


def test_the_engine_stops_quietly_when_the_jvm_is_gone_and_raises_anything_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from hub.engine.engine import Engine

    engine: Any = Engine.__new__(Engine)
    engine._queries, engine._own_spark, engine._listener = type("Q", (), {"stop": lambda self: None})(), True, None
    engine.spark = Session(ConnectionRefusedError(111, "Connection refused"))
    with caplog.at_level(logging.INFO, logger="hub.engine.engine"):
        engine.stop()
    assert "Spark's JVM had already ended the session" in caplog.text
    engine.spark = Session(RuntimeError("out of memory"))
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.stop()
