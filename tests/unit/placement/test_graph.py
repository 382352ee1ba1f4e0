"""The networkx graphs of the placement: the operator and replica DAGs and the fastest paths between sites."""

from __future__ import annotations

import math

import pytest

from placement.graph import (
    breadth_first,
    fastest_paths,
    operator_dag,
    operators_in_order,
    reachable,
    replica_dag,
    site_graph,
)
from placement.latency import LinkInfo
from placement.synthetic import synthetic
from spanedge.loader import load_app
from tests.conftest import EXAMPLES


@pytest.mark.parametrize("example", ["cold_chain", "smart_farm", "traffic"])
def test_the_operator_dag_orders_the_operators_as_the_core_does(example: str) -> None:
    app = load_app(EXAMPLES / example / "app.py")
    dag = operator_dag(app)
    assert [op.name for op in operators_in_order(dag)] == list(app.graph().order)
    assert sorted(dag.edges) == sorted(app.graph().edges)
    assert all(dag.nodes[name]["op"] is op for name, op in app.operators.items())


@pytest.mark.parametrize("seed", range(5))
def test_the_operator_order_of_synthetic_apps_is_the_core_s(seed: int) -> None:
    app, _ = synthetic(40, 12, seed=seed)
    assert [op.name for op in operators_in_order(operator_dag(app))] == list(app.graph().order)


def test_reachable_walks_only_through_the_nodes_it_may_and_breadth_first_goes_nearest_first() -> None:
    dag = replica_dag({"s": (), "a": ("s",), "b": ("a",), "c": ("a",), "d": ("b", "c"), "e": ("d",)})
    assert reachable(dag, "a", lambda n: True) == {"b", "c", "d", "e"}
    assert reachable(dag, "a", lambda n: n != "b") == {"c", "d", "e"}
    assert reachable(dag, "a", lambda n: n not in ("b", "c")) == set()
    assert reachable(dag, "d", lambda n: n != "s", upstream=True) == {"a", "b", "c"}
    assert list(breadth_first(dag, "a")) == ["b", "c", "d", "e"]


def test_of_equally_fast_and_cheap_paths_the_widest_wins() -> None:
    links = {
        ("a", "b"): LinkInfo(10, 5),
        ("b", "d"): LinkInfo(5, 100),
        ("a", "c"): LinkInfo(10, 50),
        ("c", "d"): LinkInfo(5, 20),
        ("d", "e"): LinkInfo(0, 100, 0),
    }
    paths = fastest_paths(site_graph("abcdef", links), "a")
    assert paths["d"] == (15.0, 20.0, 2.0)
    assert paths["e"] == (15.0, 20.0, 2.0)
    assert "f" not in paths  # no link reaches it
    assert "a" not in paths


def test_a_link_of_infinite_latency_carries_no_path() -> None:
    graph = site_graph("abc", {("a", "b"): LinkInfo(math.inf, 10), ("b", "c"): LinkInfo(1, 10)})
    assert fastest_paths(graph, "a") == {}
    assert fastest_paths(graph, "b") == {"c": (1.0, 10.0, 1.0)}
