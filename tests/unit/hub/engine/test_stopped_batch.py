"""A batch cut short by its query's stop is one INFO line, not py4j's ERROR and traceback."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from hub.engine import stopped_batch
from hub.engine.sinks import BatchSink, MemoryStore
from hub.engine.stopped_batch import PY4J_CALLBACKS, StoppedMidBatch


def _report(error: BaseException, caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    stopped_batch.install()
    stopped_batch.install()  # twice: still one filter
    logger = logging.getLogger(PY4J_CALLBACKS)
    assert sum(isinstance(f, stopped_batch.QuietStoppedBatches) for f in logger.filters) == 1
    with caplog.at_level(logging.INFO, logger=PY4J_CALLBACKS):
        try:
            raise error
        except Exception:
            logger.exception("There was an exception while executing the Python Proxy on the Python Side.")
    (record,) = [r for r in caplog.records if r.name == PY4J_CALLBACKS]
    return record


def test_a_stopped_batch_is_logged_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    record = _report(StoppedMidBatch("sink alerts: batch 4 was cut short"), caplog)
    assert (record.levelname, record.getMessage(), record.exc_info) == (
        "INFO",
        "sink alerts: batch 4 was cut short",
        None,
    )


def test_any_other_callback_error_stays_an_error_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    record = _report(ValueError("bad row"), caplog)
    assert record.levelname == "ERROR"
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValueError)


class CancelledBatch:
    """A micro-batch whose Spark job is cancelled under it (what stopping its query does)."""

    sparkSession = SimpleNamespace(sparkContext=SimpleNamespace(setLocalProperty=lambda key, value: None))

    def toArrow(self) -> None:
        raise RuntimeError("Job 12 cancelled part of cancelled job group")


def test_the_sink_names_a_batch_its_querys_stop_cut_short(tmp_path: Path) -> None:
    sink = BatchSink("alerts", "memory", "alerts", tmp_path / "app" / "q" / "last.json", MemoryStore())
    with pytest.raises(RuntimeError, match="cancelled job group"):
        sink(CancelledBatch(), 4)  # type: ignore[arg-type]
    sink.stopping()
    with pytest.raises(StoppedMidBatch, match="sink alerts: batch 4 was cut short by its query's stop") as raised:
        sink(CancelledBatch(), 4)  # type: ignore[arg-type]
    assert "cancelled job group" in str(raised.value.__cause__)
    assert sink._last == -1  # not committed: Spark runs it again
