"""Moves between a spoke and the hub: the stamped switch, the spoke's part, and the share each hub query writes."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, cast

import orjson
import pyarrow as pa
import pytest

from hub.engine.checkpoints import checkpoint_name
from hub.engine.compile import Compiler
from hub.engine.replicas import Replicas
from hub.engine.share_progress import SHARE_WRITTEN
from hub.engine.shares import drop_written
from hub.engine.wanted import before_slot, split
from hub.handover import cutoffs
from hub.handover.switches import before_placement, hub_moves, stamp_handovers
from spanedge import App, agg, sinks
from spanedge.plan import Handover, Plan
from spanedge.runtime import from_plan
from spanedge.runtime.build import hub_feeds, spoke_feeds
from tests.plans import chain_plan

T0 = 1_700_000_000.0


def make_app(downstream: float | None = None) -> App:
    app = App("farm")
    readings = app.source("readings", time_field="ts").map(lambda r: {**r, "x2": r["x"] * 2}, name="double")
    win = readings.window(name="win", key="k", size=10.0, aggs={"n": agg.count(), "s": agg.sum("x2")})
    if downstream is not None:
        win = win.window(name="wide", key="k", size=downstream, aggs={"n": agg.count()}, scope="global")
    win.sink(sinks.console(), name="out")
    return app


def make_plan(site: str, version: int, since: int, handovers: tuple[Handover, ...] = (), chain: bool = False) -> Plan:
    """``win@tiny`` (and ``double@tiny`` with ``chain``) at ``site``; the rest at its source site or the hub."""
    double = ("double", site, since) if chain else ("double", "tiny", 0)
    return chain_plan("farm", version, {"tiny": [double, ("win", site, since)]}, handovers=handovers)


def readings(start: float, end: float, step: float = 0.5) -> list[bytes]:
    n = round((end - start) / step)
    return [orjson.dumps({"k": f"p{i % 2}", "x": i, "ts": start + i * step}) for i in range(n)]


# -- stamping ------------------------------------------------------------------------------


def test_moves_to_and_from_the_hub_are_stamped_on_the_window_period_after_the_delay() -> None:
    app = make_app()
    at_spoke = make_plan("tiny", 1, 0)
    to_hub = stamp_handovers(make_plan("cloud", 2, 2), at_spoke, app, T0 + 23.0, delay=5.0)
    assert to_hub.handovers == (Handover("win@tiny", "tiny", "cloud", T0 + 30.0, 0),)
    assert hub_moves(to_hub) == to_hub.handovers
    back = stamp_handovers(make_plan("tiny", 3, 3), to_hub, app, T0 + 52.0, delay=5.0)
    assert back.handovers == (Handover("win@tiny", "cloud", "tiny", T0 + 60.0, 2),)  # the hub's epoch
    # the switch is on the period of a window downstream of the moved replica too (10 s and 15 s: 30 s)
    wide = make_app(downstream=15.0)
    switch = stamp_handovers(make_plan("cloud", 2, 2), at_spoke, wide, T0 + 11.0).handovers[0].switch_at
    assert switch == T0 + 40.0  # T0 + 20 is a multiple of 10, T0 + 40 the first one of 30 past T0 + 16
    assert switch % 30 == 0


def test_a_move_between_spokes_switches_on_the_moved_window_only() -> None:
    # a hub window ending exactly at T would close on the new owner's records before the old owner's last ones
    wide = make_app(downstream=15.0)
    at_tiny, at_big = make_plan("tiny", 1, 0), make_plan("big", 2, 2)
    switch = stamp_handovers(at_big, at_tiny, wide, T0 + 11.0).handovers[0].switch_at
    assert switch == T0 + 20.0


def test_the_old_placement_puts_the_replicas_of_the_latest_hub_switch_back_at_their_old_owner() -> None:
    assert before_placement(make_plan("tiny", 1, 0)) is None
    spoke_to_spoke = make_plan("big", 2, 2, (Handover("win@tiny", "tiny", "big", T0 + 30.0, 0),))
    assert before_placement(spoke_to_spoke) is None  # the hub's queries do not change
    to_hub = make_plan("cloud", 2, 2, (Handover("win@tiny", "tiny", "cloud", T0 + 30.0, 0),))
    split = before_placement(to_hub)
    assert split is not None
    old, at = split
    assert at == T0 + 30.0
    assert old.site_of("win@tiny") == "tiny"
    assert old.handovers == ()
    back = make_plan("tiny", 3, 3, (Handover("win@tiny", "cloud", "tiny", T0 + 60.0, 2),))
    split = before_placement(back)
    assert split is not None
    assert split[0].site_of("win@tiny") == "cloud"


# -- the spoke's part ------------------------------------------------------------------------


def test_a_spoke_handing_a_window_to_the_hub_sends_the_input_and_only_the_windows_before_the_switch() -> None:
    switch = T0 + 30.0
    plan = make_plan("cloud", 2, 2, (Handover("win@tiny", "tiny", "cloud", switch, 0),))
    pipeline = from_plan(make_app(), plan, "tiny")
    for payload in readings(T0, T0 + 60.0):
        pipeline.process("readings@tiny", payload)
    pipeline.flush()
    sent = pipeline.take().to_hub
    inputs = [r for r in sent if r.stream == "double"]  # the window's input, computed here
    windows = [r for r in sent if r.stream == "win"]
    assert len(inputs) == 120  # the hub computes the window from the switch on: it gets every record now
    assert [r.value["window_start"] for r in windows if r.key == "p0"] == [T0, T0 + 10.0, T0 + 20.0]
    assert {r.epoch for r in windows} == {0}  # the old owner's epoch
    assert not [r for r in sent if r.stream == "readings"]
    assert pipeline.drained() == ["win@tiny"]


def test_a_chain_moving_to_the_hub_sends_only_its_input_and_its_end() -> None:
    switch = T0 + 30.0
    moves = tuple(Handover(r, "tiny", "cloud", switch, 0) for r in ("double@tiny", "win@tiny"))
    pipeline = from_plan(make_app(), make_plan("cloud", 2, 2, moves, chain=True), "tiny")
    for payload in readings(T0, T0 + 40.0):
        pipeline.process("readings@tiny", payload)
    assert {r.stream for r in pipeline.take().to_hub} == {"readings", "win"}


def test_a_spoke_taking_a_window_from_the_hub_keeps_feeding_the_hub_until_its_windows_close() -> None:
    switch = T0 + 60.0
    plan = make_plan("tiny", 3, 3, (Handover("win@tiny", "cloud", "tiny", switch, 2),))
    pipeline = from_plan(make_app(), plan, "tiny")
    for payload in readings(T0 + 40.0, T0 + 100.0):
        pipeline.process("readings@tiny", payload)
    pipeline.flush()
    sent = pipeline.take().to_hub
    raw_times = [r.event_time for r in sent if r.stream == "double"]  # the window's input
    # the hub's windows before the switch need their records, and its watermark needs records past
    # their ends plus the allowed lateness: 2 window lengths past the switch
    assert min(raw_times) == T0 + 40.0
    assert max(raw_times) < switch + 20.0 <= max(raw_times) + 0.5
    windows = [r for r in sent if r.stream == "win"]
    assert min(r.value["window_start"] for r in windows) == switch
    assert {r.epoch for r in windows} == {3}  # the new owner's epoch


def test_the_hub_is_fed_until_the_windows_downstream_of_the_replica_it_hands_over_close_too() -> None:
    switch = T0 + 60.0
    plan = make_plan("tiny", 3, 3, (Handover("win@tiny", "cloud", "tiny", switch, 2),))
    assert hub_feeds(make_app(), plan) == {"win@tiny": switch + 20.0}
    # a 30 s window at the hub reads the moved window's results of windows starting up to 30 s past the switch
    assert hub_feeds(make_app(downstream=30.0), plan) == {"win@tiny": switch + 20.0 + 60.0}
    record_level = make_plan("tiny", 3, 3, (Handover("double@tiny", "cloud", "tiny", switch, 2),), chain=True)
    assert hub_feeds(make_app(), record_level)["double@tiny"] == switch + 20.0  # the window after it
    assert hub_feeds(make_app(), make_plan("tiny", 3, 3)) == {}


def test_a_spoke_handing_a_window_to_the_hub_runs_it_on_for_the_hubs_windows_downstream() -> None:
    switch = T0 + 30.0
    app = make_app(downstream=30.0)
    plan = make_plan("cloud", 2, 2, (Handover("win@tiny", "tiny", "cloud", switch, 0),))
    # the hub's 30 s windows starting before the switch read the moved window's results up to 30 s past it,
    # and the hub's watermark needs results past their ends: twice the downstream window past the switch
    assert spoke_feeds(app, plan) == {"win@tiny": switch + 60.0}
    assert spoke_feeds(make_app(), plan) == {}  # nothing downstream: the part ends at the switch
    chain = make_plan(
        "cloud", 2, 2, tuple(Handover(r, "tiny", "cloud", switch, 0) for r in ("double@tiny", "win@tiny"))
    )
    assert spoke_feeds(app, chain) == {"double@tiny": switch + 60.0, "win@tiny": switch + 60.0}
    assert spoke_feeds(make_app(), chain) == {}  # the chain's own window is its old owner's before the switch only
    pipeline = from_plan(app, plan, "tiny")
    delivered_at = drained_at = None
    for payload in readings(T0, T0 + 140.0):
        pipeline.process("readings@tiny", payload)
        t = orjson.loads(payload)["ts"]
        if delivered_at is None and pipeline.delivered():
            delivered_at = t
        if drained_at is None and pipeline.drained():
            drained_at = t
    pipeline.flush()
    windows = [r for r in pipeline.take().to_hub if r.stream == "win"]
    assert sorted({r.value["window_start"] for r in windows}) == [T0 + 10.0 * i for i in range(9)]
    assert {r.epoch for r in windows} == {0}
    # its part of the handover (what the hub's hold waits for) is still the windows before the switch
    assert delivered_at is not None
    assert delivered_at < switch + 10.0
    assert drained_at is not None
    assert drained_at >= switch + 60.0


def test_a_source_feeding_a_replica_the_hub_hands_to_another_spoke_still_feeds_the_hub() -> None:
    switch = T0 + 60.0
    plan = make_plan("big", 3, 3, (Handover("win@tiny", "cloud", "big", switch, 2),))
    pipeline = from_plan(make_app(), plan, "tiny")
    for payload in readings(T0 + 50.0, T0 + 90.0):
        pipeline.process("readings@tiny", payload)
    sent = pipeline.take().to_hub
    assert {r.stream for r in sent} == {"double"}
    times = [r.event_time for r in sent]
    assert min(times) == T0 + 50.0
    assert max(times) < switch + 20.0


def test_a_spoke_running_another_sites_chain_leaves_feeding_the_hub_to_the_source_site() -> None:
    # tiny's chain offloaded to big moves to the hub, then back: big subscribes to tiny's source for it,
    # but only tiny sends tiny's readings to the hub (the hub refuses another site's source records)
    chain = ("double@tiny", "win@tiny")
    to_hub = make_plan("cloud", 2, 2, tuple(Handover(r, "big", "cloud", T0 + 30.0, 0) for r in chain), chain=True)
    back = make_plan("big", 3, 3, tuple(Handover(r, "cloud", "big", T0 + 60.0, 2) for r in chain), chain=True)
    for plan, start in ((to_hub, T0 + 20.0), (back, T0 + 50.0)):
        sent = {}
        for site in ("tiny", "big"):
            pipeline = from_plan(make_app(), plan, site)
            for payload in readings(start, start + 30.0):
                pipeline.process("readings@tiny", payload)
            sent[site] = {r.stream for r in pipeline.take().to_hub}
        assert sent["tiny"] == {"readings"}
        assert "readings" not in sent["big"]
        assert sent["big"] == {"win"}  # its windows before (as the old owner) or after (the new) the switch


# -- the share each hub query writes -----------------------------------------------------------


def test_shares_accumulate_over_a_move_to_the_hub_and_back() -> None:
    t2, t3 = T0 + 30.0, T0 + 60.0
    crossing = cutoffs.before(None, t2)  # the query reading the spoke's results, before the move to the hub
    computing = cutoffs.after(None, t2)  # the query computing the window at the hub
    assert crossing == ((-math.inf, t2),)
    assert computing == ((t2, math.inf),)
    # moving back: the computing query is the old side, the reading one the new side
    assert cutoffs.before(computing, t3) == ((t2, t3),)
    assert cutoffs.after(crossing, t3) == ((-math.inf, t2), (t3, math.inf))
    assert cutoffs.after(computing, t2) == computing  # deploying the same plan again changes nothing


def test_a_share_cuts_window_results_by_their_start_and_records_by_their_time() -> None:
    switch = T0 + 30.0
    lags = cutoffs.lags(make_app().graph(), "out")
    assert lags == {"win": pytest.approx(9.999)}
    share = cutoffs.Share(cutoffs.after(None, switch), lags)
    assert not share.owns("win", switch - 0.001)  # the window [T-10, T)
    assert share.owns("win", switch + 10.0 - 0.001)  # the window [T, T+10)
    assert share.owns("other", switch)
    assert not share.owns("other", switch - 0.001)
    table = pa.table(
        {
            "stream": ["win", "win", "other"],
            "event_time": [switch - 0.001, switch + 9.999, switch - 1.0],
            "value": ["a", "b", "c"],
        }
    )
    kept, left = share.select(table)
    assert kept.column("value").to_pylist() == ["b"]
    assert left == 2


def test_a_share_survives_a_restart_in_the_checkpoint(tmp_path: Path) -> None:
    assert cutoffs.load(tmp_path) is None
    intervals = ((-math.inf, T0), (T0 + 30.0, math.inf))
    cutoffs.save(tmp_path, intervals)
    assert cutoffs.load(tmp_path) == intervals
    cutoffs.save(tmp_path, None)
    assert cutoffs.load(tmp_path) is None
    (tmp_path / cutoffs.SHARE_FILE).write_text("{}")
    with pytest.raises(ValueError, match="not a handover share"):
        cutoffs.load(tmp_path)


def test_a_sink_moving_with_the_window_has_one_query_at_the_hub_on_the_hubs_side_of_the_switch(tmp_path: Path) -> None:
    app = make_app()
    graph = app.graph()
    moves = ("win@tiny", "out")
    to_hub = make_plan("cloud", 2, 2, tuple(Handover(r, "tiny", "cloud", T0 + 30.0, 0) for r in moves))
    fp = Compiler(cast(Any, None), Replicas(app, to_hub, graph)).fingerprint("out")
    wanted: dict[str, Any] = {"out": (to_hub.assignment("out"), None, fp)}
    # from the spoke: the spoke writes the results before the switch, the hub's query those from it
    assert split(cast(Any, None), app, to_hub, graph, wanted, tmp_path) == {"out": ("after", T0 + 30.0)}
    assert set(wanted) == {"out"}
    # back to the spoke: the hub's query stays, with its state, for the results before the switch
    back = make_plan("tiny", 3, 3, tuple(Handover(r, "cloud", "tiny", T0 + 60.0, 2) for r in moves))
    back = dataclasses.replace(
        back,
        assignments=tuple(dataclasses.replace(a, site="tiny") if a.replica == "out" else a for a in back.assignments),
    )
    wanted = {}
    assert split(cast(Any, None), app, back, graph, wanted, tmp_path) == {before_slot("out"): ("before", T0 + 60.0)}
    assert wanted[before_slot("out")][2] == fp  # the same query as under the move to the hub: it keeps running


def test_an_old_placements_query_that_wrote_its_share_is_not_started_again(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints" / "moving"
    plan = make_plan("cloud", 2, 2, ())
    wanted: dict[str, Any] = {
        "out": (plan.assignment("out"), None, "aaa"),
        before_slot("out"): (plan.assignment("out"), None, "bbb"),
        "other": (plan.assignment("out"), None, "ccc"),
    }
    sides = {"out": ("after", T0 + 60.0), before_slot("out"): ("before", T0 + 60.0)}
    for fp in ("aaa", "bbb"):  # both left a note once (the replica moved to the hub and back since)
        (root / checkpoint_name("out", fp)).mkdir(parents=True)
        (root / checkpoint_name("out", fp) / SHARE_WRITTEN).write_text("{}")
    (root / checkpoint_name("out", "ccc")).mkdir()
    kept = drop_written(root, wanted, sides)
    # the old placement's query stays stopped, its note kept; the other starts afresh; the rest is untouched
    assert kept == {checkpoint_name("out", "bbb")}
    assert set(wanted) == {"out", "other"}
    assert (root / checkpoint_name("out", "bbb") / SHARE_WRITTEN).is_file()
    assert not (root / checkpoint_name("out", "aaa")).exists()
    assert (root / checkpoint_name("out", "ccc")).is_dir()
