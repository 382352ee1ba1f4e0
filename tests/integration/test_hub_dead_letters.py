"""Dead letters of the hub's Python operators, with real Mosquitto and Spark.

A global map raises on some records: those come out on the app's hub
dead-letter topic and in the hub's dead-letter files, with the reason, and
every other record reaches the sink, also through a window after the map.
The hub counts them by the site each came from, which a rollout's
``hub_errors`` gate reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from hub.api.metrics import render_metrics
from hub.control.rollout.gates import evaluate, parse_gates
from hub.control.rollout.metrics import Beat, Context
from hub.engine.dead_letters import OPERATOR_ERRORS
from hub.engine.engine import Engine
from hub.ingest.consumer import Ingest
from spanedge import App, agg, global_, sinks, topics
from spanedge.sites import parse_sites
from spanedge.wire.batch import Record
from spanedge.wire.heartbeat import Heartbeat
from tests.integration.hubkit import T0, Collector, Publisher, broker_of, make_plan
from tests.polling import wait_for

pytestmark = pytest.mark.spark

SITES = """
sites:
  cloud: {tier: hub, broker: "BROKER"}
  s1:
    tier: spoke
    broker: "BROKER"
    streams:
      a: {topic: "a/#", rate: 10}
"""
TWO_SPOKES = (
    SITES
    + """
  s2:
    tier: spoke
    broker: "BROKER"
    streams:
      a: {topic: "a/#", rate: 10}
"""
)


@global_(name="calibrate")
def calibrate(reading: dict[str, Any]) -> dict[str, Any]:
    """Scale a reading; a reading whose ``x`` is not a number raises."""
    return {**reading, "x": float(reading["x"]) * 2.0}


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"id": f"k{i % 2}", "t": T0 + i, "x": float(i)} for i in range(30)]
    for i in (3, 11, 12, 25):
        rows[i]["x"] = f"broken-{i}"
    return rows


def _app(name: str, windowed: bool) -> App:
    app = App(name)
    scaled = app.source("a", time_field="t").map(calibrate)
    if windowed:
        scaled = scaled.window(key="id", size="10s", aggs={"n": agg.count(), "total": agg.sum("x")}, name="w")
    scaled.sink(sinks.mqtt(f"{name}/out"), name="out")
    return app


@contextmanager
def _running(
    spark: Any, mosquitto: Any, tmp_path: Path, app: App, hub_ops: set[str], sites_yaml: str = SITES
) -> Iterator[tuple[Collector, Engine, Publisher]]:
    """``app`` deployed at a hub with ``hub_ops`` there: a collector of its ``out`` and dead-letter topics, the engine, a publisher."""
    name = app.name
    sites = parse_sites(sites_yaml.replace("BROKER", mosquitto.url))
    plan = make_plan(app, sites, at_hub=hub_ops, singletons=hub_ops)
    collector = Collector(mosquitto.url, f"{name}/out", topics.dlq(name, "hub"))
    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id=f"hub-test-{name}")
    ingest.start()
    engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds")
    publisher = Publisher(mosquitto.url, name)
    try:
        engine.deploy(app, plan)
        yield collector, engine, publisher
    finally:
        publisher.close()
        collector.close()
        engine.stop()
        ingest.stop()


def _dead_files(state: Path, app: str) -> list[dict[str, Any]]:
    return [
        orjson.loads(line)
        for f in sorted((state / "dlq" / app).glob("*.jsonl"))
        for line in f.read_bytes().splitlines()
    ]


@pytest.mark.parametrize("windowed", [False, True], ids=["map-to-sink", "map-window-sink"])
def test_records_a_global_map_raises_on_go_to_the_dead_letters(
    spark: Any, mosquitto: Any, tmp_path: Path, windowed: bool
) -> None:
    name = "dead-window" if windowed else "dead-map"
    app = _app(name, windowed)
    hub_ops = {"calibrate", "w", "out"} if windowed else {"calibrate", "out"}
    rows = _rows()
    bad = {i for i, r in enumerate(rows) if isinstance(r["x"], str)}
    good = [r for i, r in enumerate(rows) if i not in bad]
    dlq = topics.dlq(name, "hub")
    with _running(spark, mosquitto, tmp_path, app, hub_ops) as (collector, _, publisher):
        publisher.send([Record("s1", "a", i, r["t"], r["id"], r) for i, r in enumerate(rows)])
        if windowed:  # move the watermark past every window
            publisher.send([Record("s1", "a", 100, T0 + 60, "z", {"id": "z", "t": T0 + 60, "x": 0.0})])
            expected: list[Any] = sorted(
                (
                    f"k{k}",
                    T0 + w * 10,
                    sum(1 for r in good if r["id"] == f"k{k}" and T0 + w * 10 <= r["t"] < T0 + w * 10 + 10),
                )
                for k in (0, 1)
                for w in range(3)
            )
        else:
            expected = sorted((r["t"], 2.0 * r["x"]) for r in good)
        wait_for(lambda: len(collector.get(f"{name}/out")) >= len(expected), 90, "the sink's results")
        wait_for(lambda: len(collector.get(dlq)) >= len(bad), 60, "the dead letters")
        out = collector.get(f"{name}/out")
        if windowed:
            assert sorted((v["id"], v["window_start"], v["n"]) for v in out) == expected
        else:
            assert sorted((v["t"], v["x"]) for v in out) == expected

        letters = collector.get(dlq)
        assert sorted(d["seq"] for d in letters) == sorted(bad)
        for d in letters:
            assert d["operator"] == "calibrate"
            assert d["site"] == "hub"
            assert d["source_site"] == "s1"
            assert d["reason"].startswith("calibrate (")
            assert "raised ValueError: could not convert string to float" in d["reason"]
            assert orjson.loads(d["payload"])["x"] == f"broken-{d['seq']}"
            assert not d["truncated"]
        filed = _dead_files(tmp_path, name)
        assert sorted(d["seq"] for d in filed) == sorted(bad)
        counted = f'spanedge_hub_dead_letters_total{{app="{name}"'
        wait_for(lambda: counted in render_metrics([], [], []), 30, "the dead letters in the metrics")
        (line,) = (li for li in render_metrics([], [], []).splitlines() if li.startswith(counted))
        assert float(line.rsplit(" ", 1)[1]) == len(bad)


def test_a_map_feeding_two_sinks_dead_letters_each_record_once_also_for_a_memory_sink(
    spark: Any, mosquitto: Any, tmp_path: Path
) -> None:
    """Both sinks' queries run ``calibrate``; one of them files and publishes its letters, the memory sink's included."""
    name = "dead-twice"
    app = App(name)
    scaled = app.source("a", time_field="t").map(calibrate)
    scaled.sink(sinks.memory(f"{name}-kept"), name="kept")
    scaled.sink(sinks.mqtt(f"{name}/out"), name="out")
    rows = _rows()
    bad = sorted(i for i, r in enumerate(rows) if isinstance(r["x"], str))
    dlq = topics.dlq(name, "hub")
    with _running(spark, mosquitto, tmp_path, app, {"calibrate", "kept", "out"}) as (collector, engine, publisher):
        publisher.send([Record("s1", "a", i, r["t"], r["id"], r) for i, r in enumerate(rows)])
        good = len(rows) - len(bad)
        wait_for(lambda: len(collector.get(dlq)) >= len(bad), 90, "the dead letters")
        # a later record: once both sinks have it, both queries are past every batch with a failing record
        publisher.send([Record("s1", "a", 100, T0 + 60, "z", {"id": "z", "t": T0 + 60, "x": 1.0})])
        wait_for(lambda: len(collector.get(f"{name}/out")) == good + 1, 90, "the MQTT sink's results")
        wait_for(lambda: len(engine.memory(f"{name}-kept")) == good + 1, 90, "the memory sink's results")
        letters = collector.get(dlq)
        assert sorted(d["seq"] for d in letters) == bad  # once each, not once per sink's query
        assert {d["operator"] for d in letters} == {"calibrate"}
        assert sorted(d["seq"] for d in _dead_files(tmp_path, name)) == bad


def test_the_hub_counts_each_record_its_operator_raised_on_under_its_origin_site(
    spark: Any, mosquitto: Any, tmp_path: Path
) -> None:
    """s1 sends four records ``calibrate`` raises on, s2 one: the counts by site fail ``hub_errors<1`` at s1 and s2."""
    name = "dead-sites"
    rows = _rows()
    at_s2 = [{**r, "x": "broken-s2" if i == 5 else float(i)} for i, r in enumerate(rows)]
    dlq = topics.dlq(name, "hub")
    with _running(spark, mosquitto, tmp_path, _app(name, False), {"calibrate", "out"}, TWO_SPOKES) as (
        collector,
        _,
        publisher,
    ):
        assert OPERATOR_ERRORS.counts(name) == {}
        publisher.send([Record("s1", "a", i, r["t"], r["id"], r) for i, r in enumerate(rows)])
        publisher.send([Record("s2", "a", i, r["t"], r["id"], r) for i, r in enumerate(at_s2)])
        wait_for(lambda: len(collector.get(dlq)) >= 5, 90, "the dead letters")
        wait_for(lambda: sum(OPERATOR_ERRORS.counts(name).values()) >= 5, 30, "the counts by origin site")
        good = 2 * len(rows) - 5
        wait_for(lambda: len(collector.get(f"{name}/out")) >= good, 90, "the sink's results")
        counts = OPERATOR_ERRORS.counts(name)
        assert counts == {"s1": 4, "s2": 1}
        assert sorted((d["source_site"], d["seq"]) for d in collector.get(dlq)) == [
            *(("s1", i) for i in (3, 11, 12, 25)),
            ("s2", 5),
        ]
        lines = [li for li in render_metrics([], [], []).splitlines() if li.startswith("spanedge_hub_operator_errors")]
        assert f'spanedge_hub_operator_errors_total{{app="{name}",site="s1"}} 4.0' in lines
        assert f'spanedge_hub_operator_errors_total{{app="{name}",site="s2"}} 1.0' in lines

    # the hold saw no count at its start and these at its end, a minute later
    context = Context(name, hub_errors={site: [(0.0, 0.0), (60.0, float(counts[site]))] for site in ("s1", "s2")})
    heard = [Beat(site, t, Heartbeat(site=site)) for site in ("s1", "s2") for t in (0.0, 60.0)]
    verdict = evaluate(parse_gates("hub_errors<1"), heard, ("s1", "s2"), 0.0, 60.0, context)
    (gate,) = verdict.gates
    assert (verdict.passed, gate.site, gate.failed, gate.value) == (False, "s1", ("s1", "s2"), 4.0)
    assert verdict.reason == "failed: hub_errors 4/min at s1 and 1 other site (limit < 1/min)"
