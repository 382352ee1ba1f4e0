"""Managed mode: the agent takes signed plans from the hub broker and rejects bad ones."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent import Agent, AgentConfig
from spanedge import signing, topics
from spanedge.plan import Plan

from .agentkit import APP_FILE, HubObserver, Sensor, client, readings, reference, results, same, write_setup
from .test_agent_flow import poll

SECRET = b"test-secret"


def _signed(plan: Plan, version: int, secret: bytes = SECRET, apps: bool = True) -> bytes:
    code = APP_FILE.read_text()
    entry = {
        "app": plan.app,
        "plan": dataclasses.replace(plan, app_source="").to_dict(),
        "source": code,
        "source_sha256": hashlib.sha256(code.encode()).hexdigest(),
    }
    body = {"site": "truck-7", "version": version, "issued_at": time.time(), "apps": [entry] if apps else []}
    return signing.sign(body, secret)


@pytest.mark.timeout(60)
async def test_agent_applies_signed_plans_and_rejects_forged_ones(
    mosquitto_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    _, plan_path, sites = write_setup(tmp_path, hub.url, site.url)
    plan = Plan.from_json(plan_path.read_text())
    control = client(hub.port)
    plan_topic = topics.control("truck-7", "plan")
    control.publish(plan_topic, _signed(plan, 1, secret=b"forged"), qos=1, retain=True).wait_for_publish(5)
    observer = HubObserver(hub.port)
    config = AgentConfig("truck-7", sites, tmp_path / "state", heartbeat_interval=0.5, secret=SECRET)
    agent = Agent(config)
    task = asyncio.create_task(agent.run())
    sensor = Sensor(site.port)
    try:
        await poll(lambda: "signature does not match" in caplog.text, 10, "the forged plan to be rejected")
        assert agent.pipelines == {}
        control.publish(plan_topic, _signed(plan, 1), qos=1, retain=True).wait_for_publish(5)
        await poll(lambda: "truck-7" in agent._intake and agent._intake["truck-7"].subscribed.is_set(), 10, "plan v1")
        assert agent.plan_intake is not None
        assert agent.plan_intake.version == 1
        start = (time.time() - 3600) // 10 * 10
        data = readings(start, 200, step=0.1)
        await asyncio.to_thread(sensor.send, [*data, {"unit": "u0", "ts": start + 60.0, "temp_f": 40.0}])
        want = reference(data, start + 59.0)
        await poll(lambda: same(results(observer.deduped()), want), 20, "window results under the managed plan")
        pipeline = agent.pipelines["cold-chain"]
        control.publish(plan_topic, _signed(plan, 1), qos=1, retain=True).wait_for_publish(5)  # a replay
        control.publish(plan_topic, _signed(plan, 2, apps=False), qos=1, retain=True).wait_for_publish(5)
        await poll(lambda: agent.pipelines == {}, 10, "plan v2 to stop the app")
        assert agent.plan_intake.version == 2
        assert pipeline.metrics()["readings@truck-7"]["in"] == 201
        assert (tmp_path / "state" / "plan.signed").is_file()
    finally:
        agent.stop()
        await asyncio.wait_for(task, 20)
        sensor.close()
        observer.close()
        control.loop_stop()
