"""The idle timeout of the edge runtime: windows close when the input goes quiet (no broker)."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from spanedge import App, agg
from spanedge.runtime import Pipeline, edge_part


class Clock:
    """A settable agent clock."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _app(**window: Any) -> App:
    app = App("idle")
    win = app.source("s", time_field="t").window(name="win", key="k", aggs={"n": agg.count()}, **window)
    win.transform(lambda df: df, name="at_hub")  # the window's output crosses to the hub
    return app


def _pipeline(clock: Clock, idle_timeout: float | None = 30.0, **window: Any) -> Pipeline:
    app = _app(**(window or {"size": 10}))
    return edge_part(app, "a", clock=clock, out_of_orderness=1.0, idle_timeout=idle_timeout)


def _feed(pipe: Pipeline, *records: tuple[str, float]) -> None:
    for key, t in records:
        pipe.process("s@a", orjson.dumps({"k": key, "t": t}))


def _windows(pipe: Pipeline) -> list[tuple[str, float, int]]:
    return [(r.value["k"], r.value["window_start"], r.value["n"]) for r in pipe.take().to_hub]


def _pending(pipe: Pipeline) -> int:
    window = pipe.windows[0].window
    assert window is not None
    return window.pending()


def test_windows_fire_after_the_idle_timeout_and_not_before() -> None:
    clock = Clock(1000.0)
    pipe = _pipeline(clock)
    _feed(pipe, ("a", 100), ("b", 105), ("a", 112))
    assert _windows(pipe) == [("a", 100.0, 1), ("b", 100.0, 1)]  # fired by event time (watermark 111)
    assert pipe.tick() is False  # records just arrived
    clock.now = 1029.99
    assert pipe.tick() is False
    assert pipe.watermark == 111
    assert _windows(pipe) == []
    assert _pending(pipe) == 1

    clock.now = 1030.0
    assert pipe.tick() is True
    assert pipe.watermark == pytest.approx(1030.0 - 30.0 - 1.0)
    assert _windows(pipe) == [("a", 110.0, 1)]
    assert _pending(pipe) == 0
    assert pipe.late_count == 0

    assert pipe.tick() is False  # the clock has not moved
    clock.now = 1031.5
    assert pipe.tick() is True  # the watermark keeps following the clock
    assert pipe.watermark == pytest.approx(1000.5)
    assert not pipe.take()


def test_the_last_window_fires_idle_timeout_plus_out_of_orderness_after_its_end() -> None:
    clock = Clock(1003.0)  # event times follow the clock
    pipe = _pipeline(clock)
    _feed(pipe, ("a", 995), ("a", 1003))
    assert _windows(pipe) == [("a", 990.0, 1)]
    clock.now = 1040.9
    assert pipe.tick() is True  # idle: the watermark moves from 1002 to 1009.9
    assert _windows(pipe) == []
    clock.now = 1041.0
    assert pipe.tick() is True
    assert _windows(pipe) == [("a", 1000.0, 1)]


@pytest.mark.parametrize("idle_timeout", [None, 0, 0.0])
def test_nothing_fires_with_the_idle_timeout_off(idle_timeout: float | None) -> None:
    clock = Clock(1000.0)
    pipe = _pipeline(clock, idle_timeout=idle_timeout)
    assert pipe.idle_timeout is None
    _feed(pipe, ("a", 100), ("a", 112))
    pipe.take()
    clock.now = 1e9
    assert pipe.tick() is False
    assert pipe.watermark == 111
    assert not pipe.take()
    assert _pending(pipe) == 1


def test_a_pipeline_that_never_saw_a_record_keeps_its_watermark() -> None:
    clock = Clock(1000.0)
    pipe = _pipeline(clock)
    pipe.process("s@a", b"{not json")  # a dead letter is not a record
    clock.now = 1e6
    assert pipe.tick() is False
    assert pipe.watermark == -math.inf
    assert pipe.watermark_lag() is None
    out = pipe.take()
    assert out.to_hub == []
    assert len(out.dlq) == 1


def test_dead_letters_do_not_reset_the_idle_time_but_records_do() -> None:
    clock = Clock(1000.0)
    pipe = _pipeline(clock)
    _feed(pipe, ("a", 100))
    clock.now = 1020.0
    pipe.process("s@a", b'{"k": "a"}')  # no event time: dead letter
    pipe.process_value("s@a", {"k": "a", "t": 1e9})  # far in the future: dead letter
    assert pipe.dlq_count == 2
    clock.now = 1030.0
    assert pipe.tick() is True
    assert _windows(pipe) == [("a", 100.0, 1)]

    pipe.process_value("s@a", {"k": "b", "t": 1005})  # a record (ahead of the watermark 999)
    clock.now = 1059.0
    assert pipe.tick() is False
    clock.now = 1060.0
    assert pipe.tick() is True
    assert _windows(pipe) == [("b", 1000.0, 1)]


def test_a_record_behind_the_idle_watermark_is_late_one_ahead_still_counts() -> None:
    clock = Clock(1000.0)
    pipe = _pipeline(clock)
    _feed(pipe, ("a", 100), ("a", 112))
    clock.now = 1030.0
    assert pipe.tick() is True
    pipe.take()
    assert pipe.watermark == pytest.approx(999.0)

    _feed(pipe, ("a", 115), ("a", 1005))  # 115: its window fired at the idle advance; 1005: ahead of it
    out = pipe.take()
    assert pipe.late_count == 1
    assert len(out.late) == 1
    assert out.late[0].operator == "win"
    assert "behind the watermark 999" in out.late[0].reason
    assert '"t":115' in out.late[0].payload
    assert pipe.watermark == pytest.approx(1004.0)  # moved by the new record as usual
    pipe.flush()
    assert _windows(pipe) == [("a", 1000.0, 1)]


def test_a_record_behind_the_idle_watermark_is_never_lost() -> None:
    clock = Clock(1000.0)
    pipe = _pipeline(clock)
    _feed(pipe, ("a", 100))
    clock.now = 1030.0
    pipe.tick()
    pipe.take()
    _feed(pipe, ("a", 500))  # behind the watermark 999, in a window that never opened
    pipe.flush()
    out = pipe.take()
    results = [(r.value["window_start"], r.value["n"]) for r in out.to_hub]
    assert len(out.late) + len(results) == 1
    assert results in ([], [(500.0, 1)])


def test_session_windows_close_when_idle_and_later_records_are_late() -> None:
    clock = Clock(1000.0)
    pipe = _pipeline(clock, gap=5)
    _feed(pipe, ("a", 100), ("a", 102))
    clock.now = 1030.0
    assert pipe.tick() is True
    out = pipe.take()
    assert [(r.value["window_start"], r.value["window_end"], r.value["n"]) for r in out.to_hub] == [(100.0, 107.0, 2)]
    _feed(pipe, ("a", 103))
    assert pipe.late_count == 1
    assert len(pipe.take().late) == 1


def test_the_watermark_never_goes_backwards() -> None:
    clock = Clock(1000.0)
    pipe = _pipeline(clock)
    _feed(pipe, ("a", 1100))  # ahead of the clock (within max_future_skew)
    clock.now = 1030.0
    assert pipe.tick() is False  # the clock-based watermark 999 is behind 1099
    assert pipe.watermark == 1099

    other = _pipeline(clock)
    _feed(other, ("a", 100))
    clock.now = 1060.0
    assert other.tick() is True
    assert other.watermark == pytest.approx(1029.0)
    _feed(other, ("a", 200), ("a", 900))  # newer than anything seen before, but behind the watermark
    assert other.watermark == pytest.approx(1029.0)
    assert other.max_event_time == {"s@a": 900.0}


def test_snapshot_and_restore_keep_the_idle_watermark() -> None:
    clock = Clock(1000.0)
    pipe = _pipeline(clock)
    _feed(pipe, ("a", 100), ("a", 105))
    clock.now = 1030.0
    assert pipe.tick() is True
    assert _windows(pipe) == [("a", 100.0, 2)]
    saved = orjson.loads(orjson.dumps(pipe.snapshot()))
    assert saved["watermark"] == pytest.approx(999.0)

    clock.now = 2000.0
    restored = _pipeline(clock)
    restored.restore(saved)
    assert restored.watermark == pytest.approx(999.0)
    assert restored.max_event_time == {"s@a": 105.0}
    _feed(restored, ("a", 101))  # its window fired before the snapshot
    assert restored.late_count == 1
    clock.now = 2029.0
    assert restored.tick() is False  # the idle time counts from the last record
    clock.now = 2030.0
    assert restored.tick() is True
    assert restored.watermark == pytest.approx(1999.0)

    quiet = _pipeline(clock)  # restored, and no record since: the idle time counts from when it was built
    quiet.restore(saved)
    clock.now = 2059.0
    assert quiet.tick() is False
    clock.now = 2060.0
    assert quiet.tick() is True
    assert quiet.watermark == pytest.approx(2029.0)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_a_bad_idle_timeout_is_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="idle_timeout must be"):
        _pipeline(Clock(0.0), idle_timeout=bad)
