"""The dataflow API: operators, scopes, the DAG."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass

import pytest

from spanedge import App, agg, global_, local, sinks
from spanedge.errors import InvalidDataflow
from spanedge.operators import Kind, WindowKind
from spanedge.runtime.operators import apply
from spanedge.scope import Scope


def test_decorators_keep_functions_callable_and_record_hints() -> None:
    @local(name="parse_it", cost=1e-4, selectivity=0.5)
    def parse(r: dict) -> dict:
        return r

    @global_
    def merge(r: dict) -> dict:
        return r

    assert parse({"a": 1}) == {"a": 1}
    app = App("t")
    s = app.source("raw").map(parse).map(merge)
    ops = app.operators
    assert ops["parse_it"].scope is Scope.LOCAL
    assert ops["parse_it"].cost == 1e-4
    assert ops["parse_it"].selectivity == 0.5
    assert ops["merge"].scope is Scope.GLOBAL
    assert s.name == "merge"


def test_undecorated_function_has_no_scope_and_lambdas_get_readable_names() -> None:
    app = App("t")
    app.source("raw").filter(lambda r: True).map(lambda r: r).sink(sinks.console())
    kinds = {name: op.kind for name, op in app.operators.items()}
    assert kinds == {"raw": Kind.SOURCE, "filter_1": Kind.FILTER, "map_1": Kind.MAP, "sink_console_1": Kind.SINK}
    assert all(op.scope is Scope.ANY for op in app.operators.values())


def test_operators_are_frozen_and_graph_is_a_dag() -> None:
    app = App("t")
    a = app.source("a")
    b = app.source("b")
    a.union(b, name="both").map(lambda r: r, name="m").sink(sinks.memory("out"))
    graph = app.graph()
    assert set(graph.edges) == {("a", "both"), ("b", "both"), ("both", "m"), ("m", "sink_memory_1")}
    with pytest.raises(FrozenInstanceError):
        app.operators["m"].name = "x"  # type: ignore[misc]


def test_record_level_apply() -> None:
    app = App("t")
    s = app.source("raw")
    s.map(lambda r: r * 2, name="double")
    s.filter(lambda r: r > 1, name="big")
    s.flat_map(lambda r: [r, r], name="twice")
    ops = app.operators
    assert list(apply(ops["double"], 2)) == [4]
    assert list(apply(ops["big"], 1)) == []
    assert list(apply(ops["twice"], 3)) == [3, 3]


def test_window_kinds_and_durations() -> None:
    app = App("t")
    s = app.source("raw")
    s.window(key="k", size="10s", aggs={"n": agg.count()}, name="tumble")
    s.window(key="k", size="1m", slide="15s", aggs={"n": agg.count()}, name="slide")
    s.window(key="k", gap=2.5, aggs={"n": agg.count()}, name="session")
    ops = app.operators
    assert ops["tumble"].window is not None
    assert ops["tumble"].window.kind is WindowKind.TUMBLING
    assert ops["slide"].window is not None
    assert (ops["slide"].window.kind, ops["slide"].window.size, ops["slide"].window.slide) == (
        WindowKind.SLIDING,
        60.0,
        15.0,
    )
    assert ops["session"].window is not None
    assert ops["session"].window.kind is WindowKind.SESSION


def test_window_output_rate_is_bounded_by_keys() -> None:
    app = App("t")
    app.source("raw").window(key="k", size="10s", aggs={"n": agg.count()}, keys=5, name="w")
    assert app.operators["w"].output_rate(1000.0) == pytest.approx(0.5)


def test_schema_from_dataclass_and_ddl() -> None:
    @dataclass
    class R:
        unit: str
        temp: float
        n: int

    app = App("t")
    s = app.source("raw").map(lambda r: r, name="m").schema(R)
    assert app.operators["m"].schema == "unit STRING, temp DOUBLE, n BIGINT"
    s.map(lambda r: r, name="m2").schema("a STRING, b DOUBLE")
    assert app.operators["m2"].schema == "a STRING, b DOUBLE"


def test_custom_aggregation() -> None:
    spread = agg.Aggregator(
        "spread",
        zero=lambda: [None, None],
        add=lambda acc, v: [v if acc[0] is None else min(acc[0], v), v if acc[1] is None else max(acc[1], v)],
        merge=lambda a, b: [min(a[0], b[0]), max(a[1], b[1])],
        result=lambda acc: acc[1] - acc[0],
    )
    app = App("t")
    app.source("raw").window(key="k", size=10, aggs={"spread": agg.custom("temp", spread)}, name="w")
    window = app.operators["w"].window
    assert window is not None
    (out, a), *_ = window.aggs
    assert (out, a.func, a.field) == ("spread", "spread", "temp")
    assert a.custom is spread


def test_every_operator_takes_placement_hints_without_a_scope() -> None:
    app = App("hints")
    src = app.source("s", time_field="ts")
    kept = src.filter(lambda r: r["v"] > 0, name="pos", selectivity=0.01, cost=1e-4)
    mapped = kept.map(lambda r: r, name="ident", cost=3e-5)
    flat = mapped.flat_map(lambda r: [r, r], name="twice", selectivity=2.0)
    merged = flat.union(src, name="both", cost=2e-6)
    merged.window(key="k", aggs={"n": agg.count()}, size="10s", name="w", cost=1e-5, selectivity=0.5)
    ops = app.operators
    assert (ops["pos"].selectivity, ops["pos"].cost, ops["pos"].scope) == (0.01, 1e-4, Scope.ANY)
    assert (ops["ident"].cost, ops["ident"].selectivity) == (3e-5, 1.0)
    assert ops["twice"].selectivity == 2.0
    assert ops["both"].cost == 2e-6
    assert (ops["w"].cost, ops["w"].selectivity) == (1e-5, 0.5)
    # a window emits at most selectivity x its input, and at most `keys` results per period
    assert ops["w"].output_rate(10.0) == 5.0
    assert ops["w"].output_rate(1000.0) == 10.0


def test_an_explicit_hint_wins_over_the_decorator() -> None:
    @local(selectivity=0.5, cost=1e-3)
    def keep(r: dict[str, float]) -> bool:
        return True

    app = App("hints2")
    app.source("s").filter(keep, selectivity=0.1)
    op = app.operators["keep"]
    assert (op.selectivity, op.cost, op.scope) == (0.1, 1e-3, Scope.LOCAL)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "0.1", True])
def test_a_bad_hint_names_the_operator_and_the_value(bad: object) -> None:
    app = App("hints3")
    with pytest.raises(InvalidDataflow, match=r"filter 'f' \(test_app.py:\d+\): selectivity must be a finite number"):
        app.source("s").filter(lambda r: True, name="f", selectivity=bad)  # type: ignore[arg-type]
