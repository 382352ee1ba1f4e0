"""Drift measured at a gateway reaches the hub in heartbeats, which retrains on Spark and sends the new version back.

A retraining trains on the model's labelled history, which keeps the records the ingest log has dropped.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from hub.control.distribution import MqttControl
from hub.engine.engine import Engine
from hub.ingest import log as ingest_log
from hub.ingest.consumer import Ingest
from hub.models.distribution import ModelDistributor
from hub.models.drift import DriftWatch
from hub.models.link import ModelLink
from hub.models.registry import ModelRegistry
from hub.models.service import ModelService
from spanedge import App, sinks, topics
from spanedge.models.drift import MIN_RECORDS, SCORED
from spanedge.models.installed import INSTALLED
from spanedge.wire.batch import Record
from spanedge.wire.heartbeat import Heartbeat, decode
from spanedge.wire.log_line import decode_lines
from tests.keys import KEY, TRUSTED
from tests.polling import poll, wait_for

from .agentkit import HubObserver, client, signed_plan
from .hubkit import Collector, Publisher, broker_of, make_plan
from .modelkit import APP_SOURCE, labelled, records_between, setup, write_labelled

pytestmark = pytest.mark.timeout(600)

SHIFT = 2.5  # the vibration of the gateway's machines after the drift
#: The app, its model trained on the newest 1500 labelled records the hub keeps.
SOURCE = APP_SOURCE.replace("min_rows=500)", "min_rows=500, history_rows=1500)")


def _report(observer: HubObserver, version: int) -> dict[str, float] | None:
    """The gateway's last drift report about ``version`` with a full enough window, if any yet."""
    for payload in reversed(observer._of("/control/truck-7/heartbeat")):
        beat, _ = decode(payload)
        report = beat.models.get("plant", {}).get("wear")
        if report is not None and report.get("version") == version and report.get("records", 0) >= MIN_RECORDS:
            return report
    return None


async def test_drift_at_a_gateway_retrains_on_spark_and_the_new_version_scores_there(
    spark: Any, mosquitto_factory: Any, tmp_path: Path
) -> None:
    INSTALLED.remove("plant")
    SCORED.remove("plant")
    hub_broker, site_broker = mosquitto_factory("hub"), mosquitto_factory("site")
    assert SOURCE != APP_SOURCE
    sites, (app, plan) = setup(tmp_path, hub_broker.url, site_broker.url, SOURCE)
    t0 = (time.time() - 3600) // 10 * 10
    ingest = tmp_path / "hub" / "ingest"
    write_labelled(ingest / "plant", labelled(1500, seed=1, shift=0.0), t0 - 2000)  # what the hub holds at first
    registry = ModelRegistry(tmp_path / "hub" / "models", KEY)
    control = MqttControl(sites.site("cloud").mqtt(), client_id="test-hub-control").start()
    service = ModelService(registry, {"plant": app}.__getitem__, ingest, lambda: spark)
    link = ModelLink(ModelDistributor(registry, control.publish_all), service.app_of)
    link.plans_of = lambda name: (plan,)
    beats: dict[str, Heartbeat] = {}
    link.beat_of = beats.get
    service.on_trained = link.release
    watch = DriftWatch(service, link, min_retrain_s=0.0)
    first = await asyncio.to_thread(service.train, "plant", "wear", "on demand")
    assert first.switch_at is not None
    raw = client(hub_broker.port)
    message = signed_plan(plan, SOURCE, 1)
    raw.publish(topics.control("truck-7", "plan"), message, qos=1, retain=True).wait_for_publish(5)
    observer = HubObserver(hub_broker.port)
    config = AgentConfig("truck-7", sites, tmp_path / "state", heartbeat_interval=0.5, trusted_keys=TRUSTED)
    agent = Agent(config, connect=PahoTransport)
    task = asyncio.create_task(agent.run())
    sensor = client(site_broker.port)

    def send(records: list[dict[str, Any]]) -> None:
        infos = [sensor.publish("plant/7/features", msgspec.json.encode(r), qos=1) for r in records]
        for info in infos:
            info.wait_for_publish(10)

    try:
        await poll(lambda: INSTALLED.held("plant", "wear") == 1, 30, "version 1 installed at the gateway")
        await poll(
            lambda: "truck-7" in agent.intake.transports and agent.intake.transports["truck-7"].subscribed.is_set(),
            30,
            "the plan applied, the gateway subscribed to its sensors",
        )
        await asyncio.to_thread(send, records_between(t0, 0.0, 25.0, seed=3, shift=0.0))  # as in training
        calm = await _wait_report(observer, 1, lambda r: r["records"] >= 100)
        assert calm["psi"] < 0.25
        beats["truck-7"] = decode(observer._of("/control/truck-7/heartbeat")[-1])[0]
        assert await asyncio.to_thread(watch.check, ["plant"]) == []  # nothing to retrain for
        # the gateway's machines vibrate more; the newest labelled records the hub keeps are of the drifted machines
        write_labelled(ingest / "plant", labelled(1500, seed=2, shift=SHIFT), t0 - 1000, first=1500)
        await asyncio.to_thread(send, records_between(t0, 25.0, 75.0, seed=4, shift=SHIFT))
        drifted = await _wait_report(observer, 1, lambda r: r["psi"] > 0.25 and r.get("labelled", 0) >= 100)
        beats["truck-7"] = decode(observer._of("/control/truck-7/heartbeat")[-1])[0]
        made = await asyncio.to_thread(watch.check, ["plant"])
        assert [v.version for v in made] == [2]
        second = made[0]
        assert second.reason.startswith("drift at truck-7: PSI ")
        assert "of 'rms' over 0.25" in second.reason
        assert second.switch_at is not None
        assert second.switch_at >= t0 + 74.0  # after what the gateway had reported done
        await poll(lambda: INSTALLED.held("plant", "wear") == 2, 30, "version 2 installed at the gateway")
        start = second.switch_at - t0 + 1.0
        await asyncio.to_thread(send, records_between(t0, start, start + 50.0, seed=5, shift=SHIFT))
        after = await _wait_report(observer, 2, lambda r: r.get("labelled", 0) >= 100)
        assert after["psi"] < 0.25  # the new version was trained on what the gateway now sees
        assert after["error"] < drifted["error"]
        beats["truck-7"] = decode(observer._of("/control/truck-7/heartbeat")[-1])[0]
        assert await asyncio.to_thread(watch.check, ["plant"]) == []
        assert [v.reason for v in registry.versions("plant", "wear")] == ["on demand", second.reason]
        assert agent.dlq_count == 0
    finally:
        agent.stop()
        await asyncio.wait_for(task, 30)
        sensor.loop_stop()
        raw.loop_stop()
        observer.close()
        control.stop()
        INSTALLED.remove("plant")
        SCORED.remove("plant")


async def _wait_report(observer: HubObserver, version: int, ok: Any, timeout: float = 120.0) -> dict[str, float]:
    """Wait for a report of the gateway about ``version`` that ``ok`` accepts; return it."""
    found: list[dict[str, float]] = []

    def check() -> bool:
        report = _report(observer, version)
        if report is not None and "psi" in report and ok(report):
            found.append(report)
            return True
        return False

    try:
        await poll(check, timeout, f"a drift report about version {version}")
    except BaseException:
        beats = observer._of("/control/truck-7/heartbeat")
        print("last heartbeat:", beats[-1] if beats else None)
        raise
    return found[-1]


def _consume(log_dir: Path, reader: str) -> None:
    """What a hub query does with the segments it processed: drop its links; the log then deletes what all read."""
    for link in ingest_log.inbox_files(ingest_log.inbox(log_dir, reader)):
        link.unlink()
    ingest_log.collect_garbage(log_dir)


def _labelled_in_log(log_dir: Path) -> list[int]:
    """The ``seq`` of every labelled record the log still holds (its writer may delete a segment meanwhile)."""
    seqs = []
    for _, path in ingest_log.segments(log_dir):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        lines = decode_lines(data[: data.rfind(b"\n") + 1])
        seqs += [line.seq for line in lines if line.stream == "labelled"]
    return seqs


def test_a_retrain_after_the_log_moved_past_the_first_records_trains_on_the_history(spark: Any, tmp_path: Path) -> None:
    _, (app, _) = setup(tmp_path, "mqtt://127.0.0.1:1", "mqtt://127.0.0.1:2")
    log_dir = tmp_path / "hub" / "ingest" / "plant"
    registry = ModelRegistry(tmp_path / "hub" / "models", KEY)
    service = ModelService(registry, {"plant": app}.__getitem__, log_dir.parent, lambda: spark)
    service.follow(["plant"])  # as the hub does before the plans go out
    ingest_log.subscribe(log_dir, "scored_out-1")  # a query of the app at the hub
    t0 = time.time() - 3600
    write_labelled(log_dir, labelled(400, seed=1, shift=0.0), t0)
    assert service.run_schedule(["plant"]) == []  # nothing is due; the records are copied at the check
    _consume(log_dir, "scored_out-1")
    assert _labelled_in_log(log_dir) == []  # the first records are gone from the log
    write_labelled(log_dir, labelled(400, seed=2, shift=0.0), t0 + 400, first=400)
    _consume(log_dir, "scored_out-1")
    assert _labelled_in_log(log_dir) == list(range(400, 800))  # the models hold back what they have not copied
    v1 = service.train("plant", "wear", "on demand")  # 400 records in the log, fewer than min_rows=500
    assert v1.rows + v1.held_out == 800
    assert v1.rows >= 500
    write_labelled(log_dir, labelled(100, seed=3, shift=0.0), t0 + 800, first=800)
    service.run_schedule(["plant"])
    _consume(log_dir, "scored_out-1")
    assert _labelled_in_log(log_dir) == []  # the log moved past every labelled record
    v2 = service.train("plant", "wear", "after the log moved on")
    assert v2.rows + v2.held_out == 900
    assert v2.rows >= app.models["wear"].min_rows
    assert v2.time_from is not None
    assert v2.time_from < t0 + 400  # the first records are in
    restarted = ModelService(registry, {"plant": app}.__getitem__, log_dir.parent, lambda: spark)
    v3 = restarted.train("plant", "wear", "after a restart")
    assert (v3.rows, v3.held_out, v3.time_from, v3.time_to) == (v2.rows, v2.held_out, v2.time_from, v2.time_to)
    assert v3.metrics == v2.metrics  # the same rows, in the same order: the same model


def test_labelled_records_the_hubs_query_consumed_still_train_the_model(
    spark: Any, mosquitto: Any, tmp_path: Path
) -> None:
    sites, _ = setup(tmp_path, mosquitto.url, mosquitto.url)
    app = App("plant")
    labelled_records = app.source("labelled", time_field="t")
    features = app.source("features", time_field="t")
    app.model(
        "wear",
        algorithm="logistic_regression",
        features=["rms", "peak", "temp_c"],
        label="failed",
        train_on=labelled_records,
        min_rows=500,
    )
    features.sink(sinks.mqtt("plant/seen"), name="out")  # a query at the hub reads (and consumes) the whole log
    plan = make_plan(app, sites, at_hub={"out"}, singletons={"out"})
    log_dir = tmp_path / "ingest" / "plant"
    service = ModelService(
        ModelRegistry(tmp_path / "models", KEY), {"plant": app}.__getitem__, log_dir.parent, lambda: spark
    )
    service.follow(["plant"])  # as the hub does before the plans go out
    t0 = time.time() - 3600
    ingest = Ingest(broker_of(mosquitto.url), log_dir.parent, client_id="hub-history-test", batch_every=(0.25,))
    ingest.start()
    assert ingest.wait_connected()
    engine = Engine(tmp_path, sites, spark=spark, trigger="1 second", stateless_trigger="250 milliseconds")
    collector = Collector(mosquitto.url, "plant/seen")
    publisher = Publisher(mosquitto.url, app.name)
    sent = [0]

    def send_features(n: int) -> None:
        rows = records_between(t0, sent[0] / 4, (sent[0] + n) / 4, seed=sent[0])
        publisher.send([Record("truck-7", "features", sent[0] + i, r["t"], None, r) for i, r in enumerate(rows)])
        sent[0] += len(rows)

    def labelled_at(first: int, rows: list[dict[str, float]]) -> list[Record]:
        return [
            Record("truck-7", "labelled", first + i, t0 + r["event_time"], None, {**r, "t": t0 + r["event_time"]})
            for i, r in enumerate(rows)
        ]

    try:
        engine.deploy(app, plan)
        publisher.send(labelled_at(0, labelled(800, seed=1, shift=0.0)), batch=100)
        send_features(20)
        wait_for(lambda: len(collector.get("plant/seen")) >= sent[0], 120, "the hub's query read the first records")
        assert service.run_schedule(["plant"]) == []  # nothing is due; the labelled records are copied

        def moved_on() -> bool:
            send_features(4)  # the log deletes what every reader is past as it seals the next segment
            return min(_labelled_in_log(log_dir), default=800) >= 800

        wait_for(moved_on, 120, "the ingest log to drop the first labelled records", poll=1.0)
        publisher.send(labelled_at(800, labelled(100, seed=2, shift=0.0)))
        send_features(4)
        wait_for(lambda: len(collector.get("plant/seen")) >= sent[0], 120, "the hub's query read the last records")
        assert _labelled_in_log(log_dir) == list(range(800, 900))  # fewer than min_rows=500 in the log
        version = service.train("plant", "wear", "after the log moved on")
        assert version.rows + version.held_out == 900
        assert version.rows >= 500
    finally:
        publisher.close()
        collector.close()
        engine.stop()
        ingest.stop()
