"""Drift measured at a gateway reaches the hub in heartbeats, which retrains on Spark and sends the new version back."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from hub.control.distribution import MqttControl
from hub.models.distribution import ModelDistributor
from hub.models.drift import DriftWatch
from hub.models.link import ModelLink
from hub.models.registry import ModelRegistry
from hub.models.service import ModelService
from spanedge import topics
from spanedge.models.drift import MIN_RECORDS, SCORED
from spanedge.models.installed import INSTALLED
from spanedge.wire.heartbeat import Heartbeat, decode
from tests.keys import KEY, TRUSTED
from tests.polling import poll

from .agentkit import HubObserver, client, signed_plan
from .modelkit import APP_SOURCE, labelled, records_between, setup, write_labelled

pytestmark = pytest.mark.timeout(600)

SHIFT = 2.5  # the vibration of the gateway's machines after the drift


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
    sites, (app, plan) = setup(tmp_path, hub_broker.url, site_broker.url)
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
    message = signed_plan(plan, APP_SOURCE, 1)
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
        # the gateway's machines vibrate more; the hub's log now holds labelled records of the drifted machines
        shutil.rmtree(ingest / "plant")
        write_labelled(ingest / "plant", labelled(1500, seed=2, shift=SHIFT), t0 - 1000)
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
