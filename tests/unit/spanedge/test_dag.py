"""The operator DAG: order, neighbours, reach, and the messages of a broken dataflow."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spanedge import App, sinks
from spanedge.dag import OperatorGraph, build_graph, sources_of
from spanedge.errors import InvalidDataflow
from spanedge.operators import Kind, Operator

ROOT = Path(__file__).resolve().parents[3]


def _diamond() -> App:
    """``a`` and ``b`` feed ``both``, which feeds ``m`` and ``n``; ``m`` feeds the sink."""
    app = App("t")
    both = app.source("a").union(app.source("b"), name="both")
    both.map(lambda r: r, name="m").sink(sinks.memory("out"), name="out")
    both.filter(lambda r: True, name="n")
    return app


def test_order_edges_and_neighbours() -> None:
    graph = _diamond().graph()
    assert graph.order == ("a", "b", "both", "m", "n", "out")
    assert list(graph) == list(graph.order)
    assert graph.edges == (("a", "both"), ("b", "both"), ("both", "m"), ("both", "n"), ("m", "out"))
    assert graph.predecessors("both") == ("a", "b")
    assert graph.successors("both") == ("m", "n")
    assert graph.successors("out") == ()
    assert graph.op("m").kind is Kind.MAP
    assert "m" in graph
    assert "nope" not in graph
    assert len(graph) == 6
    assert repr(graph) == "OperatorGraph('t', 6 operators, 5 edges)"


def test_ancestors_descendants_and_sources() -> None:
    graph = _diamond().graph()
    assert graph.ancestors("out") == {"a", "b", "both", "m"}
    assert graph.ancestors("a") == frozenset()
    assert graph.descendants("a") == {"both", "m", "n", "out"}
    assert graph.descendants("n") == frozenset()
    assert sources_of(graph, "n") == {"a", "b"}
    assert sources_of(graph, "a") == {"a"}


def test_an_unknown_operator_names_the_app_and_its_operators() -> None:
    graph = _diamond().graph()
    with pytest.raises(KeyError, match=r"app 't' has no operator 'x' \(it has: a, b, both, m, n, out\)"):
        graph.op("x")
    with pytest.raises(KeyError, match="has no operator 'x'"):
        graph.ancestors("x")


def test_a_cycle_names_its_operators_and_their_lines() -> None:
    ops = {
        "raw": Operator("raw", Kind.SOURCE, location="app.py:3"),
        "a": Operator("a", Kind.MAP, ("raw", "b"), location="app.py:4"),
        "b": Operator("b", Kind.MAP, ("a",), location="app.py:5"),
    }
    with pytest.raises(InvalidDataflow) as info:
        build_graph("t", ops)
    assert str(info.value) == (
        "the dataflow of app 't' has a cycle: 'a' (app.py:4) -> 'b' (app.py:5) -> 'a' (app.py:4); "
        "streams must flow from sources to sinks: make one of these operators read from another stream"
    )


def test_reading_an_unknown_operator_says_which() -> None:
    ops = {"m": Operator("m", Kind.MAP, ("raw",), location="app.py:7")}
    with pytest.raises(InvalidDataflow, match=r"operator 'm' \(app.py:7\) reads from unknown operator 'raw'; add"):
        OperatorGraph("t", ops)


def test_a_sink_feeding_an_operator_is_rejected() -> None:
    ops = {
        "raw": Operator("raw", Kind.SOURCE, location="app.py:3"),
        "out": Operator("out", Kind.SINK, ("raw",), location="app.py:4"),
        "m": Operator("m", Kind.MAP, ("out",), location="app.py:5"),
    }
    with pytest.raises(InvalidDataflow, match=r"sink 'out' \(app.py:4\) cannot feed other operators"):
        build_graph("t", ops)


def test_an_app_without_source_is_rejected() -> None:
    with pytest.raises(InvalidDataflow, match="app 't' has no source; add one with app.source"):
        App("t").graph()


@st.composite
def dags(draw: st.DrawFn) -> dict[str, Operator]:
    """Operators forming a DAG, added in any order, some reading one stream twice."""
    n = draw(st.integers(1, 12))
    names = [f"op{i}" for i in range(n)]
    ops = []
    for i, name in enumerate(names):
        inputs = draw(st.lists(st.sampled_from(names[:i]), max_size=3)) if i else []
        ops.append(Operator(name, Kind.MAP if inputs else Kind.SOURCE, tuple(inputs)))
    return {op.name: op for op in draw(st.permutations(ops))}


def _reach(ops: dict[str, Operator], name: str) -> set[str]:
    """Everything ``name`` reads from, by recursion over the inputs."""
    return {up for u in ops[name].inputs for up in {u} | _reach(ops, u)}


@given(dags())
def test_the_order_puts_every_operator_after_its_inputs(ops: dict[str, Operator]) -> None:
    graph = OperatorGraph("t", ops)
    assert sorted(graph.order) == sorted(ops)
    position = {name: i for i, name in enumerate(graph.order)}
    assert all(position[u] < position[v] for u, v in graph.edges)
    assert set(graph.edges) == {(u, op.name) for op in ops.values() for u in op.inputs}
    assert len(graph.edges) == len(set(graph.edges))


@given(dags())
def test_ancestors_and_descendants_mirror_each_other(ops: dict[str, Operator]) -> None:
    graph = OperatorGraph("t", ops)
    for name in ops:
        assert graph.ancestors(name) == _reach(ops, name)
        assert graph.descendants(name) == {other for other in ops if name in _reach(ops, other)}


@given(dags(), st.data())
def test_a_loop_is_reported_as_a_cycle_of_real_edges(ops: dict[str, Operator], data: st.DataObject) -> None:
    ahead = [(name, anc) for name in ops for anc in OperatorGraph("t", ops).ancestors(name)]
    if not ahead:  # no path to close: a self-loop makes the cycle
        name = data.draw(st.sampled_from(sorted(ops)))
        ahead = [(name, name)]
    name, anc = data.draw(st.sampled_from(ahead))
    looped = dict(ops)
    looped[anc] = Operator(anc, Kind.MAP, (*ops[anc].inputs, name), location="app.py:9")
    with pytest.raises(InvalidDataflow, match="has a cycle: ") as info:
        OperatorGraph("t", looped)
    cycle = str(info.value).split("has a cycle: ")[1].split(";")[0].split(" -> ")
    names = [part.split("'")[1] for part in cycle]
    assert names[0] == names[-1]
    assert all(u in looped[v].inputs for u, v in itertools.pairwise(names))


def test_the_light_core_runs_an_app_without_networkx() -> None:
    code = """
import sys
import edge_agent.main, spanedge, spanedge.testing
from spanedge.app import App
from spanedge.loader import load_app
from spanedge.sites import load_sites
from spanedge.testing import local_plan, run_edge

app = load_app("examples/cold_chain/app.py")
assert isinstance(app, App)
result = run_edge(app, {"readings": [{"unit": "u0", "ts": 1000.0 + i, "temp_f": 40.0} for i in range(20)]})
plan = local_plan(app, load_sites("examples/cold_chain/sites.yaml"))
print(len(result.to_hub["unit_stats"]), len(plan.assignments), "networkx" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    windows, assignments, loaded = out.stdout.split()
    assert int(windows) > 0
    assert int(assignments) > 0
    assert loaded == "False"
