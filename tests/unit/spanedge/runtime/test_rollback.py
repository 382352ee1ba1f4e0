"""Which windows a new version affects, and resuming them from the previous version's state, in the pure runtime."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from spanedge.app import App
from spanedge.loader import load_app_source
from spanedge.plan import Plan
from spanedge.runtime import OperatorSnapshot, Pipeline, from_plan
from spanedge.runtime.rollback import (
    affected_windows,
    feeding_sources,
    resume_windows,
    rollback_part,
    same_function,
)
from spanedge.testing import site_plan

SITE = "s1"
T0 = 1_700_000_000.0

SOURCE = """
from spanedge import App, agg, sinks
{top}
def to_c(r):
    {body}

def hot(r):
    return r["temp_f"] > 40

app = App("temps")
readings = app.source("readings", time_field="ts")
readings.map(to_c, name="to_c").window(
    name="stats", key="unit", size="10s", scope="local", aggs={{{aggs}}}
).sink(sinks.{sink}, name="stats_out", scope="local")
readings.filter(hot, name="hot").window(
    name="hot_count", key="unit", size="10s", scope="local", aggs={{"n": agg.count()}}
).sink(sinks.memory("hot"), name="hot_out", scope="local")
readings.filter(hot, name="raw_hot").sink(sinks.memory("raw"), name="raw_out", scope="local")
"""
BODY = 'return {**r, "temp_c": (r["temp_f"] - 32) / 1.8}'
AGGS = '"n": agg.count(), "peak": agg.max("temp_c")'


def version(
    *, top: str = "", body: str = BODY, aggs: str = AGGS, sink: str = 'memory("stats")'
) -> tuple[App, Plan, str]:
    """An app version, its plan at one site, and its source."""
    source = SOURCE.format(top=top, body=body, aggs=aggs, sink=sink)
    app = load_app_source(source, "temps.py")
    return app, site_plan(app, {"readings": [SITE]}, "hub"), source


def pipeline(app: App, plan: Plan) -> Pipeline:
    return from_plan(app, plan, SITE, out_of_orderness=0.0, max_future_skew=math.inf)


def reading(i: int, unit: str = "u1") -> bytes:
    return orjson.dumps({"unit": unit, "ts": T0 + i * 0.5, "temp_f": 35.0 + i % 13})


V1 = version()


def test_the_same_code_on_other_lines_affects_no_window() -> None:
    app, _, _ = V1
    moved, _, _ = version(top="\n\n# the same code, further down\n")
    assert same_function(app.operators["to_c"].func, moved.operators["to_c"].func)
    assert affected_windows(pipeline(*V1[:2]), moved) == []


def test_a_changed_window_is_affected_and_only_it() -> None:
    new, _, _ = version(aggs=AGGS + ', "low": agg.min("temp_c")')
    assert affected_windows(pipeline(*V1[:2]), new) == [f"stats@{SITE}"]


def test_a_window_fed_by_a_changed_map_is_affected_though_its_definition_is_the_same() -> None:
    old = pipeline(*V1[:2])
    new, _, _ = version(body='raise ValueError("v2 cannot read " + r["unit"])')
    assert not same_function(V1[0].operators["to_c"].func, new.operators["to_c"].func)
    assert affected_windows(old, new) == [f"stats@{SITE}"]
    assert feeding_sources(old, [f"stats@{SITE}"]) == [f"readings@{SITE}"]


def test_a_changed_sink_after_a_window_affects_no_window() -> None:
    new, _, _ = version(sink="console()")
    assert affected_windows(pipeline(*V1[:2]), new) == []


def test_the_rollback_part_runs_only_the_path_to_the_affected_windows_and_after() -> None:
    app, plan, _ = V1
    part = rollback_part(app, plan, SITE, [f"stats@{SITE}"], out_of_orderness=0.0)
    assert [n.replica for n in part.nodes] == [f"readings@{SITE}", f"to_c@{SITE}", f"stats@{SITE}", f"stats_out@{SITE}"]
    source = part.sources[f"readings@{SITE}"]
    assert [c.replica for c in source.children] == [f"to_c@{SITE}"]
    assert not any(n.to_hub for n in part.nodes)


def stats(out: Any) -> dict[tuple[str, float], dict[str, Any]]:
    """The ``stats`` window results among sink values, by key and start; a result emitted twice fails."""
    got: dict[tuple[str, float], dict[str, Any]] = {}
    for item in out.sinks:
        if item.operator == "stats_out":
            ident = (item.value["unit"], item.value["window_start"])
            assert ident not in got, f"{ident} emitted twice"
            got[ident] = item.value
    return got


def sinks_of(out: Any, name: str) -> list[Any]:
    return [item.value for item in out.sinks if item.operator == name]


def test_a_rolled_back_window_resumes_from_its_state_and_every_result_comes_out_once() -> None:
    app, plan, _ = V1
    before, during, after = range(0, 37), range(37, 95), range(95, 140)  # the upgrade and the rollback mid-window
    reference = pipeline(app, plan)
    for i in [*before, *during, *after]:
        reference.process(f"readings@{SITE}", reading(i))
    want = reference.take()

    v1 = pipeline(app, plan)
    for i in before:
        v1.process(f"readings@{SITE}", reading(i))
    first = v1.take()
    windows = affected = [f"stats@{SITE}"]
    kept = {r: v1.snapshot_operator(r) for r in windows}
    progress = dict(v1.max_event_time)

    broken, broken_plan, _ = version(body='raise ValueError("no")', aggs=AGGS + ', "low": agg.min("temp_c")')
    v2 = pipeline(broken, broken_plan)
    v2.restore(v1.snapshot())
    for i in during:
        v2.process(f"readings@{SITE}", reading(i))
    second = v2.take()
    assert stats(second) == {}
    assert len(second.dlq) == len(during)

    back = pipeline(app, plan)
    data = v2.snapshot()
    data["windows"] = {r: w for r, w in data["windows"].items() if r not in affected}
    back.restore(data)
    part = rollback_part(app, plan, SITE, affected, out_of_orderness=0.0, max_future_skew=math.inf)
    records = [(f"readings@{SITE}", reading(i), 0.0) for i in during]
    assert resume_windows(back, part, kept, progress, records, []) == len(during)
    for i in after:
        back.process(f"readings@{SITE}", reading(i))
    third = back.take()

    assert stats(first) | stats(third) == stats(want)
    assert stats(first).keys().isdisjoint(stats(third))
    # the other branches took the records once, under v2: the replay does not emit them again
    raw = [*sinks_of(first, "raw_out"), *sinks_of(second, "raw_out"), *sinks_of(third, "raw_out")]
    assert raw == sinks_of(want, "raw_out")
    hot = [*sinks_of(first, "hot_out"), *sinks_of(second, "hot_out"), *sinks_of(third, "hot_out")]
    assert hot == sinks_of(want, "hot_out")


def test_a_result_the_new_version_emitted_is_not_emitted_again() -> None:
    app, plan, _ = V1
    v1 = pipeline(app, plan)
    for i in range(0, 5):
        v1.process(f"readings@{SITE}", reading(i))
    kept = {f"stats@{SITE}": v1.snapshot_operator(f"stats@{SITE}")}
    progress = dict(v1.max_event_time)
    v1.take()
    # the new version emitted the window [T0, T0 + 10) of u1 and [T0 + 10, T0 + 20) of u2 (key, start, end)
    emitted = [(f"stats@{SITE}", "u1", T0, T0 + 10.0), (f"stats@{SITE}", "u2", T0 + 10.0, T0 + 20.0)]
    records = [(f"readings@{SITE}", reading(i, unit), 0.0) for i in range(5, 50) for unit in ("u1", "u2")]
    back = pipeline(app, plan)
    back.restore(v1.snapshot())
    resume_windows(
        back, rollback_part(app, plan, SITE, list(kept), out_of_orderness=0.0), kept, progress, records, emitted
    )
    got = stats(back.take())
    assert got.keys() == {("u2", T0), ("u1", T0 + 10.0)}  # the windows that closed, less the two emitted
    assert got[("u2", T0)]["n"] == 15  # from its first record replayed (u2 had none before)


@pytest.mark.parametrize("watched", [True, False])
def test_a_watched_window_reports_what_it_emitted(watched: bool) -> None:
    app, plan, _ = V1
    p = pipeline(app, plan)
    if watched:
        p.watch(frozenset({f"stats@{SITE}"}))
    for i in range(0, 25):
        p.process(f"readings@{SITE}", reading(i))
    want = [(f"stats@{SITE}", "u1", T0, T0 + 10.0)] if watched else []
    assert p.take_fired() == want
    assert p.take_fired() == []


CHAIN = """
from spanedge import App, agg, sinks

app = App("chain")
app.source("readings", time_field="ts").window(
    name="per_2s", key="unit", size="2s", scope="local", aggs={{"n": agg.count()}}
).window(name="per_10s", key="unit", size="10s", scope="local", aggs={{{aggs}}}).sink(
    sinks.memory("totals"), name="totals_out", scope="local"
)
"""


def test_a_changed_window_behind_an_unchanged_one_resumes_with_the_one_before_it_replayed_from_its_state() -> None:
    source = CHAIN.format(aggs='"total": agg.sum("n")')
    app = load_app_source(source, "chain.py")
    plan = site_plan(app, {"readings": [SITE]}, "hub")
    changed = load_app_source(CHAIN.format(aggs='"total": agg.sum("n"), "most": agg.max("n")'), "chain.py")
    before, during, after = range(0, 31), range(31, 77), range(77, 130)  # both mid-window
    reference = pipeline(app, plan)
    for i in [*before, *during, *after]:
        reference.process(f"readings@{SITE}", reading(i))
    want = sinks_of(reference.take(), "totals_out")

    v1 = pipeline(app, plan)
    for i in before:
        v1.process(f"readings@{SITE}", reading(i))
    first = sinks_of(v1.take(), "totals_out")
    assert affected_windows(v1, changed) == [f"per_10s@{SITE}"]
    # the changed window and the one feeding it, as bytes (as the agent keeps them): v1 runs on below
    kept = {
        r: OperatorSnapshot.from_bytes(v1.snapshot_operator(r).to_bytes())
        for r in (f"per_2s@{SITE}", f"per_10s@{SITE}")
    }
    progress = dict(v1.max_event_time)
    for i in during:  # v2: the unchanged window goes on; the changed one emits nothing here
        v1.process(f"readings@{SITE}", reading(i))
    v1.take()
    back = pipeline(app, plan)
    data = v1.snapshot()
    del data["windows"][f"per_10s@{SITE}"]
    back.restore(data)
    part = rollback_part(app, plan, SITE, [f"per_10s@{SITE}"], out_of_orderness=0.0, max_future_skew=math.inf)
    records = [(f"readings@{SITE}", reading(i), 0.0) for i in during]
    resume_windows(back, part, kept, progress, records, [], resumed=[f"per_10s@{SITE}"])
    for i in after:
        back.process(f"readings@{SITE}", reading(i))
    assert first + sinks_of(back.take(), "totals_out") == want
    assert len(want) == 6
