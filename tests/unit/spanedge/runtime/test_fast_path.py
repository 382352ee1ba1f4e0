"""The runtime's short paths give exactly what its general paths give (no broker)."""

from __future__ import annotations

import math
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanedge import App, agg, sinks
from spanedge.aggregations import Aggregator
from spanedge.runtime import Pipeline, edge_part
from spanedge.runtime.windows import Aggregations, FieldError

PRODUCT = Aggregator("product", lambda: 1.0, lambda acc, v: acc * v, lambda a, b: a * b, lambda acc: acc)
AGGS = {
    "n": agg.count(),
    "s": agg.sum("x"),
    "m": agg.mean("x"),
    "lo": agg.min("x"),
    "hi": agg.max("x"),
    "p": agg.custom("x", PRODUCT),
}

keys = st.sampled_from(["a", "b", 1, 2.5, True, None, ["list"]])
operands = st.one_of(st.integers(-5, 5), st.floats(-10, 10), st.sampled_from(["7", True, None, math.nan]))


@st.composite
def records(draw: st.DrawFn) -> Any:
    """A sensor record: mostly well formed, sometimes without a field, of a wrong type or not an object."""
    if draw(st.integers(0, 20)) == 0:
        return draw(st.sampled_from([[1, 2], "text", 3]))
    record: dict[str, Any] = {"t": draw(st.floats(0, 60).map(lambda t: round(t, 2)))}
    if draw(st.integers(0, 15)):
        record["k"] = draw(keys)
    if draw(st.integers(0, 15)):
        record["x"] = draw(operands)
    return record


def _pipeline(lateness: float, out_of_orderness: float, general: bool) -> Pipeline:
    app = App("w")
    win = app.source("s", time_field="t").window(name="win", key="k", size="10s", aggs=AGGS, allowed_lateness=lateness)
    win.transform(lambda df: df, name="at_hub")
    pipe = edge_part(app, "a", clock=lambda: 1e9, out_of_orderness=out_of_orderness)
    if general:
        window = pipe.windows[0].window
        assert window is not None
        window.whole_tumbling = False  # through WindowState.add's general path
    return pipe


def _outcome(pipe: Pipeline, messages: list[Any]) -> tuple[Any, ...]:
    half = len(messages) // 2
    for m in messages[:half]:
        pipe.process("s@a", orjson.dumps(m))
    snapshot = orjson.dumps(pipe.snapshot())
    for m in messages[half:]:
        pipe.process_value("s@a", m)
    pipe.flush()
    out = pipe.take()
    return (
        [(r.stream, r.event_time, r.key, orjson.dumps(r.value), r.encoded) for r in out.to_hub],
        [(d.reason, d.payload) for d in out.dlq],
        [(d.reason, d.payload) for d in out.late],
        snapshot,
        pipe.metrics(),
        pipe.watermark,
    )


@settings(max_examples=150, deadline=None)
@given(
    messages=st.lists(records(), max_size=40),
    lateness=st.sampled_from([0.0, 3.0]),
    out_of_orderness=st.sampled_from([0.0, 5.0]),
)
def test_the_tumbling_short_path_gives_what_the_general_path_gives(
    messages: list[Any], lateness: float, out_of_orderness: float
) -> None:
    fast = _outcome(_pipeline(lateness, out_of_orderness, general=False), messages)
    general = _outcome(_pipeline(lateness, out_of_orderness, general=True), messages)
    assert fast == general


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.fixed_dictionaries({}, optional={"x": operands}), min_size=1, max_size=10))
def test_a_compiled_fold_is_values_then_add(rows: list[dict[str, Any]]) -> None:
    aggs = Aggregations(tuple(AGGS.items()))
    folded, added = aggs.zero(), aggs.zero()
    for row in rows:
        try:
            values = aggs.values(row)
        except FieldError as exc:
            with pytest.raises(FieldError, match=re.escape(str(exc))):
                aggs.fold(folded, row)
            assert orjson.dumps(folded) == orjson.dumps(added)  # refused before any accumulator changed
            continue
        aggs.add(added, values)
        aggs.fold(folded, row)
        assert orjson.dumps(folded, default=str) == orjson.dumps(added, default=str)


def test_a_record_without_a_field_opens_no_window() -> None:
    app = App("w")
    app.source("s", time_field="t").window(name="win", key="k", size="10s", aggs={"hi": agg.max("x")}).transform(
        lambda df: df, name="at_hub"
    )
    pipe = edge_part(app, "a", clock=lambda: 1e9)
    pipe.process("s@a", b'{"k": "a", "t": 1}')  # no x: a dead letter, and window [0, 10) stays unopened
    pipe.process("s@a", b'{"k": "b", "t": 12, "x": 1}')
    pipe.process("s@a", b'{"k": "a", "t": 5, "x": 2}')  # behind the watermark, but its window never fired
    pipe.flush()
    out = pipe.take()
    assert [r.value for r in out.to_hub] == [
        {"k": "a", "window_start": 0.0, "window_end": 10.0, "hi": 2.0},
        {"k": "b", "window_start": 10.0, "window_end": 20.0, "hi": 1.0},
    ]
    assert [d.reason for d in out.dlq] == ["window win: record has no field 'x' (aggregation 'hi')"]
    assert out.late == []


def test_a_filter_whose_answer_cannot_be_tested_and_a_flat_map_that_fails_midway_are_dead_letters() -> None:
    class Undecided:
        def __bool__(self) -> bool:
            raise ValueError("neither")

    def pieces(r: dict[str, Any]) -> Any:
        yield r
        raise RuntimeError("broke after one")

    app = App("w")
    src = app.source("s", time_field="t")
    src.filter(lambda r: Undecided() if r["k"] == "u" else True, name="pick").sink(sinks.memory("a"), name="picked")
    src.flat_map(pieces, name="split").sink(sinks.memory("b"), name="split_out")
    pipe = edge_part(app, "a", clock=lambda: 1e9)
    pipe.process("s@a", b'{"k": "u", "t": 1}')
    out = pipe.take()
    assert sorted(d.reason.split(" (")[0] for d in out.dlq) == ["pick", "split"]
    assert "ValueError: neither" in out.dlq[0].reason
    assert "RuntimeError: broke after one" in out.dlq[1].reason
    assert out.sinks == []  # the flat_map's first output is not served: the record failed as a whole
    assert pipe.metrics()["pick@a"] == {"in": 1, "out": 0}


def test_a_fold_over_no_aggregation_does_nothing() -> None:
    accs: list[Any] = []
    Aggregations(()).fold(accs, {"x": 1})
    assert accs == []
