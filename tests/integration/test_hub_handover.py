"""A 10 s window replica moved from a spoke to the hub and back mid-stream, on real Mosquitto and Spark.

The spoke's part runs in the pure runtime, rebuilt from each plan version and
restored from the previous one's snapshot as the agent does; what it sends
to the hub goes through the real ingest, the hub's part through the engine.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from hub.engine.engine import Engine
from hub.engine.share_progress import SHARE_WRITTEN
from hub.engine.wanted import before_slot
from hub.handover.switches import stamp_handovers
from hub.ingest.consumer import Ingest
from simulate.reference import Item, evaluate
from spanedge import App, agg, sinks
from spanedge.plan import Assignment, Flow, Plan
from spanedge.runtime import Pipeline, from_plan
from spanedge.runtime.outputs import HubRecord
from spanedge.sites import parse_sites
from spanedge.wire.batch import Record
from tests.integration.hubkit import T0, Publisher, broker_of
from tests.integration.test_hub_engine import caught_up
from tests.plans import chain_plan
from tests.polling import wait_for

pytestmark = pytest.mark.spark

SITES = """
sites:
  cloud: {tier: hub, broker: "BROKER"}
  tiny:
    tier: spoke
    broker: "BROKER"
    streams:
      readings: {topic: "r/#", rate: 10}
"""


def make_app() -> App:
    app = App("moving")
    stats = app.source("readings", time_field="ts").window(
        name="stats", key="k", size=10.0, aggs={"n": agg.count(), "total": agg.sum("x")}
    )
    stats.sink(sinks.memory("moving_stats"), name="out")
    return app


def make_plan(site: str, version: int) -> Plan:
    """Tiny's ``stats`` replica at ``site`` since ``version`` (0 for the first), the sink at the hub."""
    return chain_plan("moving", version, {"tiny": [("stats", site, version if version > 1 else 0)]})


class Spoke:
    """The spoke's pipeline under successive plans, publishing what it sends to the hub as its outbox would."""

    def __init__(self, app: App, publisher: Publisher, site: str = "tiny") -> None:
        self.app = app
        self.site = site
        self.publisher = publisher
        self.seqs: dict[tuple[str, int], int] = {}
        self.pipeline: Pipeline | None = None

    def apply(self, plan: Plan) -> None:
        state = self.pipeline.snapshot() if self.pipeline is not None else None
        self.pipeline = from_plan(self.app, plan, self.site)
        if state is not None:
            self.pipeline.restore(state)

    def feed(self, rows: list[dict[str, Any]]) -> None:
        assert self.pipeline is not None
        for row in rows:
            self.pipeline.process(f"readings@{self.site}", orjson.dumps(row))
        by_stream: dict[tuple[str, int], list[HubRecord]] = {}
        for r in self.pipeline.take().to_hub:
            by_stream.setdefault((r.stream, r.epoch), []).append(r)
        for (stream, epoch), records in by_stream.items():
            batch = []
            for r in records:
                seq = self.seqs[stream, epoch] = self.seqs.get((stream, epoch), 0) + 1
                batch.append(Record(r.site, stream, seq, r.event_time, r.key, r.value, epoch))
            self.publisher.send(batch)


def test_a_window_moved_to_the_hub_and_back_is_emitted_once_with_every_record(
    spark: Any, mosquitto: Any, tmp_path: Path
) -> None:
    app = make_app()
    sites = parse_sites(SITES.replace("BROKER", mosquitto.url))
    rows: list[dict[str, Any]] = [{"k": f"p{i % 3}", "x": i, "ts": T0 + i * 0.25} for i in range(4 * 115)]

    def until(t: float) -> list[dict[str, Any]]:
        return [r for r in rows if fed[0] <= r["ts"] < t]

    fed = [T0]
    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id="hub-handover-test")
    ingest.start()
    engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds")
    publisher = Publisher(mosquitto.url, app.name)
    spoke = Spoke(app, publisher)
    try:
        v1 = make_plan("tiny", 1)
        engine.deploy(app, v1)
        spoke.apply(v1)
        spoke.feed(until(T0 + 23.0))
        fed[0] = T0 + 23.0
        # a re-plan at event time T0 + 23 moves the window to the hub; the hub deploys before the spoke hears
        v2 = stamp_handovers(make_plan("cloud", 2), v1, app, T0 + 23.0, delay=5.0)
        assert [(h.source, h.target, h.switch_at) for h in v2.handovers] == [("tiny", "cloud", T0 + 30.0)]
        engine.deploy(app, v2)
        assert set(engine._apps[app.name].queries) == {"out", before_slot("out")}
        spoke.apply(v2)
        spoke.feed(until(T0 + 52.0))
        fed[0] = T0 + 52.0
        # and back to the spoke at T0 + 52
        v3 = stamp_handovers(make_plan("tiny", 3), v2, app, T0 + 52.0, delay=5.0)
        assert [(h.source, h.target, h.switch_at) for h in v3.handovers] == [("cloud", "tiny", T0 + 60.0)]
        running = {q.checkpoint.name for q in engine._apps[app.name].queries.values()}
        engine.deploy(app, v3)
        assert {q.checkpoint.name for q in engine._apps[app.name].queries.values()} == running  # state kept
        # the query that ran the window at the hub owns [T0 + 30, T0 + 60): not done before its watermark is at 70
        writing = engine.unsettled(app.name)
        assert any(f"hub query {before_slot('out')} (" in w and f"done at {T0 + 70.0:.0f})" in w for w in writing)
        # a plan that drops the handover would stop that query; one that keeps it, or moves the window back, not
        assert any(before_slot("out") in w for w in engine.unsettled(app.name, make_plan("tiny", 3)))
        assert not any(before_slot("out") in w for w in engine.unsettled(app.name, v3))
        back = stamp_handovers(make_plan("cloud", 4), v3, app, T0 + 53.0, delay=5.0)
        assert not any(before_slot("out") in w for w in engine.unsettled(app.name, back))
        spoke.apply(v3)
        spoke.feed(until(T0 + 95.0))

        reference: dict[tuple[str, float], tuple[int, float]] = {}
        for r in rows:
            start = (r["ts"] - T0) // 10 * 10 + T0
            n, total = reference.get((r["k"], start), (0, 0.0))
            reference[r["k"], start] = (n + 1, total + r["x"])
        # the windows up to the last one the spoke's watermark closed
        expected = {k: v for k, v in reference.items() if k[1] < T0 + 90.0}

        def results() -> list[dict[str, Any]]:
            return [row["value"] for row in engine.memory("moving_stats")]

        wait_for(lambda: len(results()) >= len(expected), 120, "every window at the hub's sink")
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        wait_for(lambda: engine.unsettled(app.name) == [], 60, "the hub's part to be reported written")
        got = [((v["k"], v["window_start"]), (v["n"], v["total"])) for v in results()]
        assert len(got) == len(dict(got)), "a window was emitted twice"
        assert dict(got) == expected  # 0 lost, 0 duplicated, 0 wrong
        # the hub computed partial windows on both sides of its part; its sinks left them to the spoke
        queries = engine.metrics()[app.name]["queries"]
        assert queries["out"]["handover_left_to_other"] + queries[before_slot("out")]["handover_left_to_other"] > 0
        # written its share, the hub's query of [T0 + 30, T0 + 60) stops, though v3 still lists the handover
        assert engine.retire_written_shares() == [f"{app.name}/{before_slot('out')}"]
        assert set(engine._apps[app.name].queries) == {"out"}
        assert engine.retire_written_shares() == []
        engine.deploy(app, v3)  # as a failed query's restart does: nothing starts again
        assert set(engine._apps[app.name].queries) == {"out"}
        notes = list((tmp_path / "checkpoints" / app.name).glob(f"*/{SHARE_WRITTEN}"))
        assert len(notes) == 1, notes
        # nor after a restart of the hub, which still goes on with the sink's own query
        engine.stop()
        engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds")
        engine.deploy(app, v3)
        assert set(engine._apps[app.name].queries) == {"out"}
        assert notes[0].is_file()
        fed[0] = T0 + 95.0
        spoke.feed(until(T0 + 115.0))
        closed = {(k, T0 + 90.0) for k in ("p0", "p1", "p2")}
        wait_for(lambda: closed <= {(v["k"], v["window_start"]) for v in results()}, 120, "the windows after it")
        got = [((v["k"], v["window_start"]), (v["n"], v["total"])) for v in results()]
        assert len(got) == len(dict(got)), "a window was emitted twice"
        assert all(key[1] >= T0 + 90.0 and reference[key] == value for key, value in got), got
    finally:
        publisher.close()
        engine.stop()
        ingest.stop()


def sliding_app() -> App:
    """Each reading scaled, and at the hub per key 30 s sums every 10 s (a sliding window) of the scaled ones."""
    app = App("sliding")
    scaled = app.source("readings", time_field="ts").map(lambda r: {**r, "x2": r["x"] * 2}, name="scaled")
    wide = scaled.window(
        name="wide", key="k", size=30.0, slide=10.0, aggs={"n": agg.count(), "total": agg.sum("x2")}, scope="global"
    )
    wide.sink(sinks.memory("wide_stats"), name="out")
    return app


def sliding_plan(site: str, version: int) -> Plan:
    """Tiny's ``scaled`` replica at ``site`` since ``version`` (0 for the first); ``wide`` and the sink at the hub."""
    plan = chain_plan("sliding", version, {"tiny": [("scaled", site, version if version > 1 else 0)]})
    wide = Assignment("wide", "wide", None, "cloud", "@global_")
    flows = tuple(f if f.dst != "out" else dataclasses.replace(f, dst="wide") for f in plan.flows)
    return dataclasses.replace(
        plan, assignments=(*plan.assignments, wide), flows=(*flows, Flow("wide", "out", 1.0, 100.0))
    )


@pytest.mark.parametrize(
    ("before", "after"), [("cloud", "tiny"), ("tiny", "cloud")], ids=["hub-to-spoke", "spoke-to-hub"]
)
def test_a_sliding_window_at_the_hub_after_a_moved_replica_is_whole_across_the_switch(
    spark: Any, mosquitto: Any, tmp_path: Path, before: str, after: str
) -> None:
    app = sliding_app()
    sites = parse_sites(SITES.replace("BROKER", mosquitto.url))
    rows: list[dict[str, Any]] = [{"k": f"p{i % 3}", "x": i, "ts": T0 + i * 0.25} for i in range(4 * 115)]
    reference = evaluate(app, {"readings": [Item("tiny", r["ts"], r) for r in rows]}).sinks["out"]
    # the windows the last records close at the hub (Spark's watermark trails the last one)
    ends = T0 + 100.0
    expected = {
        (v["k"], v["window_start"]): (v["n"], v["total"])
        for v in (i.value for i in reference)
        if v["window_end"] <= ends
    }
    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id=f"hub-handover-sliding-{before}")
    ingest.start()
    engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds")
    publisher = Publisher(mosquitto.url, app.name)
    spoke = Spoke(app, publisher)
    try:
        v1 = sliding_plan(before, 1)
        engine.deploy(app, v1)
        spoke.apply(v1)
        spoke.feed([r for r in rows if r["ts"] < T0 + 43.0])
        # the map moves; the hub's 30 s windows starting before the switch stay its old query's
        v2 = stamp_handovers(sliding_plan(after, 2), v1, app, T0 + 43.0, delay=5.0)
        ((switch, source, target),) = [(h.switch_at, h.source, h.target) for h in v2.handovers]
        assert (source, target) == (before, after)
        engine.deploy(app, v2)
        assert set(engine._apps[app.name].queries) == {"out", before_slot("out")}
        spoke.apply(v2)
        spoke.feed([r for r in rows if r["ts"] >= T0 + 43.0])

        def results() -> list[dict[str, Any]]:
            return [row["value"] for row in engine.memory("wide_stats")]

        deadline = time.monotonic() + 180.0
        while not set(expected) <= {(v["k"], v["window_start"]) for v in results()} and time.monotonic() < deadline:
            time.sleep(0.2)
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        got = [((v["k"], v["window_start"]), (v["n"], v["total"])) for v in results()]
        assert len(got) == len(dict(got)), "a window was emitted twice"
        whole = {key: value for key, value in got if key in expected}
        # the windows across the switch too: the old owner (the hub, or the spoke) was fed, or ran on,
        # until the hub's windows downstream closed (fed only until the switch, the three windows of each
        # key across it were lost)
        missing = {key: (value, whole.get(key)) for key, value in expected.items() if whole.get(key) != value}
        assert not missing, sorted((k, start - T0, want, have) for (k, start), (want, have) in missing.items())
        assert any(start < switch < start + 30.0 for _, start in whole)
    finally:
        publisher.close()
        engine.stop()
        ingest.stop()
