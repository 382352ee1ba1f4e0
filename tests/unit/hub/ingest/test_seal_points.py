"""When the ingest seals a log: at once after a record that can close a hub window, and before each micro-batch."""

from __future__ import annotations

import math
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub.ingest import log as ingest_log
from hub.ingest.log import AppLog, encode_records
from hub.ingest.seal_points import Closings, closing_points
from spanedge import App, agg
from spanedge.plan import Plan
from spanedge.wire.batch import Record


def plan(*at_hub: str, names: tuple[str, ...]) -> Plan:
    rows = [SimpleNamespace(operator=name, site="cloud" if name in at_hub else "a") for name in names]
    return cast(Plan, SimpleNamespace(hub="cloud", assignments=rows))


def test_each_hub_window_closes_on_its_own_grid_past_its_end_and_lateness() -> None:
    app = App("closings")
    src = app.source("s", time_field="t")
    src.window(name="edge", key="k", size=7, aggs={"n": agg.count()})
    src.window(name="sec", key="k", size=1, aggs={"n": agg.count()}, scope="global")
    src.window(name="late", key="k", size=30, allowed_lateness="2s", aggs={"n": agg.count()}, scope="global")
    src.window(name="hop", key="k", size=60, slide=45, aggs={"n": agg.count()}, scope="global")
    src.window(name="sess", key="k", gap=5, aggs={"n": agg.count()}, scope="global")
    names = ("s", "edge", "sec", "late", "hop", "sess")

    closings = closing_points(app, plan("sec", "late", "hop", "sess", names=names))
    # 1 s windows end on whole seconds; 30 s windows 2 s later; sliding ones 15 s past multiples of 45 s
    assert closings.grids == ((1000, 0), (30_000, 2000), (45_000, 15_000))
    assert closing_points(app, plan("sess", names=names)) == Closings()  # a session ends on no grid
    assert not closing_points(app, plan(names=names))  # all at the edge: nothing at the hub


def test_a_point_is_crossed_by_the_first_record_at_or_past_it() -> None:
    closings = Closings(((1000, 0), (30_000, 2000)))
    assert closings.crossed(9.98, 10.0)  # a window's end, reached exactly
    assert closings.crossed(9.5, 10.2)
    assert not closings.crossed(10.0, 10.9)  # within one second
    assert not closings.crossed(10.5, 10.2)  # an earlier record moves nothing
    assert not closings.crossed(-math.inf, 10.0)  # the first record of a log: no known before
    lateness = Closings(((30_000, 2000),))
    assert lateness.crossed(31.9, 32.0)
    assert not lateness.crossed(29.0, 31.0)
    assert closings.coarser_than(1.0).grids == ((30_000, 2000),)


@given(
    period=st.integers(1, 100_000),
    offset=st.integers(0, 99_999),
    before=st.integers(1_700_000_000_000, 2_000_000_000_000),  # epoch milliseconds
    step=st.integers(1, 10**6),
)
def test_crossing_agrees_with_counting_the_points(period: int, offset: int, before: int, step: int) -> None:
    offset %= period
    after = before + step
    first = before + 1 + (offset - before - 1) % period  # the first point above ``before``
    assert Closings(((period, offset),)).crossed(before / 1000, after / 1000) == (first <= after)


def test_the_log_seals_at_once_after_a_record_that_can_close_a_window(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, seal_interval=3600, closings=Closings(((1000, 0),)))
    ingest_log.subscribe(tmp_path, "window")

    def append(t: float) -> None:
        app_log.append(encode_records([Record("s1", "x", int(t * 100), t, "k", {"t": t})]), t, t)
        app_log.flush()

    append(99.5)
    append(99.7)
    assert app_log.seal_due_at() == app_log._sealed_at + 3600  # within the window: the regular seal
    append(100.0)  # the 99 s window can close
    assert app_log.seal_if_due()
    assert ingest_log.sealed_tail(tmp_path) == ingest_log.tail(tmp_path)
    append(99.9)  # a late record crosses nothing
    append(100.4)
    assert not app_log.seal_if_due()
    app_log.set_closings(None)
    append(101.2)
    assert not app_log.seal_if_due()
    app_log.set_closings(Closings(((100, 0),)))  # no coarser than the regular seal: left to it
    append(102.5)
    assert not app_log.seal_if_due()


def test_the_log_is_sealed_just_before_each_micro_batch_starts(tmp_path: Path) -> None:
    every = 3600.0  # Spark starts a micro-batch on every whole hour since the epoch
    app_log = AppLog(tmp_path, seal_interval=7200, batch_every=(every,))
    app_log.append(encode_records([Record("s1", "x", 1, 1.0, "k", {})]), 1.0, 1.0)
    app_log.flush()
    app_log.seal()
    app_log.append(encode_records([Record("s1", "x", 2, 2.0, "k", {})]), 2.0, 2.0)
    due, wall, mono = app_log.seal_due_at(), time.time(), time.monotonic()
    assert due is not None
    next_batch = (math.floor(wall / every) + 1) * every
    assert due - mono == pytest.approx(next_batch - ingest_log.SEAL_AHEAD_S - wall, abs=0.05)
    assert AppLog(tmp_path / "plain", seal_interval=7200).seal_due_at() is None  # nothing appended: nothing due


def test_with_two_triggers_the_log_is_sealed_before_the_next_micro_batch_of_either(tmp_path: Path) -> None:
    hour, two_hours = 3600.0, 7200.0  # micro-batches on every hour, and on every other hour since the epoch
    due: dict[tuple[float, ...], float] = {}
    for every in [(two_hours, hour), (two_hours,)]:
        app_log = AppLog(tmp_path / str(len(every)), seal_interval=7200, batch_every=every)
        app_log.append(encode_records([Record("s1", "x", 1, 1.0, "k", {})]), 1.0, 1.0)
        app_log.flush()
        app_log.seal()
        app_log.append(encode_records([Record("s1", "x", 2, 2.0, "k", {})]), 2.0, 2.0)
        at, wall, mono = app_log.seal_due_at(), time.time(), time.monotonic()
        assert at is not None
        nearest = min((math.floor(wall / e) + 1) * e for e in every)
        assert at - mono == pytest.approx(nearest - ingest_log.SEAL_AHEAD_S - wall, abs=0.05)
        due[every] = at
    assert due[(two_hours, hour)] <= due[(two_hours,)] + 0.05
