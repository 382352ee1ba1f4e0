"""The hub data plane with real Mosquitto and Spark: ingest, the engine and sinks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from hub.engine.checkpoints import settled, unprocessed
from hub.engine.engine import Engine
from hub.ingest import log as ingest_log
from hub.ingest.consumer import Ingest
from spanedge import App, agg, sinks
from spanedge.aggregations import Aggregator
from spanedge.errors import InvalidDataflow
from spanedge.loader import load_app
from spanedge.sites import parse_sites
from tests.integration.hubkit import (
    COLD_CHAIN_SITES,
    EXAMPLES,
    T0,
    Collector,
    Publisher,
    broker_of,
    canon,
    cold_chain_readings,
    is_anomaly,
    make_plan,
    raw_records,
    sites_for,
    stats_records,
    unit_stats,
)
from tests.polling import wait_for

pytestmark = pytest.mark.spark


def caught_up(engine: Engine, app: str) -> bool:
    """True when every query of ``app`` has processed the whole log and is idle."""
    log_dir = engine.log_dir(app)
    if ingest_log.sealed_tail(log_dir) < ingest_log.tail(log_dir):
        return False  # records not sealed yet
    deployed = engine._apps[app]
    for q in deployed.queries.values():
        assert q.handle is not None
        error = q.handle.exception()
        if error is not None:
            pytest.fail(f"query {q.replica} failed: {error}")
        progress = q.handle.lastProgress
        if not progress or not progress.get("sources"):
            return False
        if unprocessed(log_dir, q.reader, q.checkpoint) or q.handle.status.get("isDataAvailable"):
            return False
        if not settled(q.checkpoint):  # a batch without data will emit the windows the watermark closed
            return False
    return True


@pytest.fixture
def cold_chain() -> App:
    return load_app(EXAMPLES / "cold_chain" / "app.py")


def test_cold_chain_alerts_match_reference_and_duplicates_are_dropped(
    spark: Any, mosquitto: Any, tmp_path: Path, cold_chain: App
) -> None:
    sites = sites_for(mosquitto.url)
    plan = make_plan(cold_chain, sites, at_hub={"anomaly", "fleet_alerts"}, singletons={"anomaly", "fleet_alerts"})
    readings = cold_chain_readings()
    stats = {site: unit_stats(rows) for site, rows in readings.items()}
    expected = sorted(canon(s) for rows in stats.values() for s in rows if is_anomaly(s))
    assert expected, "the generated data must contain anomalies"

    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id="hub-test-1", batch_every=(0.25,))
    ingest.start()
    assert ingest.wait_connected()
    # fleet_alerts runs no window at the hub: it takes the stateless trigger, not the windows' 2 s
    engine = Engine(tmp_path, sites, spark=spark, trigger="2 seconds", stateless_trigger="250 milliseconds")
    collector = Collector(mosquitto.url, "cold-chain/alerts")
    publisher = Publisher(mosquitto.url, cold_chain.name)
    try:
        engine.deploy(cold_chain, plan)
        batches = {site: stats_records(site, rows) for site, rows in stats.items()}
        total = sum(len(b) for b in batches.values())
        for records in batches.values():
            publisher.send(records, batch=5)
        wait_for(lambda: len(collector.get("cold-chain/alerts")) >= len(expected), 90, "the fleet alerts")
        for records in batches.values():  # an agent resending after a lost ack
            publisher.send(records, batch=7)
        wait_for(lambda: ingest.stats()["duplicates"] == total, 30, "the resent batches to reach ingest")
        wait_for(lambda: caught_up(engine, cold_chain.name), 60, "the engine to process the whole log")
        got = sorted(canon(v) for v in collector.get("cold-chain/alerts"))
        assert got == expected
        st = ingest.stats()
        assert st["records"] == total
        assert {s for s in st["apps"]["cold-chain"]} == set(COLD_CHAIN_SITES)
        assert st["apps"]["cold-chain"]["truck-7"]["unit_stats"]["last_seq"] == len(batches["truck-7"]) - 1
        metrics = engine.metrics()["cold-chain"]["queries"]["fleet_alerts"]
        assert metrics["active"]
        handle = engine._apps[cold_chain.name].queries["fleet_alerts"].handle
        assert handle is not None
        assert str(handle._jsq.streamingQuery().trigger()) == "ProcessingTimeTrigger(250)"
        assert metrics["batch_id"] is not None
        # the sink's result latency: event time to written, for the alerts of the last minute
        latency = metrics["result_latency"]
        assert latency is not None
        assert 1 <= latency["results"] <= len(expected)
        assert 0 < latency["p50_ms"] <= latency["p95_ms"]
        assert isinstance(metrics["input_rows_per_s"], float)  # over the query's recent batches
    finally:
        publisher.close()
        collector.close()
        engine.stop()
        ingest.stop()


def test_cold_chain_windows_at_the_hub_match_reference(
    spark: Any, mosquitto: Any, tmp_path: Path, cold_chain: App
) -> None:
    sites = sites_for(mosquitto.url)
    hub_ops = {"to_celsius", "plausible", "unit_stats", "local_stats", "anomaly", "fleet_alerts"}
    plan = make_plan(cold_chain, sites, at_hub=hub_ops, singletons={"anomaly", "fleet_alerts"})
    readings = cold_chain_readings()
    stats = [s for rows in readings.values() for s in unit_stats(rows)]
    expected_stats = sorted(canon(s) for s in stats)
    expected_alerts = sorted(canon(s) for s in stats if is_anomaly(s))

    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id="hub-test-2")
    ingest.start()
    engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds")
    collector = Collector(mosquitto.url, "cold-chain/unit-stats", "cold-chain/alerts")
    publisher = Publisher(mosquitto.url, cold_chain.name)
    try:
        engine.deploy(cold_chain, plan)
        assert set(engine.metrics()["cold-chain"]["queries"]) == {
            "fleet_alerts",
            *(f"local_stats@{s}" for s in COLD_CHAIN_SITES),
        }
        seqs = dict.fromkeys(COLD_CHAIN_SITES, 0)
        chunk = 40  # 10 s of readings of one site, sites interleaved in event time
        for start in range(0, len(readings["truck-7"]), chunk):
            for site in COLD_CHAIN_SITES:
                rows = readings[site][start : start + chunk]
                publisher.send(raw_records(site, rows, seqs[site]), batch=20)
                seqs[site] += len(rows)
        flush = {"unit": "flush", "ts": T0 + 100, "temp_f": 40.0}
        for site in COLD_CHAIN_SITES:  # moves the watermark past the last window
            publisher.send(raw_records(site, [flush], seqs[site]))
        wait_for(
            lambda: len(collector.get("cold-chain/unit-stats")) >= len(expected_stats),
            120,
            "the window results",
        )
        wait_for(lambda: len(collector.get("cold-chain/alerts")) >= len(expected_alerts), 60, "the alerts")
        wait_for(lambda: caught_up(engine, cold_chain.name), 60, "the engine to process the whole log")
        # A record far behind the watermark is dropped by Spark, but counted, never silently.
        late = {"unit": "late", "ts": T0 + 1, "temp_f": 40.0}
        publisher.send(raw_records("truck-7", [late], seqs["truck-7"] + 1))

        def late_dropped() -> int:
            queries = engine.metrics()["cold-chain"]["queries"]
            return sum(int(q.get("late_dropped") or 0) for q in queries.values())

        wait_for(lambda: late_dropped() >= 1, 60, "the late record to be counted")
        got = sorted(canon(v) for v in collector.get("cold-chain/unit-stats"))
        assert got == expected_stats
        got_alerts = sorted(canon(v) for v in collector.get("cold-chain/alerts"))
        assert got_alerts == expected_alerts
        # The per-site replicas feeding the fleet-wide filter run as one computation over one source.
        assert len(engine._apps["cold-chain"].queries["fleet_alerts"].handle.lastProgress["sources"]) == 1
        # Redeploying the same operators keeps the running queries and their state.
        before = {r: id(q.handle) for r, q in engine._apps["cold-chain"].queries.items()}
        engine.deploy(cold_chain, make_plan(cold_chain, sites, hub_ops, {"anomaly", "fleet_alerts"}, version=2))
        after = {r: id(q.handle) for r, q in engine._apps["cold-chain"].queries.items()}
        assert before == after
        assert engine.metrics()["cold-chain"]["version"] == 2
        # So does the same app loaded anew from its source, as the hub does for each POST /apps:
        # the same StreamingQuery objects, the same runs
        runs = {r: (id(q.handle), str(q.handle.runId)) for r, q in engine._apps["cold-chain"].queries.items()}
        reloaded = load_app(EXAMPLES / "cold_chain" / "app.py")
        engine.deploy(reloaded, make_plan(reloaded, sites, hub_ops, {"anomaly", "fleet_alerts"}, version=3))
        assert {r: (id(q.handle), str(q.handle.runId)) for r, q in engine._apps["cold-chain"].queries.items()} == runs
        assert all(q.handle.isActive for q in engine._apps["cold-chain"].queries.values())
        assert engine.metrics()["cold-chain"]["version"] == 3
    finally:
        publisher.close()
        collector.close()
        engine.stop()
        ingest.stop()


def spread_aggregator() -> Aggregator:
    return Aggregator(
        "spread",
        zero=lambda: [None, None],
        add=lambda acc, x: [x if acc[0] is None else min(acc[0], x), x if acc[1] is None else max(acc[1], x)],
        merge=lambda a, b: [min(a[0], b[0]), max(a[1], b[1])],
        result=lambda acc: acc[1] - acc[0],
    )


def double_x(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn("x2", F.col("x") * 2).where(F.col("x") > 0)


def triple_x(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn("x2", F.col("x") * 3).where(F.col("x") > 0)


MIX_SITES = """
sites:
  cloud: {tier: hub, broker: "BROKER"}
  s1:
    tier: spoke
    broker: "BROKER"
    streams:
      a: {topic: "a/#", rate: 10}
      b: {topic: "b/#", rate: 10}
"""


def mix_app(with_schema: bool = True, scale: Any = double_x) -> App:
    app = App("mix")
    a = app.source("a", time_field="t")
    b = app.source("b", time_field="t")
    both = app.union(a, b, name="both")
    if with_schema:
        both.schema("id STRING, t DOUBLE, x DOUBLE")
    both.transform(scale, name="scale").sink(sinks.memory("mix_t"), name="to_t")
    both.window(
        key="id",
        size="5s",
        aggs={"n": agg.count(), "total": agg.sum("x"), "spread": agg.custom("x", spread_aggregator())},
        name="w",
    ).sink(sinks.memory("mix_w"), name="to_w")
    return app


def test_union_transform_custom_aggregation_to_memory(spark: Any, mosquitto: Any, tmp_path: Path) -> None:
    from spanedge.wire.batch import Record

    sites = parse_sites(MIX_SITES.replace("BROKER", mosquitto.url))
    app = mix_app()
    hub_ops = {"both", "scale", "to_t", "w", "to_w"}
    plan = make_plan(app, sites, at_hub=hub_ops, singletons=hub_ops)
    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id="hub-test-3")
    ingest.start()
    engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds")
    publisher = Publisher(mosquitto.url, app.name)
    try:
        engine.deploy(app, plan)
        rows = {
            "a": [{"id": f"k{i % 2}", "t": T0 + i, "x": float(i - 3)} for i in range(12)],
            "b": [{"id": f"k{i % 2}", "t": T0 + i + 0.5, "x": float(2 * i)} for i in range(12)],
        }
        for stream, values in rows.items():
            publisher.send([Record("s1", stream, i, v["t"], v["id"], v) for i, v in enumerate(values)])
        for stream in rows:  # move the watermark past every window
            publisher.send([Record("s1", stream, 100, T0 + 60, "z", {"id": "z", "t": T0 + 60, "x": 0.0})])
        every = [v for values in rows.values() for v in values]
        expected_t = sorted((v["id"], v["x"], 2 * v["x"]) for v in every if v["x"] > 0)
        windows: dict[tuple[str, float], list[float]] = {}
        for v in every:
            windows.setdefault((v["id"], (v["t"] // 5) * 5), []).append(v["x"])
        expected_w = sorted((k, s, len(xs), sum(xs), max(xs) - min(xs)) for (k, s), xs in windows.items())
        wait_for(lambda: len(engine.memory("mix_w")) >= len(expected_w), 90, "the window results")
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        got_t = sorted((r["value"]["id"], r["value"]["x"], r["value"]["x2"]) for r in engine.memory("mix_t"))
        assert got_t == [*expected_t]
        got_w = sorted(
            (v["id"], v["window_start"], v["n"], v["total"], v["spread"])
            for v in (r["value"] for r in engine.memory("mix_w"))
        )
        assert got_w == expected_w
        assert all(r["stream"] == "w" and r["site"] == "cloud" for r in engine.memory("mix_w"))
        assert len(engine._apps["mix"].queries["to_w"].handle.lastProgress["sources"]) == 1

        # A new version changes the transform: only its query restarts, from where the old one stopped.
        queries = engine._apps["mix"].queries
        window_query = queries["to_w"].handle
        old_checkpoint = queries["to_t"].checkpoint
        app2 = mix_app(scale=triple_x)
        engine.deploy(app2, make_plan(app2, sites, at_hub=hub_ops, singletons=hub_ops, version=2))
        assert engine._apps["mix"].queries["to_w"].handle is window_query
        assert engine._apps["mix"].queries["to_t"].checkpoint != old_checkpoint
        assert not old_checkpoint.exists()
        more = [{"id": "k9", "t": T0 + 70 + i, "x": float(i + 1)} for i in range(5)]
        publisher.send([Record("s1", "a", 200 + i, v["t"], v["id"], v) for i, v in enumerate(more)])
        wait_for(lambda: len(engine.memory("mix_t")) >= len(expected_t) + len(more), 60, "the new version's results")
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        got_t = sorted((r["value"]["id"], r["value"]["x"], r["value"]["x2"]) for r in engine.memory("mix_t"))
        assert got_t == sorted([*expected_t, *(("k9", v["x"], 3 * v["x"]) for v in more)])

        # The hub restarts with a third version: the window query resumes from its checkpoint,
        # the changed transform from where the previous version's query stopped.
        engine.stop()
        # k9's records moved the watermark past z's window [T0+60, T0+65): the window query emits it in
        # the batch after them, which may come only after the restart
        z_before = [r["value"] for r in engine.memory("mix_w") if r["key"] == "z"]
        engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds")
        app3 = mix_app(scale=double_x)
        engine.deploy(app3, make_plan(app3, sites, at_hub=hub_ops, singletons=hub_ops, version=3))
        assert len(list(engine.checkpoint_root("mix").iterdir())) == 2
        # inside the window [T0+70, T0+75) the watermark has not passed: no window closes in this version
        last = [{"id": "k8", "t": T0 + 74.1 + i / 10, "x": float(i + 1)} for i in range(3)]
        publisher.send([Record("s1", "b", 300 + i, v["t"], v["id"], v) for i, v in enumerate(last)])
        wait_for(lambda: len(engine.memory("mix_t")) >= len(last), 90, "the third version's results")
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        got_t = sorted((r["value"]["id"], r["value"]["x"], r["value"]["x2"]) for r in engine.memory("mix_t"))
        assert got_t == [("k8", v["x"], 2 * v["x"]) for v in last]
        wait_for(lambda: len(z_before) + len(engine.memory("mix_w")) >= 1, 60, "z's window")
        z = {"id": "z", "window_start": T0 + 60, "window_end": T0 + 65, "n": 2, "total": 0.0, "spread": 0.0}
        assert [*z_before, *(r["value"] for r in engine.memory("mix_w"))] == [z]  # once; no window emitted again
    finally:
        publisher.close()
        engine.stop()
        ingest.stop()


def test_transform_without_schema_is_rejected_at_deploy(spark: Any, tmp_path: Path) -> None:
    sites = parse_sites(MIX_SITES.replace("BROKER", "mqtt://127.0.0.1:1883"))
    app = mix_app(with_schema=False)
    hub_ops = {"both", "scale", "to_t", "w", "to_w"}
    engine = Engine(tmp_path, sites, spark=spark)
    try:
        with pytest.raises(InvalidDataflow, match=r"declare them with \.schema"):
            engine.deploy(app, make_plan(app, sites, at_hub=hub_ops, singletons=hub_ops))
        assert engine.apps() == []
    finally:
        engine.stop()


@pytest.mark.parametrize("close_windows", [False, True], ids=["next_batch", "at_watermark"])
def test_batch_replayed_after_a_crash_is_not_written_twice(
    spark: Any, mosquitto: Any, tmp_path: Path, close_windows: bool
) -> None:
    """A crash between a sink's write and Spark's commit: the replay runs, commits its window state, writes nothing.

    Also with the window closed by its sink at the watermark, from the state it kept for the batch before.
    """
    import pyarrow.parquet as pq

    from spanedge.wire.batch import Record

    out = tmp_path / "out"
    sites = parse_sites(MIX_SITES.replace("BROKER", mosquitto.url))
    app = App("replay")
    app.source("a", time_field="t").window(key="id", size="5s", aggs={"n": agg.count()}, name="w").sink(
        sinks.file(str(out)), name="to_w"
    )
    hub_ops = {"w", "to_w"}
    plan = make_plan(app, sites, at_hub=hub_ops, singletons=hub_ops)
    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id="hub-test-replay")
    ingest.start()
    publisher = Publisher(mosquitto.url, app.name)
    rows = [{"id": f"k{i % 2}", "t": T0 + i} for i in range(40)]

    def windows() -> list[tuple[str, float, int]]:
        found = [orjson.loads(v) for f in sorted(out.glob("*.parquet")) for v in pq.read_table(f)["value"].to_pylist()]
        return sorted((w["id"], w["window_start"], w["n"]) for w in found)

    engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds", close_windows=close_windows)
    try:
        engine.deploy(app, plan)
        publisher.send([Record("s1", "a", i, v["t"], v["id"], v) for i, v in enumerate(rows[:20])])
        wait_for(lambda: len(windows()) >= 6, 90, "the first windows")  # [T0, T0+15) closed by the watermark
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        engine.stop()
        # The hub died after the sink wrote its last batch but before Spark committed it.
        checkpoint = next(engine.checkpoint_root(app.name).iterdir())
        assert (checkpoint / "closing").is_dir() == close_windows  # the sink's state of the windows it closes
        commits = [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
        last = max(commits, key=lambda p: int(p.name))
        last.unlink()
        last.with_name(f".{last.name}.crc").unlink(missing_ok=True)
        engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds", close_windows=close_windows)
        engine.deploy(app, plan)
        flush = {"id": "z", "t": T0 + 100}
        rest = [*rows[20:], flush]
        publisher.send([Record("s1", "a", 20 + i, v["t"], v["id"], v) for i, v in enumerate(rest)])
        expected = sorted(
            {
                (v["id"], (v["t"] // 5) * 5, sum(1 for r in rows if r["id"] == v["id"] and r["t"] // 5 == v["t"] // 5))
                for v in rows
            }
        )
        wait_for(lambda: len(windows()) >= len(expected), 90, "every window")
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        assert windows() == expected
    finally:
        publisher.close()
        engine.stop()
        ingest.stop()


def test_failed_query_restarts_from_its_checkpoint(spark: Any, mosquitto: Any, tmp_path: Path) -> None:
    """A sink that cannot write fails its query; once the cause is gone the query resumes where it stopped."""
    import time

    import pyarrow.parquet as pq

    from spanedge.wire.batch import Record

    out = tmp_path / "out"
    out.write_text("a file where the sink's folder should be")
    sites = parse_sites(MIX_SITES.replace("BROKER", mosquitto.url))
    app = App("fragile")
    app.source("a", time_field="t").window(key="id", size="5s", aggs={"n": agg.count()}, name="w").sink(
        sinks.file(str(out)), name="to_w"
    )
    hub_ops = {"w", "to_w"}
    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id="hub-test-restart")
    ingest.start()
    publisher = Publisher(mosquitto.url, app.name)
    engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds")
    rows = [{"id": f"k{i % 2}", "t": T0 + i} for i in range(20)]
    rows.append({"id": "z", "t": T0 + 100})  # moves the watermark past every window
    try:
        engine.deploy(app, make_plan(app, sites, at_hub=hub_ops, singletons=hub_ops))
        publisher.send([Record("s1", "a", i, v["t"], v["id"], v) for i, v in enumerate(rows)])
        query = engine._apps[app.name].queries["to_w"].handle
        wait_for(lambda: not query.isActive, 90, "the query to fail on its sink")
        now = time.monotonic()
        assert engine.recover(now=now) == []  # the first restart waits a second
        assert engine.metrics()[app.name]["queries"]["to_w"]["error"]
        out.unlink()
        assert engine.recover(now=now + 1.0) == [f"{app.name}/to_w"]
        expected = sorted(
            {
                (
                    v["id"],
                    T0 + (i // 5) * 5,
                    sum(1 for r in rows[:20] if r["id"] == v["id"] and (r["t"] - T0) // 5 == i // 5),
                )
                for i, v in enumerate(rows[:20])
            }
        )

        def windows() -> list[tuple[str, float, int]]:
            found = [
                orjson.loads(v) for f in sorted(out.glob("*.parquet")) for v in pq.read_table(f)["value"].to_pylist()
            ]
            return sorted((w["id"], w["window_start"], w["n"]) for w in found)

        wait_for(lambda: len(windows()) >= len(expected), 90, "every window after the restart")
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        assert windows() == expected
        metrics = engine.metrics()[app.name]["queries"]["to_w"]
        assert metrics["restarts"] == 1
        assert metrics["active"]
        assert metrics["error"] is None
    finally:
        publisher.close()
        engine.stop()
        ingest.stop()
