"""A hub query's input rows/s follows its input: over its recent batches, zero once they stop."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from hub.engine.input_rates import InputRates
from hub.engine.queries import Query

T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC).timestamp()


def batch(at: float, rows: int, rate: float = 0.0) -> SimpleNamespace:
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return SimpleNamespace(progress=SimpleNamespace(id="q1", timestamp=stamp, numInputRows=rows))


def test_the_rate_is_over_the_recent_batches_and_falls_to_zero_when_they_stop() -> None:
    now = [T0]
    rates = InputRates(window_s=10.0, clock=lambda: now[0])
    assert rates.rate("q1") is None  # no batch yet
    for i in range(10):
        rates.onQueryProgress(batch(T0 + i, 50))
    now[0] = T0 + 10
    assert rates.rate("q1") == 50.0
    for i in range(10, 20):
        rates.onQueryProgress(batch(T0 + i, 20))
    now[0] = T0 + 20
    assert rates.rate("q1") == 20.0
    rates.onQueryIdle(SimpleNamespace(id="q1"))  # the input stopped
    now[0] = T0 + 25
    assert rates.rate("q1") == 10.0
    now[0] = T0 + 31
    assert rates.rate("q1") == 0.0


class _Handle:
    """A running query whose last batch said 27.6 rows/s."""

    def __init__(self) -> None:
        self.id, self.isActive = "q1", True
        self.lastProgress = {"batchId": 1, "inputRowsPerSecond": 27.6, "numInputRows": 200}

    def exception(self) -> None:
        return None


def test_a_query_reports_its_recent_input_rate_not_its_last_batchs(tmp_path: Any) -> None:
    from hub.engine.late import LateRecords
    from hub.engine.sinks import BatchSink, MemoryStore

    sink = BatchSink("alerts", "memory", "alerts", tmp_path / "app" / "q" / "last.json", MemoryStore())
    query = Query("alerts", sink, tmp_path, "alerts", "f", handle=_Handle())  # type: ignore[arg-type]
    now = [T0 + 1]
    rates = InputRates(window_s=10.0, clock=lambda: now[0])
    rates.onQueryProgress(batch(T0, 200))
    assert query.metrics(0, LateRecords())["input_rows_per_s"] == 27.6  # Spark's figure without the listener
    assert query.metrics(0, LateRecords(), rates)["input_rows_per_s"] == 200.0
    now[0] = T0 + 60  # a minute without a batch: Spark's last progress still says 27.6
    assert query.metrics(0, LateRecords(), rates)["input_rows_per_s"] == 0.0
    assert query.metrics(0, LateRecords(), rates)["result_latency"] is None  # nothing written yet
