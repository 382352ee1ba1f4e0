"""A watermark per site: what agents announce as their frontier, and how the hub's windows wait for the slowest."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_agent.outbox import Outbox
from edge_agent.telemetry import IDLE_AFTER_S, delivered, frontiers
from hub.handover.frontiers import SiteFrontiers, parse_report
from spanedge import App, agg, sinks
from spanedge.runtime import HubRecord, Pipeline, edge_part
from tests.unit.spanedge.runtime.test_idle import Clock


def _windowed(lateness: float) -> App:
    app = App("farm")
    win = app.source("s", time_field="t").window(
        name="win", key="k", size=10, allowed_lateness=lateness, aggs={"n": agg.count()}
    )
    win.transform(lambda df: df, name="at_hub")  # the window's results cross to the hub
    return app


def _forwarding() -> App:
    app = App("farm")
    app.source("s", time_field="t").filter(lambda r: r["k"] != "x").transform(lambda df: df, name="at_hub")
    return app


def _feed(pipe: Pipeline, key: str, t: float) -> list[float]:
    pipe.process("s@a", orjson.dumps({"k": key, "t": t}))
    return [r.event_time for r in pipe.take().to_hub]


@settings(max_examples=60, deadline=None)
@given(
    lateness=st.sampled_from([0.0, 2.5, 10.0]),
    out_of_orderness=st.sampled_from([0.0, 1.0, 4.0]),
    steps=st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 6), st.floats(0, 1)), min_size=1, max_size=60),
)
def test_no_window_result_comes_below_a_frontier_announced_before_it(
    lateness: float, out_of_orderness: float, steps: list[tuple[str, float, float]]
) -> None:
    """Records come out of order, up to ``out_of_orderness`` behind the newest (never behind the watermark)."""
    clock = Clock(1_000.0)
    pipe = edge_part(_windowed(lateness), "a", clock=clock, out_of_orderness=out_of_orderness)
    announced = -math.inf
    newest = 100.0
    for key, jump, back in steps:
        newest += jump
        for stamp in _feed(pipe, key, newest - back * out_of_orderness):
            assert stamp >= announced
        frontier = pipe.frontier()
        if frontier is not None:
            announced = max(announced, frontier)
    pipe.flush()
    assert all(r.event_time >= announced for r in pipe.take().to_hub)


def test_a_frontier_needs_a_watermark_and_an_output_to_the_hub() -> None:
    clock = Clock(1_000.0)
    pipe = edge_part(_windowed(0.0), "a", clock=clock, out_of_orderness=1.0)
    assert pipe.frontier() is None  # no record yet
    _feed(pipe, "a", 100.0)
    assert pipe.frontier() == 99.0 - 0.001  # the watermark, less the lateness and the results' offset
    assert _feed(pipe, "a", 111.0) == [110.0 - 0.001]  # [100, 110) fired
    assert pipe.frontier() == 110.0 - 0.001
    local = App("farm")
    local.source("s", time_field="t").window(name="win", key="k", size=10, aggs={"n": agg.count()})
    quiet = edge_part(local, "a", clock=clock)
    _feed(quiet, "a", 100.0)
    assert quiet.frontier() is None  # it sends the hub nothing


def test_a_forwarded_record_keeps_its_time_at_or_past_the_frontier_within_the_disorder() -> None:
    pipe = edge_part(_forwarding(), "a", clock=Clock(1_000.0), out_of_orderness=2.0)
    assert _feed(pipe, "a", 100.0) == [100.0]
    assert pipe.frontier() == 98.0  # the watermark
    assert _feed(pipe, "b", 98.5) == [98.5]  # within the disorder: past the frontier


def _sinking() -> App:
    """A window whose results go to a local sink, and every record to another, nothing to the hub."""
    app = App("farm")
    source = app.source("s", time_field="t")
    source.window(name="win", key="k", size=10, aggs={"n": agg.count()}).sink(sinks.memory("w"), name="windows")
    source.sink(sinks.memory("r"), name="records")
    return app


def _sink_time(value: dict[str, float]) -> float:
    return value["window_end"] - 0.001 if "window_end" in value else value["t"]


@settings(max_examples=60, deadline=None)
@given(
    out_of_orderness=st.sampled_from([0.0, 1.0, 4.0]),
    steps=st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 6), st.floats(0, 1)), min_size=1, max_size=60),
)
def test_no_sink_value_comes_below_a_sink_frontier_announced_before_it(
    out_of_orderness: float, steps: list[tuple[str, float, float]]
) -> None:
    pipe = edge_part(_sinking(), "a", clock=Clock(1_000.0), out_of_orderness=out_of_orderness)
    assert pipe.frontier() is None  # nothing goes to the hub
    announced = -math.inf
    newest = 100.0
    for key, jump, back in steps:
        newest += jump
        pipe.process("s@a", orjson.dumps({"k": key, "t": newest - back * out_of_orderness}))
        assert all(_sink_time(item.value) >= announced for item in pipe.take().sinks)
        frontier = pipe.sink_frontier()
        if frontier is not None:
            announced = max(announced, frontier)
    assert announced > -math.inf
    pipe.flush()
    assert all(_sink_time(item.value) >= announced for item in pipe.take().sinks)


def test_a_sink_frontier_needs_a_watermark_and_a_sink_here() -> None:
    clock = Clock(1_000.0)
    pipe = edge_part(_sinking(), "a", clock=clock, out_of_orderness=1.0)
    assert pipe.sink_frontier() is None  # no record yet
    _feed(pipe, "a", 100.0)
    assert pipe.sink_frontier() == 99.0 - 0.001  # the window's: the watermark less the results' offset
    remote = edge_part(_windowed(0.0), "a", clock=clock)
    _feed(remote, "a", 100.0)
    assert remote.sink_frontier() is None  # its results go to the hub, no sink here


def _hub_record(t: float) -> HubRecord:
    return HubRecord("at_hub", "a", t, None, {"t": t}, orjson.dumps({"t": t}))


def test_the_heartbeat_frontier_waits_for_the_outbox_and_lets_an_idle_app_go(tmp_path: Path) -> None:
    clock = Clock(1_000.0)
    pipe = edge_part(_forwarding(), "a", clock=clock)
    _feed(pipe, "a", 100.0)
    box = Outbox(tmp_path / "o.db")
    committed = {"farm": 100.0 - 0.001}
    assert frontiers({"farm": pipe}, committed, box) == {"farm": 100.0 - 0.001}
    box.commit({"farm": [_hub_record(97.0)]})
    clock.now += IDLE_AFTER_S
    assert frontiers({"farm": pipe}, committed, box) == {"farm": 97.0}  # a record still to send: never idle
    box.ack(box.batches(0, 10)[0].ids)
    assert frontiers({"farm": pipe}, committed, box) == {"farm": None}  # idle, nothing owed
    # silent only because an input was down or the inbox still held messages: it holds back
    assert frontiers({"farm": pipe}, committed, box, IDLE_AFTER_S - 1) == {"farm": 100.0 - 0.001}
    assert frontiers({"farm": pipe}, committed, box, IDLE_AFTER_S) == {"farm": None}
    assert frontiers({}, committed, box) == {}  # an app this site no longer runs


def test_a_site_has_delivered_what_lies_below_both_frontiers_and_its_outbox(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    assert delivered({"farm": 100.0}, {"farm": 95.0, "barn": 90.0}, box) == {"farm": 95.0, "barn": 90.0}
    box.commit({"farm": [_hub_record(93.0)]})
    assert delivered({"farm": 100.0}, {"farm": 95.0}, box) == {"farm": 93.0}  # a record still to send
    assert delivered({"farm": 100.0}, {}, box) == {"farm": 93.0}
    assert delivered({}, {}, box) == {}  # no frontier known: nothing announced
    box.ack(box.batches(0, 10)[0].ids)
    assert delivered({"farm": 100.0}, {"farm": 95.0}, box, {"farm": 91.0}) == {"farm": 91.0}  # a sink value unacked
    assert delivered({"farm": 100.0}, {"farm": 95.0}, box, {"other": 1.0}) == {"farm": 95.0}


def test_what_a_site_delivered_is_its_highest_announcement_else_its_frontier() -> None:
    fronts = SiteFrontiers()
    assert fronts.delivered("farm", "barn") is None
    fronts.observe("barn", {"complete": {"farm": 120.0}})  # an agent that announces no delivery
    assert fronts.delivered("farm", "barn") == 120.0
    fronts.observe("barn", {"complete": {"farm": 125.0}, "delivered": {"farm": 110.0}})
    fronts.observe("barn", {"complete": {"farm": 126.0}, "delivered": {"farm": 105.0, "x": "soon"}})  # an older one
    assert fronts.delivered("farm", "barn") == 110.0
    assert fronts.delivered("x", "barn") is None
    assert fronts.hold_from("farm", lambda _: False) == 126.0  # the hub's windows wait on the frontier only


def test_the_hub_waits_for_the_lowest_frontier_of_the_live_sites_that_list_the_app() -> None:
    gone: set[str] = set()
    fronts = SiteFrontiers()
    assert fronts.hold_from("farm", gone.__contains__) is None  # nobody announced anything
    fronts.advance("farm", "barn", 150.0)  # a batch before any heartbeat: barn holds nothing back yet
    assert fronts.hold_from("farm", gone.__contains__) is None
    fronts.observe("barn", {"complete": {"farm": 120.0}})  # an older heartbeat: the batch's is higher
    fronts.observe("west", {"complete": {"farm": 130.0, "other": 5.0}})
    assert fronts.frontiers("farm") == {"barn": 150.0, "west": 130.0}
    assert fronts.hold_from("farm", gone.__contains__) == 130.0
    fronts.observe("west", {"complete": {"farm": None}})  # idle
    assert fronts.hold_from("farm", gone.__contains__) == 150.0
    fronts.advance("farm", "west", 131.0)  # it sends again
    assert fronts.hold_from("farm", gone.__contains__) == 131.0
    gone.add("west")  # silent past the grace period: what it owes comes late
    assert fronts.hold_from("farm", gone.__contains__) == 150.0
    gone.clear()
    fronts.observe("west", {"apps": []})  # it no longer sends the app to the hub
    assert fronts.hold_from("farm", gone.__contains__) == 150.0
    assert fronts.hold_from("other", gone.__contains__) is None


def test_malformed_frontier_reports_are_skipped() -> None:
    beat = {"complete": {"a": 1.5, "b": None, "c": "soon", "d": True, "e": math.inf, "f": 3}}
    assert parse_report(beat) == {"a": 1.5, "b": None, "f": 3.0}
    assert parse_report({"complete": [1, 2]}) == {}


def test_the_grid_of_the_hub_windows_divides_every_window_end() -> None:
    from types import SimpleNamespace
    from typing import cast

    from hub.handover.frontiers import window_grid
    from spanedge.plan import Plan

    app = App("grid")
    src = app.source("s", time_field="t")
    src.window(name="edge", key="k", size=7, aggs={"n": agg.count()})
    src.window(name="half", key="k", size=30, aggs={"n": agg.count()}, scope="global")
    src.window(name="hop", key="k", size=60, slide=45, aggs={"n": agg.count()}, scope="global")

    def plan(*at_hub: str) -> Plan:
        rows = [
            SimpleNamespace(operator=name, site="cloud" if name in at_hub else "a")
            for name in ("s", "edge", "half", "hop")
        ]
        return cast(Plan, SimpleNamespace(hub="cloud", assignments=rows))

    assert window_grid(app, plan("half", "hop")) == 15.0  # ends on multiples of 30 and of 45
    assert window_grid(app, plan("half")) == 30.0
    assert window_grid(app, plan()) == 0.0  # the 7 s window runs at the edge: none at the hub
