"""Key splits in the placement: which replicas may split, and how the plan shows a split replica's keys."""

from __future__ import annotations

import re

import placement
from placement.problem import build_problem
from placement.split import chain, splittable
from spanedge import App, agg, global_, sinks
from spanedge.report import plan_report, to_text
from spanedge.sites import Sites, parse_sites


def make_sites(tiny_cpu: float, barn_cpu: float = 1.0) -> Sites:
    return parse_sites(f"""
sites:
  cloud: {{tier: hub, broker: "mqtt://cloud:1883", cpu: 8}}
  tiny:
    tier: spoke
    broker: "mqtt://tiny:1883"
    cpu: {tiny_cpu}
    streams:
      readings: {{topic: "r/#", rate: 100}}
  barn: {{tier: spoke, broker: "mqtt://barn:1883", cpu: {barn_cpu}}}
default_link: {{latency_ms: 80, bandwidth_mbps: 10}}
links:
  - {{between: [tiny, barn], latency_ms: 5, bandwidth_mbps: 100}}
""")


@global_
def keep(stats: dict) -> bool:
    return True


def make_app(slide: float | None = None) -> App:
    """Readings, doubled, a 10 s keyed window too heavy for one 1-core spoke, labelled, then the hub."""
    app = App("split")
    doubled = app.source("readings", time_field="ts").map(lambda r: {**r, "x2": r["x"] * 2}, name="double", cost=1e-4)
    aggs = {"n": agg.count(), "s": agg.sum("x2")}
    stats = doubled.window(name="stats", key="k", size=10.0, slide=slide, scope="local", cost=0.015, aggs=aggs)
    stats.map(lambda s: {**s, "label": f"{s['k']}:{s['n']}"}, name="label").filter(keep, name="keep").sink(
        sinks.memory("split_out"), name="out"
    )
    return app


def test_the_placement_table_shows_each_site_s_keys_of_a_split_replica() -> None:
    plan = placement.solve(make_app(), make_sites(1.0))
    table = to_text(plan_report(plan))
    assert re.search(r"stats@tiny \(keys \[0%, 50%\)\)\s+tiny", table), table
    assert re.search(r"stats@tiny \(keys \[50%, 100%\)\)\s+barn\s+split by key: no spoke within reach", table), table


def test_only_keyed_windows_with_stateless_chains_are_splittable() -> None:
    app = make_app()
    problem = build_problem(app, make_sites(1.0), placement.LatencyMatrix.from_sites(make_sites(1.0)))
    assert splittable(problem) == ["stats@tiny"]
    assert chain(problem, "stats@tiny") == (["double@tiny"], ["label@tiny"])


def test_a_window_next_to_another_window_at_the_spoke_is_not_splittable() -> None:
    app = App("two")
    first = app.source("readings", time_field="ts").window(
        name="first", key="k", size=10.0, scope="local", cost=0.015, aggs={"n": agg.count()}
    )
    second = first.window(name="second", key="k", size=60.0, scope="local", cost=0.015, aggs={"n": agg.sum("n")})
    second.sink(sinks.memory("two_out"), name="out")
    sites = make_sites(1.0)
    problem = build_problem(app, sites, placement.LatencyMatrix.from_sites(sites))
    assert chain(problem, "first@tiny") is None  # a window after it
    assert chain(problem, "second@tiny") is None  # a window before it
    assert splittable(problem) == []
