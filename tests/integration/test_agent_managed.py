"""Managed mode: the agent takes signed plans from the hub broker and rejects bad ones."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.transport import PahoTransport
from spanedge import topics
from spanedge.plan import Plan
from spanedge.signing import PlanSigningKey
from tests.keys import KEY, ROGUE, TRUSTED
from tests.polling import poll

from .agentkit import (
    APP_FILE,
    HubObserver,
    Sensor,
    client,
    readings,
    reference,
    results,
    same,
    signed_plan,
    write_setup,
)


def _signed(plan: Plan, version: int, key: PlanSigningKey = KEY, apps: bool = True, site: str = "truck-7") -> bytes:
    return signed_plan(plan, APP_FILE.read_text(), version, key=key, site=site, apps=apps)


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
    control.publish(plan_topic, _signed(plan, 1, key=ROGUE), qos=1, retain=True).wait_for_publish(5)
    observer = HubObserver(hub.port)
    config = AgentConfig("truck-7", sites, tmp_path / "state", heartbeat_interval=0.5, trusted_keys=TRUSTED)
    agent = Agent(config, connect=PahoTransport)
    task = asyncio.create_task(agent.run())
    sensor = Sensor(site.port)
    try:
        await poll(lambda: "trusts only key ids" in caplog.text, 10, "the forged plan to be rejected")
        assert agent.pipelines == {}
        # truck-9's plan, validly signed by the hub, replayed on truck-7's topic
        control.publish(plan_topic, _signed(plan, 1, site="truck-9"), qos=1, retain=True).wait_for_publish(5)
        await poll(lambda: "plan is for site 'truck-9'" in caplog.text, 10, "another site's plan to be rejected")
        assert agent.pipelines == {}
        rejected = [r for r in caplog.records if "plan is for site 'truck-9'" in r.getMessage()]
        assert {r.levelno for r in rejected} == {logging.WARNING}
        control.publish(plan_topic, _signed(plan, 1), qos=1, retain=True).wait_for_publish(5)
        await poll(
            lambda: "truck-7" in agent.intake.transports and agent.intake.transports["truck-7"].subscribed.is_set(),
            10,
            "plan v1",
        )
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
