"""Session windows across a handover: each session comes out whole, once, from the owner of its start."""

from __future__ import annotations

import math
import random
from typing import Any

import orjson
import pytest

from hub.handover.switches import DEFAULT_KEEP_S, stamp_handovers, switch_time
from spanedge import App, agg, sinks
from spanedge.keyrange import KEY_SPACE, Share, key_hash
from spanedge.plan import Handover, Plan
from spanedge.runtime import Pipeline, from_plan
from spanedge.runtime.windows import SESSION_CUT_S, WindowState
from tests.plans import chain_plan

T0 = 1_700_000_000.0
SWITCH = T0 + 60.0
CUT = SWITCH + SESSION_CUT_S
GAP = 4.0
LATENESS = 2.0
OOO = 0.5  # the pipelines' out-of-orderness
ARRIVAL = SWITCH - 20.0  # event time at which the new owner gets the plan (more than a gap before the switch)

Row = tuple[str, float, int]
"""A reading: key, event time, value."""


def make_app() -> App:
    app = App("farm")
    doubled = app.source("readings", time_field="ts").map(lambda r: {**r, "x2": r["x"] * 2}, name="double")
    aggs = {"n": agg.count(), "s": agg.sum("x2")}
    doubled.window(name="win", key="k", gap=GAP, allowed_lateness=LATENESS, aggs=aggs).sink(sinks.console(), name="out")
    return app


def make_plan(site: str, version: int, since: int, handovers: tuple[Handover, ...] = ()) -> Plan:
    return chain_plan("farm", version, {"tiny": [("double", site, since), ("win", site, since)]}, handovers=handovers)


def moved_plan() -> Plan:
    """Tiny's ``double`` and ``win`` move from big1 to big2 at ``SWITCH``."""
    return make_plan("big2", 4, 4, tuple(Handover(r, "big1", "big2", SWITCH, 0) for r in ("double@tiny", "win@tiny")))


def build(app: App, plan: Plan, site: str) -> Pipeline:
    return from_plan(app, plan, site, out_of_orderness=OOO, clock=lambda: T0 + 1e6)


def payload(row: Row) -> bytes:
    k, t, x = row
    return orjson.dumps({"k": k, "x": x, "ts": t})


def results(pipeline: Pipeline) -> list[tuple[dict[str, Any], int]]:
    return [(r.value, r.epoch) for r in pipeline.take().to_hub]


def restarted(app: App, plan: Plan, site: str, pipeline: Pipeline) -> Pipeline:
    """``pipeline`` rebuilt from its snapshot, as an agent restarting does."""
    again = build(app, plan, site)
    again.restore(pipeline.snapshot())
    return again


def handover(
    rows: list[Row], *, restart_old: int | None = None, restart_new: int | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Feed ``rows`` (in arrival order) to both owners; return what each emitted (old, new).

    The old owner ran the fixed plan until the moved plan arrived (the first
    record at or after ``ARRIVAL``), then restored its checkpoint into the
    moved plan; the new owner subscribes then. ``restart_*``: the index of
    the record before which that owner restarts from its snapshot.
    """
    app, moved = make_app(), moved_plan()
    arrival = next(i for i, (_, t, _) in enumerate(rows) if t >= ARRIVAL)
    old = build(app, make_plan("big1", 1, 0), "big1")
    for row in rows[:arrival]:
        old.process("readings@tiny", payload(row))
    out_old = results(old)
    old = restarted(app, moved, "big1", old)
    new = build(app, moved, "big2")
    out_new: list[tuple[dict[str, Any], int]] = []
    for i, row in enumerate(rows[arrival:], arrival):
        if i == restart_old:
            out_old += results(old)
            old = restarted(app, moved, "big1", old)
        if i == restart_new:
            out_new += results(new)
            new = restarted(app, moved, "big2", new)
        old.process("readings@tiny", payload(row))
        new.process("readings@tiny", payload(row))
    old.flush()
    new.flush()
    out_old += results(old)
    out_new += results(new)
    assert {e for _, e in out_old} <= {0}
    assert {e for _, e in out_new} <= {4}
    for pipeline in (old, new):
        assert pipeline.late_count == 0
        assert pipeline.take().dlq == []
    return [v for v, _ in out_old], [v for v, _ in out_new]


def unsplit(rows: list[Row]) -> list[dict[str, Any]]:
    """What a window that never moves emits."""
    fixed = build(make_app(), make_plan("big1", 1, 0), "big1")
    for row in rows:
        fixed.process("readings@tiny", payload(row))
    fixed.flush()
    return [v for v, _ in results(fixed)]


def reference(rows: list[Row], *, cut: bool) -> list[dict[str, Any]]:
    """The sessions of ``rows`` in plain Python; with ``cut``, one that began before the switch ends before the cut."""
    out = []
    for k in sorted({r[0] for r in rows}):
        current: list[Any] | None = None
        sessions = []
        for _, t, x in sorted((r for r in rows if r[0] == k), key=lambda r: r[1]):
            if current is not None and t - current[1] < GAP and not (cut and t >= CUT and current[0] < SWITCH):
                current[1:] = [t, current[2] + 1, current[3] + 2 * x]
            else:
                current = [t, t, 1, 2 * x]
                sessions.append(current)
        out += [{"k": k, "window_start": s, "window_end": e + GAP, "n": n, "s": float(v)} for s, e, n, v in sessions]
    return out


def by_window(values: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(values, key=lambda v: (v["k"], v["window_start"]))


def check_union(old: list[dict[str, Any]], new: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Each session once, from the owner of its start, with the values of ``want``."""
    assert all(v["window_start"] < SWITCH for v in old)
    assert all(v["window_start"] >= SWITCH for v in new)
    union = by_window(old + new)
    assert len({(v["k"], v["window_start"]) for v in union}) == len(union)
    assert union == by_window(want)


def arrive(rows: list[Row], seed: int) -> list[Row]:
    """``rows`` in an arrival order up to 0.4 s out of event-time order (less than the out-of-orderness)."""
    rng = random.Random(seed)
    return sorted(rows, key=lambda r: r[1] + rng.uniform(0.0, 0.4))


def steady(k: str, start: float, end: float, step: float = 1.0) -> list[Row]:
    """A reading of ``k`` every ``step`` seconds in ``[start, end)``."""
    n = math.ceil((end - start) / step)
    return [(k, round(start + i * step, 3), i % 7) for i in range(n)]


def cases() -> list[Row]:
    """Sessions before the plan, across it and the switch, bridged across the switch, at it and after it."""
    rows = [
        *steady("early", SWITCH - 50, SWITCH - 44),  # before the plan: the old owner's alone
        *steady("span", SWITCH - 30, SWITCH + 5),  # from before the plan across the switch
        *steady("at", SWITCH - 3, SWITCH + 1, 3.0),  # its second record exactly at the switch
        ("at", SWITCH + 5.0, 1),  # a gap after it: a session of its own (the new owner's)
        *steady("on", SWITCH, SWITCH + 3),  # begins exactly at the switch
        *steady("after", SWITCH + 20, SWITCH + 30),
        # a session ending more than a gap before one that begins after the switch...
        *steady("bridge", SWITCH - 8, SWITCH - 1.9, 1.5),
        *steady("bridge", SWITCH + 2.5, SWITCH + 6),
    ]
    rows.sort(key=lambda r: r[1])
    # ... and the record joining them, 2.2 s out of order (not late: the first session has not fired)
    rows.insert(rows.index(("bridge", SWITCH + 2.5, 0)) + 1, ("bridge", SWITCH + 0.3, 5))
    return rows


def test_each_session_comes_out_once_and_whole_from_the_owner_of_its_start() -> None:
    rows = cases()
    old, new = handover(rows)
    check_union(old, new, unsplit(rows))
    assert by_window(unsplit(rows)) == by_window(reference(rows, cut=False))
    mine = {v["k"]: v for v in old}
    assert mine["span"]["window_start"] == SWITCH - 30  # whole, though the new owner saw only its end
    assert mine["span"]["window_end"] == SWITCH + 4 + GAP
    assert (mine["at"]["window_start"], mine["at"]["n"]) == (SWITCH - 3, 2)
    assert (mine["bridge"]["window_start"], mine["bridge"]["n"]) == (SWITCH - 8, 10)  # both parts and the bridge
    assert sorted((v["k"], v["window_start"] - SWITCH) for v in new) == [("after", 20), ("at", 5), ("on", 0)]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("restart", [None, "old", "new"])
def test_random_sessions_around_the_switch_add_up_to_the_unsplit_window(seed: int, restart: str | None) -> None:
    rng = random.Random(seed)
    rows: list[Row] = []
    for k in ("a", "b", "c", "d", "e"):
        t = SWITCH - 40 + rng.uniform(0, 5)
        while t < SWITCH + 40:
            rows.append((k, round(t, 3), rng.randrange(10)))
            t += rng.choice([0.4, 1.0, 2.5, 3.9, 4.5, 9.0])
    rows = arrive(rows, seed)
    at = next(i for i, r in enumerate(rows) if r[1] >= SWITCH + rng.uniform(-3, 6))
    old, new = handover(
        rows, restart_old=at if restart == "old" else None, restart_new=at if restart == "new" else None
    )
    check_union(old, new, unsplit(rows))
    assert by_window(unsplit(rows)) == by_window(reference(rows, cut=False))


def test_a_session_that_began_before_the_switch_ends_at_the_cut() -> None:
    # "long" never pauses from before the switch to past the cut; "crossing" begins after the switch and crosses it
    long = [r for r in steady("long", SWITCH - 10, CUT + 20) if r[1] != CUT - 1]
    rows = arrive([*long, ("long", CUT + 0.1, 2), *steady("crossing", SWITCH + 5, CUT + 20)], 1)
    rows.insert(rows.index(("long", CUT + 0.1, 2)) + 1, ("long", CUT - 0.2, 1))  # arrives after a record past the cut
    old, new = handover(rows)
    check_union(old, new, reference(rows, cut=True))
    assert [(v["k"], v["window_start"], v["window_end"]) for v in old] == [("long", SWITCH - 10, CUT - 0.2 + GAP)]
    assert sorted((v["k"], v["window_start"]) for v in new) == [("crossing", SWITCH + 5), ("long", CUT)]
    # the unsplit window has the same sessions but "long" in one piece
    fixed = unsplit(rows)
    assert [v for v in fixed if v["k"] == "crossing"] == [v for v in new if v["k"] == "crossing"]
    (whole,) = [v for v in fixed if v["k"] == "long"]
    parts = [v for v in old + new if v["k"] == "long"]
    assert whole["n"] == sum(v["n"] for v in parts)
    assert whole["s"] == sum(v["s"] for v in parts)


def test_the_old_owner_is_done_once_its_sessions_fired_and_no_record_before_the_switch_can_open_one() -> None:
    app = make_app()
    old = build(app, moved_plan(), "big1")

    def at(t: float, k: str = "a") -> list[str]:
        old.process("readings@tiny", payload((k, t, 1)))
        return old.drained()

    assert at(SWITCH - 2) == []
    assert at(SWITCH + 1) == []
    assert at(SWITCH + 3.5) == []
    # past the switch plus gap and lateness, but its session [SWITCH - 2, SWITCH + 7] is still open
    assert at(SWITCH + 7) == []
    assert set(at(SWITCH + 15)) == {"double@tiny", "win@tiny"}  # fired; SWITCH + 15 opened a session of big2's
    assert [(r.value["window_start"], r.value["n"]) for r in old.take().to_hub] == [(SWITCH - 2, 4)]

    quiet = build(app, moved_plan(), "big1")
    for t in (SWITCH - 10, SWITCH + 3):
        quiet.process("readings@tiny", payload(("a", t, 1)))
    assert quiet.drained() == []  # nothing open, but a record before the switch could still open a session
    quiet.process("readings@tiny", payload(("a", SWITCH + 6.5, 1)))
    assert set(quiet.drained()) == {"double@tiny", "win@tiny"}  # the watermark reached SWITCH + gap + lateness
    assert build(app, moved_plan(), "big2").drained() == []  # the new owner's part never ends


def test_a_session_that_never_pauses_keeps_the_old_owner_only_until_the_cut() -> None:
    old = build(make_app(), moved_plan(), "big1")
    done_at = None
    for k, t, x in steady("long", SWITCH - 10, CUT + 30):
        old.process("readings@tiny", payload((k, t, x)))
        if done_at is None and old.drained():
            done_at = old.watermark
    assert done_at == CUT - 1 + GAP + LATENESS + 0.5  # its last record before the cut, gap, lateness
    state = old.windows[0].window
    assert state is not None
    assert state.snapshot()["sessions"] == []  # records past the cut are the new owner's alone
    assert [(r.value["window_start"], r.value["n"]) for r in old.take().to_hub] == [(SWITCH - 10, SESSION_CUT_S + 10)]


def window(
    owns: tuple[float, float] = (-math.inf, math.inf), shares: tuple[Share, ...] = (), *, by_record_time: bool = False
) -> WindowState:
    """The window of ``make_app`` on one side of a handover: ``owns`` (starts) or ``shares`` (keys and starts)."""
    spec = make_app().operators["win"].window
    assert spec is not None
    state = WindowState(spec)
    state.own(*owns, sessions_by_record_time=by_record_time)
    if shares:
        state.own_shares(shares)
    return state


def session(k: str, start: float, last: float, n: int) -> list[Any]:
    return [k, [start, last, [n, 2.0 * n]]]


def test_a_late_record_is_reported_by_the_owner_of_its_time_only() -> None:
    old, new = window((-math.inf, SWITCH)), window((SWITCH, math.inf))
    record = {"k": "a", "x": 1, "x2": 2}
    watermark = SWITCH + 20
    assert old.add(record, SWITCH - 1, watermark) is False
    assert new.add(record, SWITCH - 1, watermark) is True  # the old owner's to report
    assert old.add(record, SWITCH + 1, watermark) is True
    assert new.add(record, SWITCH + 1, watermark) is False
    assert old.pending() == new.pending() == 0


def test_restores_keep_the_sessions_each_side_may_still_emit_or_merge() -> None:
    saved = {
        "sessions": [
            session("a", SWITCH - 5, SWITCH - 1, 2),  # began before the switch
            session("a", SWITCH + 3, SWITCH + 4, 2),  # after it, a gap later: may still merge with the first
            session("a", CUT + 1, CUT + 2, 2),  # after the cut
        ]
    }
    old, new = window((-math.inf, SWITCH)), window((SWITCH, math.inf))
    old.restore(saved)
    new.restore(saved)
    assert [s[0] for _, s in old.snapshot()["sessions"]] == [SWITCH - 5, SWITCH + 3]
    assert [s[0] for _, s in new.snapshot()["sessions"]] == [SWITCH - 5, SWITCH + 3, CUT + 1]
    for side in (old, new):
        assert side.add({"k": "a", "x": 1, "x2": 2}, SWITCH + 1, SWITCH)  # bridges the first two
    assert [(s, e, r["n"]) for _, s, e, r in old.advance(math.inf)] == [(SWITCH - 5, SWITCH + 4 + GAP, 5)]
    assert [(s, r["n"]) for _, s, _, r in new.advance(math.inf)] == [(CUT + 1, 2)]

    stretched = window((-math.inf, SWITCH))  # a checkpoint of the unsplit window, taken past the cut
    stretched.restore({"sessions": [session("a", SWITCH - 5, CUT + 50, 9)]})
    assert stretched.session_part_done_at(SWITCH) == CUT + GAP + LATENESS


def drive(state: WindowState, rows: list[Row]) -> list[tuple[Any, float, float, dict[str, Any]]]:
    """Feed ``rows`` to ``state`` with the pipelines' watermark; return what fired, after a final flush."""
    out = []
    newest = -math.inf
    for k, t, x in rows:
        assert state.add({"k": k, "x": x, "x2": 2 * x}, t, newest - OOO)
        newest = max(newest, t)
        out += state.advance(newest - OOO)
    return out + state.advance(math.inf)


def test_key_shares_hand_over_sessions_by_key_and_start() -> None:
    half = KEY_SPACE // 2
    keys = [f"p{i}" for i in range(12)]
    moving = {k for k in keys if key_hash(k) >= half}
    assert len(moving) < len(keys)
    rows = arrive([r for k in keys for r in steady(k, SWITCH - 30, SWITCH + 20 if k < "p6" else CUT + 10)], 3)
    want = drive(window(), rows)
    old = window(shares=(Share(0, half, -math.inf, math.inf, 0), Share(half, KEY_SPACE, -math.inf, SWITCH, 0)))
    new = window(shares=(Share(half, KEY_SPACE, SWITCH, math.inf, 2),))
    got_old = drive(old, rows)
    got_new = drive(new, [r for r in rows if r[1] >= ARRIVAL])
    assert {k for k, *_ in got_new} <= moving
    assert all(s < SWITCH for k, s, *_ in got_old if k in moving)
    assert all(s >= SWITCH for _, s, *_ in got_new)
    # keys that stay never meet the cut; moving keys' sessions that never pause are cut there
    cut = {k for k in moving if k >= "p6"}
    assert cut
    assert moving - cut
    assert sorted(w for w in got_old + got_new if w[0] not in cut) == sorted(w for w in want if w[0] not in cut)
    for k in cut:
        assert [(s, e) for key, s, e, _ in got_old + got_new if key == k] == [
            (SWITCH - 30, CUT - 1 + GAP),
            (CUT, CUT + 9 + GAP),
        ]
    assert old.session_part_done_at(SWITCH) == SWITCH + GAP + LATENESS  # every session it owned has fired


def test_the_switch_of_a_moved_session_window_comes_a_gap_later() -> None:
    app = make_app()
    stamped = stamp_handovers(make_plan("big2", 4, 4), make_plan("big1", 3, 2), app, T0 + 1.0, delay=5.0)
    at = {h.switch_at for h in stamped.handovers}
    assert at == {switch_time(T0 + 1.0, 5.0 + GAP, [GAP])} == {T0 + 12.0}  # without the gap: T0 + 8
    assert SESSION_CUT_S == DEFAULT_KEEP_S / 2  # a plan lists a handover well past the cut


# -- moves to and from the hub: sessions split by record time ----------------------------------


def test_sessions_split_by_record_time_come_out_in_two_parts_at_the_switch() -> None:
    rows = arrive(
        [
            *steady("early", SWITCH - 30, SWITCH - 20),
            *steady("span", SWITCH - 10, SWITCH + 10),  # open across the switch
            *steady("on", SWITCH, SWITCH + 3),
            *steady("late", SWITCH + 20, SWITCH + 30),
        ],
        5,
    )
    old = window((-math.inf, SWITCH), by_record_time=True)
    new = window((SWITCH, math.inf), by_record_time=True)
    got_old, got_new = drive(old, rows), drive(new, [r for r in rows if r[1] >= ARRIVAL])
    # each side's sessions are those of its records alone: the records before the switch, and at or after it
    assert sorted(got_old) == sorted(drive(window(), [r for r in rows if r[1] < SWITCH]))
    assert sorted(got_new) == sorted(drive(window(), [r for r in rows if r[1] >= SWITCH]))
    assert [(s, e, r["n"]) for k, s, e, r in got_old if k == "span"] == [(SWITCH - 10, SWITCH - 1 + GAP, 10)]
    assert [(s, e, r["n"]) for k, s, e, r in got_new if k == "span"] == [(SWITCH, SWITCH + 9 + GAP, 10)]
    assert sum(r["n"] for *_, r in got_old + got_new) == len(rows)  # each record counted once
    assert sum(r["s"] for *_, r in got_old + got_new) == sum(r["s"] for *_, r in drive(window(), rows))


def test_sessions_split_by_record_time_leave_late_records_restores_and_the_done_at_as_before() -> None:
    old = window((-math.inf, SWITCH), by_record_time=True)
    record = {"k": "a", "x": 1, "x2": 2}
    assert old.add(record, SWITCH - 1, SWITCH + 20) is False  # late, and of its time
    assert old.add(record, SWITCH + 1, SWITCH + 20) is True  # the new owner's record
    saved = {"sessions": [session("a", SWITCH - 5, SWITCH - 1, 2), session("a", SWITCH + 3, SWITCH + 4, 2)]}
    new = window((SWITCH, math.inf), by_record_time=True)
    old.restore(saved)
    new.restore(saved)
    assert [s[0] for _, s in old.snapshot()["sessions"]] == [SWITCH - 5]
    assert [s[0] for _, s in new.snapshot()["sessions"]] == [SWITCH + 3]
    # the old owner's part is done a gap and the lateness past the switch, whatever is open (start rule: later)
    for by_record_time, done in ((True, SWITCH + GAP + LATENESS), (False, SWITCH + 9 + GAP + LATENESS)):
        side = window((-math.inf, SWITCH), by_record_time=by_record_time)
        for k, t, x in steady("span", SWITCH - 10, SWITCH + 10):
            assert side.add({"k": k, "x": x, "x2": 2 * x}, t, -math.inf)
        assert side.session_part_done_at(SWITCH) == done


def hub_plan(source: str, target: str) -> Plan:
    """Tiny's ``double`` and ``win`` move from ``source`` to ``target`` at ``SWITCH`` (the hub is ``cloud``)."""
    epoch = 2 if source == "cloud" else 0
    moves = tuple(Handover(r, source, target, SWITCH, epoch) for r in ("double@tiny", "win@tiny"))
    return make_plan(target, 4, 4, moves)


@pytest.mark.parametrize(
    ("source", "target", "site", "by_record_time"),
    [
        ("big1", "cloud", "big1", True),
        ("cloud", "big2", "big2", True),
        ("big1", "big2", "big1", False),
        ("big1", "big2", "big2", False),
    ],
)
def test_from_plan_splits_sessions_by_record_time_on_moves_to_and_from_the_hub(
    source: str, target: str, site: str, by_record_time: bool
) -> None:
    pipeline = build(make_app(), hub_plan(source, target), site)
    (node,) = pipeline.windows
    assert node.window is not None
    assert node.window.sessions_by_record_time is by_record_time


def test_a_spoke_handing_sessions_to_the_hub_emits_the_records_before_the_switch_and_is_done_a_gap_later() -> None:
    old = build(make_app(), hub_plan("big1", "cloud"), "big1")
    done_at = None
    for row in steady("span", SWITCH - 10, SWITCH + 10):
        old.process("readings@tiny", payload(row))
        if done_at is None and old.drained():
            done_at = old.watermark
    assert done_at == SWITCH + GAP + LATENESS + 0.5  # the old done-at, though the session is still open
    windows = [r.value for r in old.take().to_hub if r.stream == "win"]
    assert [(v["window_start"], v["window_end"], v["n"]) for v in windows] == [(SWITCH - 10, SWITCH - 1 + GAP, 10)]


def test_a_spoke_taking_sessions_from_the_hub_emits_the_records_from_the_switch_on() -> None:
    new = build(make_app(), hub_plan("cloud", "big2"), "big2")
    for row in steady("span", ARRIVAL, SWITCH + 10):
        new.process("readings@tiny", payload(row))
    new.flush()
    windows = [r for r in new.take().to_hub if r.stream == "win"]
    assert [(r.value["window_start"], r.value["n"], r.epoch) for r in windows] == [(SWITCH, 10, 4)]
    assert new.late_count == 0
    assert new.drained() == []
