"""Windows, watermarks, lateness and snapshots of the edge runtime (no broker)."""

from __future__ import annotations

import math
import tracemalloc

import orjson
import pytest

from spanedge import App, agg
from spanedge.aggregations import Aggregator
from spanedge.runtime import edge_part


def _app(**window: object) -> App:
    app = App("w")
    win = app.source("s", time_field="t").window(name="win", key="k", **window)  # type: ignore[arg-type]
    win.transform(lambda df: df, name="at_hub")  # the window's output crosses to the hub
    return app


def _run(app: App, records: list[dict], flush: bool = True, **options: object):
    pipe = edge_part(app, "a", clock=lambda: 1e9, **options)  # type: ignore[arg-type]
    for r in records:
        pipe.process_value("s@a", r)
    if flush:
        pipe.flush()
    return pipe, pipe.take()


def test_tumbling_counts_sums_and_types() -> None:
    app = _app(
        size="10s",
        aggs={"n": agg.count(), "s": agg.sum("x"), "m": agg.mean("x"), "lo": agg.min("x"), "hi": agg.max("x")},
    )
    records = [{"k": "a", "t": t, "x": x} for t, x in [(0, 1), (3, 2), (9.99, 3), (10, 4), (25, 5)]]
    _, out = _run(app, records)
    values = [r.value for r in out.to_hub]
    assert values == [
        {"k": "a", "window_start": 0.0, "window_end": 10.0, "n": 3, "s": 6.0, "m": 2.0, "lo": 1.0, "hi": 3.0},
        {"k": "a", "window_start": 10.0, "window_end": 20.0, "n": 1, "s": 4.0, "m": 4.0, "lo": 4.0, "hi": 4.0},
        {"k": "a", "window_start": 20.0, "window_end": 30.0, "n": 1, "s": 5.0, "m": 5.0, "lo": 5.0, "hi": 5.0},
    ]
    assert isinstance(values[0]["n"], int)
    assert isinstance(values[0]["s"], float)
    assert [r.event_time for r in out.to_hub] == [pytest.approx(9.999), pytest.approx(19.999), pytest.approx(29.999)]
    assert [r.key for r in out.to_hub] == ["a", "a", "a"]


def test_windows_fire_on_watermark_without_flush() -> None:
    app = _app(size=10, aggs={"n": agg.count()})
    pipe, out = _run(app, [{"k": "a", "t": 1}, {"k": "b", "t": 2}, {"k": "a", "t": 12}], flush=False)
    assert [(r.value["k"], r.value["n"]) for r in out.to_hub] == [("a", 1), ("b", 1)]
    assert pipe.watermark == 12
    assert pipe.windows[0].window is not None
    assert pipe.windows[0].window.pending() == 1


def test_out_of_orderness_holds_the_watermark_back() -> None:
    app = _app(size=10, aggs={"n": agg.count()})
    _, out = _run(app, [{"k": "a", "t": 9}, {"k": "a", "t": 11}, {"k": "a", "t": 8}], flush=False, out_of_orderness=2.0)
    assert out.to_hub == []
    assert out.late == []
    _, out = _run(app, [{"k": "a", "t": 9}, {"k": "a", "t": 11}, {"k": "a", "t": 8}], flush=True, out_of_orderness=2.0)
    assert out.to_hub[0].value["n"] == 2


def test_sliding_windows_overlap() -> None:
    app = _app(size="10s", slide="5s", aggs={"n": agg.count()})
    _, out = _run(app, [{"k": "a", "t": 7}, {"k": "a", "t": 12}])
    got = [(r.value["window_start"], r.value["window_end"], r.value["n"]) for r in out.to_hub]
    assert got == [(0.0, 10.0, 1), (5.0, 15.0, 2), (10.0, 20.0, 1)]


def test_session_windows_merge_and_split_per_key() -> None:
    app = _app(gap="5s", aggs={"n": agg.count(), "hi": agg.max("x")})
    records = [
        {"k": "a", "t": 0, "x": 1},
        {"k": "a", "t": 3, "x": 7},
        {"k": "b", "t": 4, "x": 2},
        {"k": "a", "t": 20, "x": 3},
        {"k": "a", "t": 1, "x": 9},  # within the first session, before it fired
    ]
    _, out = _run(app, records, flush=False)
    fired = [
        (r.value["k"], r.value["window_start"], r.value["window_end"], r.value["n"], r.value["hi"]) for r in out.to_hub
    ]
    assert fired == [("a", 0.0, 8.0, 2, 7.0), ("b", 4.0, 9.0, 1, 2.0)]
    assert len(out.late) == 1  # t=1 arrived after the session [0, 8) fired
    _, out = _run(app, [*records[:3], {"k": "a", "t": 6, "x": 0}])
    assert [(r.value["k"], r.value["window_start"], r.value["window_end"], r.value["n"]) for r in out.to_hub] == [
        ("b", 4.0, 9.0, 1),
        ("a", 0.0, 11.0, 3),
    ]


def test_allowed_lateness_accepts_then_late_side_output() -> None:
    app = _app(size=10, aggs={"n": agg.count()}, allowed_lateness="5s")
    records = [{"k": "a", "t": 1}, {"k": "a", "t": 12}, {"k": "a", "t": 4}, {"k": "a", "t": 16}, {"k": "a", "t": 2}]
    pipe, out = _run(app, records, flush=False)
    assert [r.value["n"] for r in out.to_hub] == [2]  # t=4 was within the lateness, t=2 after the firing
    assert pipe.late_count == 1
    assert out.late[0].operator == "win"
    assert "late" in out.late[0].reason
    assert '"t":2' in out.late[0].payload


def test_custom_aggregation_and_merge_in_sessions() -> None:
    distinct = Aggregator(
        "distinct",
        zero=list,
        add=lambda acc, v: sorted(set(acc) | {v}),
        merge=lambda a, b: sorted(set(a) | set(b)),
        result=len,
    )
    app = _app(gap=5, aggs={"d": agg.custom("x", distinct)})
    records = [{"k": "a", "t": 0, "x": "p"}, {"k": "a", "t": 9, "x": "q"}, {"k": "a", "t": 4.5, "x": "p"}]
    _, out = _run(app, records, out_of_orderness=5.0)
    assert [r.value["d"] for r in out.to_hub] == [2]  # t=4.5 bridged the two sessions
    _, out = _run(app, records)
    assert [r.value["d"] for r in out.to_hub] == [1, 2]  # [0, 5) fired at watermark 9; 4.5 joined 9's session


def test_missing_key_or_field_goes_to_dlq() -> None:
    app = _app(size=10, aggs={"m": agg.mean("x")})
    pipe, out = _run(
        app, [{"t": 1, "x": 1}, {"k": "a", "t": 1}, {"k": "a", "t": 1, "x": "hot"}, {"k": "a", "t": 2, "x": 2}]
    )
    assert [d.reason for d in out.dlq] == [
        "window win: record has no key field 'k'",
        "window win: record has no field 'x' (aggregation 'm')",
        "window win: field 'x' must be a number, got 'hot'",
    ]
    assert [r.value["m"] for r in out.to_hub] == [2.0]
    assert pipe.dlq_count == 3


@pytest.mark.parametrize("window", [{"size": 10}, {"size": 10, "slide": 5}, {"gap": 4}])
def test_snapshot_restore_gives_the_same_results(window: dict) -> None:
    app = _app(aggs={"n": agg.count(), "m": agg.mean("x")}, **window)
    records = [{"k": f"k{i % 3}", "t": i * 1.7 + (i % 4), "x": i} for i in range(60)]
    _, whole = _run(app, records)
    first = edge_part(app, "a", clock=lambda: 1e9)
    for r in records[:25]:
        first.process_value("s@a", r)
    early = first.take().to_hub
    import orjson

    saved = orjson.loads(orjson.dumps(first.snapshot()))
    second = edge_part(app, "a", clock=lambda: 1e9)
    second.restore(saved)
    for r in records[25:]:
        second.process_value("s@a", r)
    second.flush()
    rest = second.take()
    assert [r.value for r in early + rest.to_hub] == [r.value for r in whole.to_hub]
    assert len(rest.late) == len(whole.late)


def test_far_future_event_is_dead_lettered_and_does_not_move_the_watermark() -> None:
    app = _app(size=10, aggs={"n": agg.count()})
    pipe = edge_part(app, "a", clock=lambda: 1000.0, max_future_skew=60.0)
    pipe.process_value("s@a", {"k": "a", "t": 995})
    pipe.process_value("s@a", {"k": "a", "t": 1000.0 + 86400})
    out = pipe.take()
    assert out.to_hub == []
    assert pipe.watermark == 995
    assert "ahead of the agent clock" in out.dlq[0].reason


def test_bad_json_missing_time_and_raising_function() -> None:
    app = App("f")

    def boom(r: dict) -> dict:
        return {"v": 1 / r["x"]}

    app.source("s", time_field="t").map(boom).sink(__import__("spanedge").sinks.memory("m"), name="out")
    pipe = edge_part(app, "a", clock=lambda: 1e9)
    for raw in [b"{nope", b'{"x": 1}', b'{"x": 1, "t": "noon"}', b'{"x": 0, "t": 1}', b'{"x": 2, "t": 1}']:
        pipe.process("s@a", raw)
    out = pipe.take()
    reasons = [d.reason for d in out.dlq]
    assert reasons[0].startswith("not valid JSON")
    assert "'t' is missing" in reasons[1]
    assert "not a number ('noon')" in reasons[2]
    assert reasons[3].startswith("boom (")
    assert "ZeroDivisionError" in reasons[3]
    assert out.dlq[3].operator == "boom"
    assert out.dlq[3].payload == '{"x": 0, "t": 1}'
    assert [s.value for s in out.sinks] == [{"v": 0.5}]


def test_arrival_time_when_no_time_field() -> None:
    app = App("arr")
    app.source("s").window(name="win", key="k", size=10, aggs={"n": agg.count()}).transform(lambda df: df, name="hub")
    pipe = edge_part(app, "a", clock=lambda: 1e9)
    pipe.process_value("s@a", {"k": "a"}, arrival=5.0)
    pipe.process_value("s@a", {"k": "a"}, arrival=15.0)
    assert [r.value["window_start"] for r in pipe.take().to_hub] == [0.0]
    assert math.isclose(pipe.watermark, 15.0)


def test_a_failing_custom_aggregation_dead_letters_and_the_rest_continues() -> None:
    picky = Aggregator(
        "picky",
        zero=lambda: 0,
        add=lambda acc, v: acc + (1 if v == "ok" else 1 // 0),
        merge=lambda a, b: a + b,
        result=lambda acc: acc if acc < 2 else acc // 0,
    )
    app = _app(size=10, aggs={"p": agg.custom("x", picky)})
    records = [{"k": "a", "t": 1, "x": "ok"}, {"k": "a", "t": 2, "x": "bad"}, {"k": "b", "t": 3, "x": "ok"}]
    records += [{"k": "b", "t": 4, "x": "ok"}]
    pipe, out = _run(app, records)
    assert [(r.value["k"], r.value["p"]) for r in out.to_hub] == [("a", 1)]
    assert "ZeroDivisionError" in out.dlq[0].reason
    assert '"x":"bad"' in out.dlq[0].payload
    assert "window [0.0, 10.0) of key 'b'" in out.dlq[1].reason
    assert pipe.dlq_count == 2


def test_sliding_starts_do_not_drift() -> None:
    app = _app(size=0.3, slide=0.1, aggs={"n": agg.count()})
    _, out = _run(app, [{"k": "a", "t": 1000.25}])
    assert [round(r.value["window_start"], 9) for r in out.to_hub] == [1000.0, 1000.1, 1000.2]


def test_hub_records_hold_right_sized_bytes() -> None:
    """Results waiting for a commit keep only their JSON, not orjson's 4 KiB output buffer each."""
    app = _app(size=1, aggs={"n": agg.count()})
    pipe = edge_part(app, "a", clock=lambda: 1e9)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for t in range(1000):
            pipe.process_value("s@a", {"k": "a", "t": t})
        out = pipe.take()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(out.to_hub) == 999
    assert all(r.encoded == orjson.dumps(r.value) for r in out.to_hub)
    assert held < 999 * 1024  # records, values and encodings: about 430 bytes each
