"""Stopping a hub query: a JVM that already ended the session is a line of its own, any other failure a traceback."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from hub.queries import SPARK_STOPPED, Query


class Handle:
    """A running query's handle whose ``stop`` raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def stop(self) -> None:
        raise self.error


class Sink:
    closed = False

    def close(self) -> None:
        self.closed = True


def _query(error: Exception) -> tuple[Query, Sink]:
    sink = Sink()
    handle: Any = Handle(error)
    return Query("out", sink, Path("checkpoint"), "out-0", "0", handle=handle), sink  # type: ignore[arg-type]


def test_a_query_whose_spark_already_stopped_is_logged_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    query, sink = _query(RuntimeError(f"An error occurred while calling o341.stop.\n: {SPARK_STOPPED}.\n..."))
    with caplog.at_level(logging.INFO, logger="hub.queries"):
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
