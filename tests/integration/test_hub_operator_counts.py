"""Records in and out of every hub operator, counted inside the Spark queries that compute them.

The records are written to the app's ingest log directly (no broker): a
map and a filter passing a known fraction of the records, per source site
(merged into one computation per query), feed a per-site sink (one query
per site) and a window with its own sink, so the map and the filter are
computed by three queries and must be counted once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hub.api.metrics import render_metrics
from hub.engine.engine import Engine
from hub.ingest import log as ingest_log
from spanedge import App, agg, sinks
from spanedge.sites import parse_sites
from spanedge.wire.batch import Record
from tests.integration.hubkit import T0, make_plan
from tests.polling import wait_for

pytestmark = pytest.mark.spark

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1"}
  s1:
    tier: spoke
    broker: "mqtt://127.0.0.1:1"
    streams:
      a: {topic: "a/#", rate: 10}
  s2:
    tier: spoke
    broker: "mqtt://127.0.0.1:1"
    streams:
      a: {topic: "a/#", rate: 10}
"""
HUB_OPS = {"scale", "quarter", "to_f", "w", "to_w"}
PER_SITE = 40
FLUSH_T = T0 + 100  # moves the watermark past every window of the readings


def scale(v: dict[str, Any]) -> dict[str, Any]:
    return {**v, "x": v["i"] * 2.0}


def quarter(v: dict[str, Any]) -> bool:
    return bool(v["i"] % 4 == 0)


def counted_app() -> App:
    app = App("counted")
    kept = app.source("a", time_field="t").map(scale, name="scale").filter(quarter, name="quarter")
    kept.sink(sinks.memory("counted_f"), name="to_f")
    kept.window(key="id", size="5s", aggs={"n": agg.count()}, name="w").sink(sinks.memory("counted_w"), name="to_w")
    return app


def readings(site: str, offset: float) -> list[Record]:
    rows = [{"id": f"k{i % 2}", "i": i, "t": T0 + i + offset} for i in range(PER_SITE)]
    rows.append({"id": "k0", "i": 100, "t": FLUSH_T})  # passes the filter
    return [Record(site, "a", seq, r["t"], r["id"], r) for seq, r in enumerate(rows)]


def figures(engine: Engine, app: str) -> dict[str, dict[str, int]]:
    operators = engine.metrics()[app].get("operators") or {}
    return {op: {"in": f.get("in"), "out": f.get("out")} for op, f in operators.items()}


def test_hub_operators_count_their_records_in_and_out_once(spark: Any, tmp_path: Path) -> None:
    sites = parse_sites(SITES)
    app = counted_app()
    plan = make_plan(app, sites, at_hub=HUB_OPS, singletons={"w", "to_w"})
    records = [*readings("s1", 0.0), *readings("s2", 0.5)]
    passed = [r for r in records if r.value["i"] % 4 == 0]
    windows = {(r.key, (r.event_time // 5) * 5) for r in passed if r.event_time < FLUSH_T}
    expected = {
        "scale": {"in": len(records), "out": len(records)},
        "quarter": {"in": len(records), "out": len(passed)},
        "to_f": {"in": len(passed), "out": len(passed)},
        "w": {"in": len(passed), "out": len(windows)},
        "to_w": {"in": len(windows), "out": len(windows)},
    }
    assert len(passed) == 2 * (PER_SITE // 4 + 1)

    engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds")
    try:
        engine.deploy(app, plan)
        assert set(engine.metrics()[app.name]["queries"]) == {"to_f@s1", "to_f@s2", "to_w"}
        writer = ingest_log.AppLog(engine.log_dir(app.name))
        writer.append(ingest_log.encode_records(records))
        writer.flush()
        writer.seal()
        writer.close()
        wait_for(lambda: len(engine.memory("counted_w")) >= len(windows), 120, "the window results")
        wait_for(lambda: len(engine.memory("counted_f")) >= len(passed), 60, "the filtered records")
        wait_for(lambda: figures(engine, app.name) == expected, 60, f"the operator counts {expected}")
        assert figures(engine, app.name) == expected
        assert len(engine.memory("counted_f")) == len(passed)

        operators = engine.metrics()[app.name]["operators"]
        for name, f in operators.items():
            assert f["in_rate"] >= 0.0, name
            assert f["out_rate"] >= 0.0, name
        text = render_metrics([], [], [], engine=engine.metrics())
        assert f'spanedge_hub_operator_input_records_total{{app="counted",operator="quarter"}} {len(records)}.0' in text
        assert f'spanedge_hub_operator_output_records_total{{app="counted",operator="quarter"}} {len(passed)}.0' in text
        assert 'spanedge_hub_operator_output_records_per_second{app="counted",operator="w"}' in text
    finally:
        engine.stop()
