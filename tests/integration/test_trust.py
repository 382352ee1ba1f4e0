"""Trust end to end: a hub process and agents on a real Mosquitto with the generated ACL, passwords and TLS.

The hub's key is made and rotated with ``spanedge keys``; the hub signs with
the new key. An agent that trusts only the old key, or a key the hub never
had, runs nothing and logs why at WARNING; so does an agent that gets
truck-9's plan, validly signed, replayed on its own plan topic, until its own
plan comes. The hub's REST API, started with an admin and a read-only token,
answers 403 to the read token on ``POST /apps`` and ``DELETE``, 413 to an
oversized body (declared or streamed), 422 to hostile app names, and writes
who deployed which code hash to its audit log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from edge_agent.agent import Agent
from edge_agent.config import AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from hub.api.client import HubClient
from simulate.broker import BrokerSecurity, Mosquitto, free_port, mosquitto_path
from simulate.tls import TlsFiles, make_tls
from spanedge import topics
from spanedge.broker_acl import acl_text, password_file
from spanedge.errors import SpanEdgeError
from spanedge.loader import source_hash
from spanedge.signing import PlanPublicKey, TrustedKeys, load_signing_key, parse_trusted_keys
from spanedge.sites import Sites, parse_sites
from tests.conftest import missing_part
from tests.integration.hubkit import api_status, hub_ca
from tests.keys import ROGUE
from tests.polling import poll, wait_for

from .test_broker_acl import PASSWORDS, Session

ROOT = Path(__file__).resolve().parents[2]
APP_FILE = ROOT / "examples" / "cold_chain" / "app.py"
ADMIN = "trust-admin-token-0123456789abcdef0123"
READ = "trust-read-token-0123456789abcdef01234"


def _env_of(user: str) -> str:
    return f"TEST_MQTT_PASSWORD_{user.replace('-', '_').upper()}"


def sites_text(port: int, ca: Path, user: str) -> str:
    """The fleet as ``user`` sees it: every broker entry logs in as ``user`` over TLS."""
    login = f'username: {user}, password_env: {_env_of(user)}, tls: {{ca_file: "{ca}"}}'
    broker = f'"mqtts://127.0.0.1:{port}"'
    return f"""
sites:
  cloud: {{tier: hub, broker: {broker}, cpu: 4, {login}}}
  truck-7:
    {{tier: spoke, broker: {broker}, cpu: 1, {login},
     streams: {{readings: {{topic: "trucks/7/+/temp", rate: 10}}}}}}
  truck-9:
    {{tier: spoke, broker: {broker}, cpu: 1, {login},
     streams: {{readings: {{topic: "trucks/9/+/temp", rate: 10}}}}}}
default_link: {{latency_ms: 40, bandwidth_mbps: 10}}
"""


class Fleet:
    """A secured broker, the hub's rotated keys and a running hub process."""

    def __init__(self, tmp: Path, broker: Mosquitto, tls: TlsFiles) -> None:
        self.tmp = tmp
        self.broker = broker
        self.tls = tls
        self.url = ""
        self.hub_ca = hub_ca(tmp / "hub-state")
        self.hub: subprocess.Popen[bytes] | None = None
        self.keys = tmp / "keys"

    def sites(self, user: str) -> Sites:
        return parse_sites(sites_text(self.broker.port, self.tls.ca_file, user))

    def keys_cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", "from spanedge.cli import main; main()", "keys", *args],
            cwd=ROOT,
            capture_output=True,
            timeout=60,
            check=True,
        )
        return done.stdout.decode()

    def start_hub(self) -> None:
        sites_file = self.tmp / "hub-sites.yaml"
        sites_file.write_text(sites_text(self.broker.port, self.tls.ca_file, "cloud"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
        env |= {
            "SPANEDGE_TOKEN": ADMIN,
            "SPANEDGE_READ_TOKEN": READ,
            "SPANEDGE_PLAN_KEY_FILE": str(self.keys / "plan-key.next.pem"),  # the hub signs with the new key
            _env_of("cloud"): PASSWORDS["cloud"],
        }
        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        command = [sys.executable, "-c", "from spanedge.cli import main; main()", "hub", "--sites", str(sites_file)]
        command += ["--no-spark", "--port", str(port), "--state-dir", str(self.tmp / "hub-state")]
        command += ["--min-replan-interval", "3600", "--down-after", "3600"]  # the plans stay as deployed
        self.hub = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        wait_for(lambda: api_status(f"{self.url}/healthz", self.hub_ca) == 200, 60, "the hub to answer /healthz")

    def stop_hub(self) -> str:
        """Stop the hub process and return what it logged."""
        assert self.hub is not None
        self.hub.send_signal(signal.SIGTERM)
        try:
            output, _ = self.hub.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.hub.kill()
            output, _ = self.hub.communicate(timeout=30)
        return output.decode()


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    for user, password in PASSWORDS.items():
        monkeypatch.setenv(_env_of(user), password)
    tls = make_tls(tmp_path / "tls")
    sites = parse_sites(sites_text(1883, tls.ca_file, "cloud"))
    (tmp_path / "passwords").write_text(password_file(PASSWORDS))
    (tmp_path / "acl").write_text(acl_text(sites, list(sites.sites)))
    security = BrokerSecurity(tls, tmp_path / "passwords", tmp_path / "acl")
    with Mosquitto(workdir=tmp_path / "broker", security=security) as broker:
        fleet = Fleet(tmp_path, broker, tls)
        try:
            yield fleet
        finally:
            if fleet.hub is not None and fleet.hub.poll() is None:
                fleet.stop_hub()


def _retained(fleet: Fleet, site: str) -> bytes:
    """The plan message retained for ``site``, read as the hub."""
    session = Session(fleet.sites("cloud").site("cloud").mqtt(), f"read-plan-{site}")
    try:
        session.client.subscribe(topics.control(site, "plan"), 1)
        wait_for(lambda: session.messages, what=f"the retained plan of {site}")
    finally:
        session.close()
    return session.messages[0][1]


def _publish_plan(fleet: Fleet, site: str, message: bytes) -> None:
    session = Session(fleet.sites("cloud").site("cloud").mqtt(), f"put-plan-{site}")
    try:
        session.publish(topics.control(site, "plan"), message, retain=True)
    finally:
        session.close()


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage() and r.levelno == logging.WARNING]


async def _agent_rejects(
    fleet: Fleet, trusted: TrustedKeys, state: str, reason: str, caplog: pytest.LogCaptureFixture
) -> Agent:
    """Run truck-7's agent until it logs ``reason`` at WARNING; check it runs nothing; return it, stopped."""
    config = AgentConfig("truck-7", fleet.sites("truck-7"), fleet.tmp / state, trusted_keys=trusted)
    agent = Agent(config, connect=PahoTransport)
    task = asyncio.create_task(agent.run())
    try:
        await poll(lambda: _warnings(caplog, reason), 20, f"the agent to log {reason!r}")
        assert agent.pipelines == {}
        assert agent.plan_intake is not None
        assert agent.plan_intake.version == -1
    finally:
        agent.stop()
        await asyncio.wait_for(task, 20)
    return agent


@pytest.mark.timeout(240)
async def test_only_plans_the_hub_signs_for_a_site_run_there(fleet: Fleet, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    fleet.keys_cli("generate", "--out", str(fleet.keys))
    fleet.keys_cli("rotate", "--out", str(fleet.keys))
    old = parse_trusted_keys((fleet.keys / "plan-key.pub").read_text(), "plan-key.pub")
    new = load_signing_key(fleet.keys / "plan-key.next.pem").public_key
    assert old.ids != [new.key_id]
    await asyncio.to_thread(fleet.start_hub)
    plan = await asyncio.to_thread(HubClient(fleet.url, ADMIN, ca_file=fleet.hub_ca).deploy, APP_FILE)
    assert plan.app == "cold-chain"
    truck7, truck9 = _retained(fleet, "truck-7"), _retained(fleet, "truck-9")

    # the hub's key was rotated, but the agent still trusts only the old one
    await _agent_rejects(fleet, old, "old-key", f"signed with key '{new.key_id}', but this agent trusts only", caplog)
    # a key the hub never had
    rogue = TrustedKeys([PlanPublicKey(ROGUE.public_key.raw)])
    await _agent_rejects(fleet, rogue, "wrong-key", f"trusts only key ids [{ROGUE.key_id}]", caplog)
    # truck-9's plan, validly signed, replayed on truck-7's topic, to an agent that trusts the right key
    _publish_plan(fleet, "truck-7", truck9)
    trusted = TrustedKeys([new])
    await _agent_rejects(fleet, trusted, "replayed", "plan is for site 'truck-9', but this agent serves", caplog)

    # the same agent then runs its own plan: the rejections above were the plans', not the agent's
    _publish_plan(fleet, "truck-7", truck7)
    config = AgentConfig("truck-7", fleet.sites("truck-7"), fleet.tmp / "replayed", trusted_keys=trusted)
    agent = Agent(config, connect=PahoTransport)
    task = asyncio.create_task(agent.run())
    try:
        await poll(lambda: "cold-chain" in agent.pipelines, 30, "truck-7's own plan to run")
    finally:
        agent.stop()
        await asyncio.wait_for(task, 20)
    fleet.stop_hub()


def _hostile(name: str) -> str:
    return APP_FILE.read_text().replace('App("cold-chain"', f"App({name!r}", 1)


@pytest.mark.timeout(180)
def test_the_rest_api_scopes_tokens_bounds_bodies_and_refuses_hostile_names(fleet: Fleet) -> None:
    fleet.keys_cli("generate", "--out", str(fleet.keys))
    fleet.keys_cli("rotate", "--out", str(fleet.keys))
    fleet.start_hub()
    admin = {"Authorization": f"Bearer {ADMIN}"}
    read = {"Authorization": f"Bearer {READ}"}
    source = APP_FILE.read_text()
    assert 'App("cold-chain"' in source
    verify = ssl.create_default_context(cafile=fleet.hub_ca)
    with httpx.Client(base_url=fleet.url, timeout=60, verify=verify) as api:
        assert api.post("/apps", json={"source": source}, headers=read).status_code == 403
        assert api.post("/apps", json={"source": source}, headers=admin).status_code == 201
        assert api.get("/apps", headers=read).status_code == 200
        assert api.delete("/apps/cold-chain", headers=read).status_code == 403

        huge: dict[str, Any] = {"source": "#" * (5 * 2**20)}
        assert api.post("/apps", json=huge, headers=admin).status_code == 413
        streamed = (b'{"source": "' if i == 0 else b"#" * 2**20 for i in range(50))  # 50 MB, no length given
        answer = api.post("/apps", content=streamed, headers={**admin, "content-type": "application/json"})
        assert answer.status_code == 413
        assert answer.json()["error"] == "PayloadTooLarge"

        for name in ["..", 'q"uote', "x" * 300, "Cold-Chain"]:
            answer = api.post("/apps", json={"source": _hostile(name)}, headers=admin)
            assert answer.status_code == 422, (name, answer.text)
            assert answer.json()["error"] == "InvalidName"
            assert str(fleet.tmp) not in answer.text
        for path in ["%2E%2E", "q%22uote", "x" * 300, "Cold-Chain", "a%00b"]:
            for method in ("GET", "DELETE"):
                answer = api.request(method, f"/apps/{path}", headers=admin)
                assert answer.status_code == 422, (method, path, answer.text)
        assert [a["app"] for a in api.get("/apps", headers=read).json()["apps"]] == ["cold-chain"]
        assert api.delete("/apps/cold-chain", headers=admin).status_code == 200
    output = fleet.stop_hub()
    assert f"POST /apps by the admin token of SPANEDGE_TOKEN, app source sha256 {source_hash(source)}" in output
    assert "DELETE /apps/cold-chain by the admin token of SPANEDGE_TOKEN" in output
    assert ADMIN not in output
    assert READ not in output
    # no hostile name made a file: only the apps, the plans, the CA, the API's certificate and the hub's identity
    assert sorted(p.name for p in (fleet.tmp / "hub-state").iterdir()) == [
        "apps",
        "ca",
        "distribution.json",
        "hub-id.json",
        "hub.lock",
        "tls",
    ]
