"""An agent whose app reads an HTTP push stream and a tailed file: records answered and saved after their commit."""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from simulate.ports import free_port
from spanedge.loader import load_app
from spanedge.sites import Sites, parse_sites
from spanedge.testing import local_plan
from spanedge.wire import heartbeat
from tests.polling import poll

from .agentkit import HubObserver

APP = """
from spanedge import App, sinks

app = App("yard")
app.source("weather").sink(sinks.memory("weather"), name="weather_out", scope="local")
app.source("scale").sink(sinks.memory("scale"), name="scale_out", scope="local")
app.source("gate").sink(sinks.memory("gate"), name="gate_out", scope="local")
"""


def sites_yaml(hub: str, site: str, port: int, log: Path) -> str:
    return f"""
sites:
  cloud: {{tier: hub, broker: "{hub}"}}
  yard-1:
    tier: spoke
    broker: "{site}"
    streams:
      weather: {{url: "http://127.0.0.1:{port}/ingest", rate: 10, options: {{token_env: YARD_PUSH_TOKEN}}}}
      scale: {{url: "file://{log}", rate: 10, options: {{poll_s: 0.05}}}}
      gate: {{url: "file://{log.parent}/no-such-file.jsonl", rate: 1}}
"""


def post(port: int, records: list[dict[str, Any]]) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("POST", "/ingest", orjson.dumps(records), {"Authorization": "Bearer yard-token"})
        answer = connection.getresponse()
        return answer.status, orjson.loads(answer.read())
    finally:
        connection.close()


def start(sites: Sites, app_file: Path, state: Path) -> tuple[Agent, asyncio.Task[None]]:
    plan = dataclasses.replace(local_plan(load_app(app_file), sites), app_source=app_file.read_text())
    config = AgentConfig("yard-1", sites, state, heartbeat_interval=0.5, checkpoint_interval=0.2)
    agent = Agent(config, [plan], connect=PahoTransport)
    return agent, asyncio.create_task(agent.run())


@pytest.mark.timeout(120)
async def test_pushed_records_are_committed_before_the_answer_and_a_tail_resumes(
    mosquitto_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("YARD_PUSH_TOKEN", "yard-token")
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    observer = HubObserver(hub.port)
    port, log = free_port(), tmp_path / "scale.jsonl"
    log.write_bytes(b'{"kg": 1}\n{"kg": 2}\n')
    sites = parse_sites(sites_yaml(hub.url, site.url, port, log))
    app_file = tmp_path / "yard.py"
    app_file.write_text(APP)
    agent, task = start(sites, app_file, tmp_path / "state")
    try:
        runners = agent.intake.connectors

        def ready() -> bool:
            live = [runners.get(("yard-1", s)) for s in ("weather", "scale")]
            return all(r is not None and r.subscribed.is_set() for r in live)

        await poll(ready, 30, "the two sources")
        for batch in ([{"t": 1}, {"t": 2}], [{"t": 3}]):
            assert await asyncio.to_thread(post, port, batch) == (200, {"accepted": len(batch)})
            assert agent.memory["weather"][-len(batch) :] == batch  # committed (and served) before the answer
        await poll(lambda: len(agent.memory["scale"]) == 2, 30, "the file's lines")
        assert agent.memory["scale"] == [{"kg": 1}, {"kg": 2}]

        def reported() -> dict[str, Any]:  # the connectors of the last heartbeat the hub got
            beats = [heartbeat.decode(p)[0] for t, p in observer.messages if t.endswith("/yard-1/heartbeat")]
            return beats[-1].connectors if beats and "gate" in beats[-1].connectors else {}

        await poll(lambda: (reported().get("gate") or {}).get("reconnects", 0) >= 1, 60, "the missing file reported")
        states = reported()
        assert states["weather"] == {"server": f"http://127.0.0.1:{port}/ingest", "up": True, "reconnects": 0}
        assert states["scale"]["up"] is True
        assert states["gate"]["up"] is False
        assert states["gate"]["last_error"].startswith("FileNotFoundError: [Errno 2] No such file or directory")
    finally:
        agent.stop()
        await asyncio.wait_for(task, 30)
    with log.open("ab") as f:
        f.write(b'{"kg": 3}\n')
    log.rename(tmp_path / "scale.jsonl.1")
    log.write_bytes(b'{"kg": 4}\n')
    agent, task = start(sites, app_file, tmp_path / "state")
    try:
        await poll(lambda: len(agent.memory["scale"]) == 2, 30, "the lines written while the agent was down")
        assert agent.memory["scale"] == [{"kg": 3}, {"kg": 4}]
    finally:
        agent.stop()
        await asyncio.wait_for(task, 30)
        observer.close()
