"""Hub operators' records in and out from the counts their Spark queries observe, and how they are shown."""

from __future__ import annotations

from types import SimpleNamespace

from hub.api.metrics import render_metrics
from hub.engine.compile import Counted
from hub.engine.queries import operator_rates


def out_of(operator: str, *replicas: str) -> Counted:
    return Counted(operator, "out", tuple(sorted(replicas)))


def into(operator: str, *replicas: str) -> Counted:
    return Counted(operator, "in", tuple(sorted(replicas)))


def test_one_count_can_stand_for_an_output_and_the_next_input() -> None:
    counted = {
        "scale.in#0": [into("scale", "scale")],
        "scale.out#1": [out_of("scale", "scale"), into("keep", "keep")],
        "keep.out#2": [out_of("keep", "keep"), into("to_f", "to_f"), out_of("to_f", "to_f")],
    }
    counts = {"scale.in#0": (40, 8.0), "scale.out#1": (40, 8.0), "keep.out#2": (10, 2.0)}
    assert operator_rates([(counted, counts)]) == {
        "scale": {"in": 40, "in_rate": 8.0, "out": 40, "out_rate": 8.0},
        "keep": {"in": 40, "in_rate": 8.0, "out": 10, "out_rate": 2.0},
        "to_f": {"in": 10, "in_rate": 2.0, "out": 10, "out_rate": 2.0},
    }


def test_an_operator_in_several_queries_is_counted_once_from_the_query_furthest_ahead() -> None:
    first = {"a": [into("scale", "scale")], "b": [out_of("scale", "scale")]}
    second = {"x": [into("scale", "scale")], "y": [out_of("scale", "scale")]}
    behind = {"a": (30, 9.0), "b": (30, 9.0)}
    ahead = {"x": (40, 4.0), "y": (40, 4.0)}
    figures = operator_rates([(first, behind), (second, ahead)])
    assert figures == {"scale": {"in": 40, "in_rate": 4.0, "out": 40, "out_rate": 4.0}}
    assert operator_rates([(second, ahead), (first, behind)]) == figures


def test_per_site_replicas_add_up_and_a_merged_computation_covers_them() -> None:
    # one query per site computes its own replica; another merges both sites into one computation
    per_site = [
        ({"o": [out_of("keep", f"keep@{site}")]}, {"o": (n, rate)})
        for site, n, rate in (("s1", 10, 1.0), ("s2", 12, 1.5))
    ]
    assert operator_rates(per_site) == {"keep": {"out": 22, "out_rate": 2.5}}
    merged = ({"m": [out_of("keep", "keep@s1", "keep@s2")]}, {"m": (21, 2.0)})
    assert operator_rates([*per_site, merged]) == {"keep": {"out": 21, "out_rate": 2.0}}


def test_a_query_that_reported_nothing_yet_adds_nothing() -> None:
    assert operator_rates([({"a": [into("w", "w")]}, {})]) == {}
    assert operator_rates([]) == {}


def test_hub_operator_figures_in_prometheus_text() -> None:
    engine = {
        "app": {
            "version": 1,
            "queries": {},
            "operators": {"keep": {"in": 40, "out": 10, "in_rate": 8.0, "out_rate": 2.0}},
        }
    }
    text = render_metrics([], [], [], engine=engine)
    labels = '{app="app",operator="keep"}'
    assert f"spanedge_hub_operator_input_records_total{labels} 40.0" in text
    assert f"spanedge_hub_operator_output_records_total{labels} 10.0" in text
    assert f"spanedge_hub_operator_input_records_per_second{labels} 8.0" in text
    assert f"spanedge_hub_operator_output_records_per_second{labels} 2.0" in text
    assert "# TYPE spanedge_hub_operator_input_records_total counter" in text
    assert "# TYPE spanedge_hub_operator_output_records_per_second gauge" in text


def progress(at: str, rows: int, **counts: int) -> SimpleNamespace:
    observed = {name: {"n": n} for name, n in counts.items()}
    batch = SimpleNamespace(id="q1", timestamp=at, batchDuration=250, numInputRows=rows, observedMetrics=observed)
    return SimpleNamespace(progress=batch)


def test_the_listener_totals_counts_and_rates_per_batch() -> None:
    from hub.engine.operator_counts import ObservedCounts

    listener = ObservedCounts()
    listener.onQueryProgress(progress("2024-05-01T10:00:00.000Z", 50, i=50, o=10))
    assert listener.of("q1") == {"i": (50, 200.0), "o": (10, 40.0)}  # the first batch: over its duration
    listener.onQueryProgress(progress("2024-05-01T10:00:02.000Z", 40, i=40, o=0))
    assert listener.of("q1") == {"i": (90, 20.0), "o": (10, 0.0)}  # over the time since the previous batch
    # a batch without input that only emits windows leaves the steps before the window as they were
    listener.onQueryProgress(progress("2024-05-01T10:00:02.500Z", 0, i=0, o=4))
    assert listener.of("q1") == {"i": (90, 20.0), "o": (14, 8.0)}
    listener.onQueryProgress(progress("2024-05-01T10:00:04.000Z", 30, i=30, o=0))
    assert listener.of("q1")["i"] == (120, 15.0)
    listener.onQueryIdle(SimpleNamespace(id="q1"))
    assert listener.of("q1") == {"i": (120, 0.0), "o": (14, 0.0)}
    assert listener.of("another") == {}
