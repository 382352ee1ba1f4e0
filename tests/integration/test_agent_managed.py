"""Managed mode: the agent takes signed plans from the hub broker and rejects bad ones."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
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


def _subscribed(agent: Agent) -> bool:
    """The agent's plan has it subscribed to its data on truck-7's broker."""
    return "truck-7" in agent.intake.transports and agent.intake.transports["truck-7"].subscribed.is_set()


@dataclass
class FirstRun:
    """What a test has after :func:`_after_a_first_run`: the brokers, the plan, and the agent's settings."""

    hub: Any
    plan: Plan
    control: Any
    observer: HubObserver
    config: AgentConfig
    sensor: Sensor
    start: float


@asynccontextmanager
async def _after_a_first_run(
    mosquitto_factory: Any, tmp_path: Path, version: int = 1, **options: Any
) -> AsyncIterator[FirstRun]:
    """Plan ``version`` retained on the hub broker, an agent run on it until its first results and stopped."""
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    _, plan_path, sites = write_setup(tmp_path, hub.url, site.url)
    plan = Plan.from_json(plan_path.read_text())
    control = client(hub.port)
    control.publish(topics.control("truck-7", "plan"), _signed(plan, version), qos=1, retain=True).wait_for_publish(5)
    observer = HubObserver(hub.port)
    config = AgentConfig("truck-7", sites, tmp_path / "state", heartbeat_interval=0.5, trusted_keys=TRUSTED, **options)
    sensor = Sensor(site.port)
    start = (time.time() - 3600) // 10 * 10
    try:
        first = Agent(config, connect=PahoTransport)
        task = asyncio.create_task(first.run())
        await poll(lambda: _subscribed(first), 20, "the agent to subscribe to its data")
        data = readings(start, 200, step=0.1)
        await asyncio.to_thread(sensor.send, [*data, {"unit": "u0", "ts": start + 60.0, "temp_f": 40.0}])
        await poll(lambda: same(results(observer.deduped()), reference(data, start + 59.0)), 20, "the first results")
        first.stop()
        await asyncio.wait_for(task, 20)
        yield FirstRun(hub, plan, control, observer, config, sensor, start)
    finally:
        sensor.close()
        observer.close()
        control.loop_stop()


@pytest.mark.timeout(90)
async def test_a_restarted_agent_takes_the_hubs_new_plan_before_any_data(
    mosquitto_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The hub moved the app away while the agent was down: the plan it saved must not run again."""
    caplog.set_level(logging.INFO)
    async with _after_a_first_run(mosquitto_factory, tmp_path) as run:
        sent = len(run.observer.batches())
        # down: the hub's plan v2 takes the app away, and the sensor goes on (the agent's session queues it)
        plan_topic = topics.control("truck-7", "plan")
        run.control.publish(plan_topic, _signed(run.plan, 2, apps=False), qos=1, retain=True).wait_for_publish(5)
        later = readings(run.start + 60.0, 200, step=0.1)
        await asyncio.to_thread(run.sensor.send, [*later, {"unit": "u0", "ts": run.start + 120.0, "temp_f": 40.0}])
        caplog.clear()
        second = Agent(run.config, connect=PahoTransport)
        task = asyncio.create_task(second.run())
        await poll(lambda: second.plan_intake is not None and second.plan_intake.version == 2, 20, "plan v2")
        assert second.pipelines == {}
        assert "resuming plan version" not in caplog.text  # the saved v1 never ran
        assert "restored window state" not in caplog.text
        assert second.outbox.records == 0
        await asyncio.sleep(2)  # what a v1 pipeline would have sent by now: nothing
        assert len(run.observer.batches()) == sent
        second.stop()
        await asyncio.wait_for(task, 20)


@pytest.mark.timeout(90)
async def test_a_restarted_agent_cut_off_from_the_hub_resumes_its_saved_plan(
    mosquitto_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With the hub broker out of reach, the agent runs the plan it saved after ``plan_wait``, and says so."""
    caplog.set_level(logging.INFO)
    async with _after_a_first_run(mosquitto_factory, tmp_path, plan_wait=1.0) as run:
        run.hub.stop()
        caplog.clear()
        second = Agent(run.config, connect=PahoTransport)
        task = asyncio.create_task(second.run())
        await poll(lambda: "cold-chain" in second.pipelines, 20, "the saved plan to resume")
        assert "no plan from the hub broker (cloud) within 1 s: resuming the plan saved in" in caplog.text
        assert "resuming plan version 1 until the hub publishes a newer one" in caplog.text
        await poll(lambda: _subscribed(second), 20, "the resumed plan to subscribe to its data")
        second.stop()
        await asyncio.wait_for(task, 20)


@pytest.mark.timeout(90)
async def test_a_restarted_agent_refuses_an_older_retained_plan_and_keeps_its_saved_one(
    mosquitto_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An older plan replayed on the broker while the agent was down: refused during the wait, the saved one runs."""
    caplog.set_level(logging.INFO)
    async with _after_a_first_run(mosquitto_factory, tmp_path, version=7, plan_wait=2.0) as run:
        saved = run.config.state_dir / "plan.signed"
        newer = saved.read_bytes()
        # down: an attacker (or a broker restored from an old backup) replays plan v3, which takes the app away
        plan_topic = topics.control("truck-7", "plan")
        run.control.publish(plan_topic, _signed(run.plan, 3, apps=False), qos=1, retain=True).wait_for_publish(5)
        caplog.clear()
        second = Agent(run.config, connect=PahoTransport)
        task = asyncio.create_task(second.run())
        refusal = "site truck-7: plan version 3 is not newer than the version 7 this agent holds"
        await poll(lambda: refusal in caplog.text, 20, "the refusal of the older plan")
        await poll(lambda: "cold-chain" in second.pipelines, 20, "the saved plan to resume")
        (line,) = [r for r in caplog.records if refusal in r.getMessage()]
        assert line.levelno == logging.WARNING
        assert "resuming plan version 7 until the hub publishes a newer one" in caplog.text
        assert second.plan_intake is not None
        assert second.plan_intake.version == 7
        assert saved.read_bytes() == newer
        await poll(lambda: _subscribed(second), 20, "the saved plan to subscribe to its data")
        second.stop()
        await asyncio.wait_for(task, 20)


@pytest.mark.timeout(90)
async def test_a_restarted_agent_sends_no_heartbeat_before_it_has_a_plan(
    mosquitto_factory: Any, tmp_path: Path
) -> None:
    """Its first heartbeat after a restart already lists its app, so the hub's windows never stop waiting for it."""
    async with _after_a_first_run(mosquitto_factory, tmp_path) as run:
        before = len(run.observer.heartbeats())
        second = Agent(run.config, connect=PahoTransport)
        task = asyncio.create_task(second.run())
        await poll(lambda: len(run.observer.heartbeats()) >= before + 3, 20, "heartbeats after the restart")
        after = run.observer.heartbeats()[before:]
        assert all(beat["apps"] == ["cold-chain"] for beat in after), after
        second.stop()
        await asyncio.wait_for(task, 20)
