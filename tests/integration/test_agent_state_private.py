"""The agent's state is its site's own: after a run, every directory under its state dir is 0700, every file 0600.

A managed agent on real Mosquitto brokers takes a signed plan (saved with the app's source), processes
readings (outbox, checkpoints, spool), writes a late record to its side output and stops. Its state
directory, made wider beforehand as an older version or another tool might leave it, is narrowed too.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent import Agent
from edge_agent.config import AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from spanedge import topics
from spanedge.plan import Plan
from tests.keys import TRUSTED
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


@pytest.mark.timeout(60)
async def test_every_file_the_agent_writes_is_private(mosquitto_factory: Any, tmp_path: Path) -> None:
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    _, plan_path, sites = write_setup(tmp_path, hub.url, site.url)
    plan = Plan.from_json(plan_path.read_text())
    control = client(hub.port)
    control.publish(
        topics.control("truck-7", "plan"), signed_plan(plan, APP_FILE.read_text(), 1), qos=1, retain=True
    ).wait_for_publish(5)
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    old_umask = os.umask(0o022)  # the usual umask: without the agent's care its files would be 0644
    observer = HubObserver(hub.port)
    config = AgentConfig("truck-7", sites, state, heartbeat_interval=0.5, checkpoint_interval=0.2, trusted_keys=TRUSTED)
    agent = Agent(config, connect=PahoTransport)
    task = asyncio.create_task(agent.run())
    sensor = Sensor(site.port)
    try:
        await poll(
            lambda: "truck-7" in agent.intake.transports and agent.intake.transports["truck-7"].subscribed.is_set(),
            10,
            "the signed plan's subscription",
        )
        start = (time.time() - 3600) // 10 * 10
        data = readings(start, 200, step=0.1)
        closing = {"unit": "u0", "ts": start + 60.0, "temp_f": 40.0}
        late = {"unit": "u1", "ts": start + 1.0, "temp_f": 40.0}  # its window fired at the closing reading
        await asyncio.to_thread(sensor.send, [*data, closing, late])
        await poll(lambda: same(results(observer.deduped()), reference(data, start + 59.0)), 20, "the results")
        await poll(lambda: agent.late_count == 1, 10, "the late record")
    finally:
        agent.stop()
        await asyncio.wait_for(task, 20)
        os.umask(old_umask)
        sensor.close()
        observer.close()
        control.loop_stop()
    names = {p.relative_to(state).as_posix() for p in state.rglob("*")}
    assert {"agent.db", "spool.db", "plan.signed", "late-cold-chain.jsonl"} <= names, sorted(names)
    assert "def to_celsius(raw: dict) -> dict:" in (state / "plan.signed").read_text()  # the app's source
    modes = {p.relative_to(state).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [state, *state.rglob("*")]}
    wrong = {name: oct(mode) for name, mode in modes.items() if mode != (0o700 if (state / name).is_dir() else 0o600)}
    assert not wrong, f"state entries with modes other than 0700 (directories) and 0600 (files): {wrong}"
