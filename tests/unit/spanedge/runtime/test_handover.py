"""Handing a windowed replica from one spoke to another by an event-time split, in the pure runtime."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import orjson
import pytest

from spanedge import App, agg, sinks
from spanedge.plan import Handover, Plan
from spanedge.runtime import Pipeline, from_plan
from tests.plans import chain_plan

T0 = 1_700_000_000.0
SWITCH = T0 + 60.0  # a multiple of 10 s and of the 5 s slide


def make_app(slide: float | None, gap: float | None = None) -> App:
    app = App("farm")
    readings = app.source("readings", time_field="ts").map(lambda r: {**r, "x2": r["x"] * 2}, name="double")
    if gap is not None:
        window = readings.window(name="win", key="k", gap=gap, aggs={"n": agg.count(), "s": agg.sum("x2")})
    else:
        window = readings.window(
            name="win", key="k", size=10.0, slide=slide, aggs={"n": agg.count(), "s": agg.sum("x2")}, scope="local"
        )
    window.sink(sinks.console(), name="out")
    return app


def make_plan(site: str, version: int, since: int, handovers: tuple[Handover, ...] = ()) -> Plan:
    """Tiny's ``double`` and ``win`` replicas offloaded to ``site``, the sink at the hub."""
    return chain_plan("farm", version, {"tiny": [("double", site, since), ("win", site, since)]}, handovers=handovers)


def moved_plan() -> Plan:
    """Plan v4: both of tiny's offloaded replicas move from big1 to big2 at ``SWITCH``."""
    handovers = tuple(Handover(r, "big1", "big2", SWITCH, 0) for r in ("double@tiny", "win@tiny"))
    return make_plan("big2", 4, 4, handovers)


def readings(n: int = 400, seed: int = 3) -> list[tuple[float, bytes]]:
    """Records 0.3 s apart around the switch, a few out of order, some exactly on window bounds."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = T0 + i * 0.3 + rng.uniform(-0.2, 0.2)
        if i % 37 == 0:
            t = math.floor(t / 5) * 5  # on a window bound
        out.append((t, orjson.dumps({"k": f"p{i % 3}", "x": i, "ts": t})))
    out.append((SWITCH, orjson.dumps({"k": "p0", "x": 1000, "ts": SWITCH})))  # exactly at the switch
    return out


def run(pipeline: Pipeline, records: list[tuple[float, bytes]]) -> list[tuple[Any, int]]:
    """Feed ``records`` and flush; return (window value, epoch) of what goes to the hub."""
    for _, payload in records:
        pipeline.process("readings@tiny", payload)
    pipeline.flush()
    return [(r.value, r.epoch) for r in pipeline.take().to_hub]


def build(app: App, plan: Plan, site: str) -> Pipeline:
    return from_plan(app, plan, site, out_of_orderness=0.5, clock=lambda: T0 + 1e6)


def key(value: dict[str, Any]) -> tuple[Any, float]:
    return (value["k"], value["window_start"])


@pytest.mark.parametrize("slide", [None, 5.0], ids=["tumbling", "sliding"])
def test_the_two_owners_together_emit_what_a_fixed_plan_does(slide: float | None) -> None:
    app = make_app(slide)
    data = readings()
    fixed = run(build(app, make_plan("big1", 1, 0), "big1"), data)

    moved = moved_plan()
    # the old owner ran everything before the new plan arrived (at event time SWITCH - 20 s)
    arrival = next(i for i, (t, _) in enumerate(data) if t >= SWITCH - 20)
    old = build(app, make_plan("big1", 1, 0), "big1")
    for _, payload in data[:arrival]:
        old.process("readings@tiny", payload)
    before = [(r.value, r.epoch) for r in old.take().to_hub]
    snapshot = old.snapshot()
    old = build(app, moved, "big1")  # the agent rebuilds its pipeline and restores its checkpoint
    old.restore(snapshot)
    old_out = before + run(old, data[arrival:])
    # the new owner subscribes when the plan arrives; it never sees the earlier records
    new_out = run(build(app, moved, "big2"), data[arrival:])

    assert {e for _, e in old_out} == {0}
    assert {e for _, e in new_out} == {4}
    assert all(v["window_start"] < SWITCH for v, _ in old_out)
    assert all(v["window_start"] >= SWITCH for v, _ in new_out)
    union = sorted((v for v, _ in old_out + new_out), key=key)
    assert union == sorted((v for v, _ in fixed), key=key)
    assert len({key(v) for v in union}) == len(union)  # each window once
    straddling = [v for v, _ in fixed if v["window_start"] < SWITCH < v["window_end"]]
    assert bool(straddling) is (slide is not None)  # sliding windows straddle the switch


def test_the_old_owner_is_drained_when_its_watermark_passes_its_last_window() -> None:
    app = make_app(5.0)
    moved = moved_plan()
    old = build(app, moved, "big1")
    assert {n.replica for n in old.nodes} == {"readings@tiny", "double@tiny", "win@tiny"}
    for t in (SWITCH - 1, SWITCH + 9):
        old.process("readings@tiny", orjson.dumps({"k": "a", "x": 1, "ts": t}))
    assert old.drained() == []  # [SWITCH - 5, SWITCH + 5) is still open
    old.process("readings@tiny", orjson.dumps({"k": "a", "x": 1, "ts": SWITCH + 11}))
    assert set(old.drained()) == {"double@tiny", "win@tiny"}
    retired = from_plan(app, moved, "big1", retired=old.drained())
    assert retired.nodes == []
    assert build(app, moved, "big2").drained() == []  # the new owner's part never ends


def test_an_old_owner_that_got_the_plan_late_drops_the_windows_it_no_longer_owns() -> None:
    app = make_app(None)
    old = build(app, make_plan("big1", 1, 0), "big1")
    for t in (SWITCH - 3, SWITCH + 0.2):  # the watermark stays before the switch
        old.process("readings@tiny", orjson.dumps({"k": "a", "x": 1, "ts": t}))
    moved = moved_plan()
    late = build(app, moved, "big1")
    late.restore(old.snapshot())
    late.flush()
    assert [r.value["window_start"] for r in late.take().to_hub] == [SWITCH - 10]


def test_a_session_open_across_the_switch_comes_out_whole_from_the_old_owner() -> None:
    app = make_app(None, gap=4.0)
    moved = moved_plan()
    old, new = build(app, moved, "big1"), build(app, moved, "big2")
    for t in (SWITCH - 2, SWITCH - 1, SWITCH + 1, SWITCH + 6):
        payload = orjson.dumps({"k": "a", "x": 1, "ts": t})
        old.process("readings@tiny", payload)
        new.process("readings@tiny", payload)
    old.flush()
    new.flush()
    # the session began before the switch: the old owner's, with its record after it (tests/unit/hub/handover/test_switches.py)
    assert [(r.value["window_start"], r.value["n"]) for r in old.take().to_hub] == [(SWITCH - 2, 3)]
    assert [(r.value["window_start"], r.value["n"]) for r in new.take().to_hub] == [(SWITCH + 6, 1)]


def test_the_switch_is_after_the_delay_and_on_every_moved_window_s_slide() -> None:
    from hub.handover.switches import switch_time

    assert switch_time(T0 + 1.0, 5.0, [10.0]) == T0 + 10.0
    assert switch_time(T0 + 6.0, 5.0, [10.0, 4.0]) == T0 + 20.0  # a multiple of 10 and of 4
    assert switch_time(T0 + 0.5, 2.0, []) == T0 + 3.0


def test_a_replan_hands_over_what_moves_between_spokes_and_nothing_else() -> None:
    from hub.handover.switches import stamp_handovers

    app = make_app(5.0)
    before = make_plan("big1", 3, 2)
    after = make_plan("big2", 4, 4)
    stamped = stamp_handovers(after, before, app, T0 + 1.0, delay=5.0)
    assert stamped.handovers == (
        Handover("double@tiny", "big1", "big2", T0 + 10.0, 2),
        Handover("win@tiny", "big1", "big2", T0 + 10.0, 2),
    )
    assert stamp_handovers(after, None, app, T0) == after  # a first deploy hands nothing over
    to_hub = make_plan("cloud", 4, 4)  # to the hub too (tests/unit/hub/engine/test_handover_queries.py)
    assert {h.target for h in stamp_handovers(to_hub, before, app, T0).handovers} == {"cloud"}
    # a later version that moves nothing keeps the handover while its old owner may still be finishing
    again = dataclasses.replace(make_plan("big2", 5, 4))
    assert stamp_handovers(again, stamped, app, T0 + 100.0).handovers == stamped.handovers
    assert stamp_handovers(again, stamped, app, T0 + 1000.0).handovers == ()


@pytest.mark.parametrize("slide", [None, 5.0], ids=["tumbling", "sliding"])
def test_the_old_owner_has_emitted_its_part_once_its_last_window_fired(slide: float | None) -> None:
    app = make_app(slide)
    old = build(app, moved_plan(), "big1")
    emitted: list[Any] = []
    fronts: list[float | None] = []
    last_end = SWITCH + (5.0 if slide else 0.0)  # of the last window starting before the switch
    for t in (SWITCH - 1, last_end - 0.1, last_end + 0.4, last_end + 0.6):
        assert old.delivered() == []  # the watermark (0.5 s behind) is before the last window's end
        old.process("readings@tiny", orjson.dumps({"k": "a", "x": 1, "ts": t}))
        emitted += [r.value for r in old.take().to_hub]
        fronts.append(old.frontier())
    assert fronts[-2] is not None  # still owed: its next window's end
    assert set(old.delivered()) == {"double@tiny", "win@tiny"}
    assert old.frontier() is None  # it sends the hub nothing more: the hub's windows no longer wait for it
    assert old.drained() == []  # dropped later, a whole window past the switch
    ends = sorted(v["window_end"] for v in emitted)
    assert ends[-1] == last_end  # every window it owns came out
    assert all(v["window_start"] < SWITCH for v in emitted)


def test_a_pipeline_reports_the_size_of_each_window_replica_s_state() -> None:
    app = make_app(None)
    pipeline = build(app, make_plan("big1", 1, 1), "big1")
    empty = pipeline.state_bytes()
    assert set(empty) == {"win@tiny"}  # windows only: record-level replicas hold nothing
    for t in (T0 + 1, T0 + 2):
        for k in ("a", "b", "c"):
            pipeline.process("readings@tiny", orjson.dumps({"k": k, "x": 1, "ts": t}))
    sizes = pipeline.state_bytes()
    assert sizes["win@tiny"] > empty["win@tiny"]  # three keys' open windows
    assert sizes["win@tiny"] == len(orjson.dumps(pipeline.snapshot_operator("win@tiny").to_data()))
