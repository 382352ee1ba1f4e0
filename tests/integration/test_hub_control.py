"""The hub's control plane against a real Mosquitto: plan distribution, heartbeats, the hub process."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from edge_agent import plans
from hub.api.client import HubClient, HubError
from hub.control.coordinator import Coordinator
from hub.control.distribution import MqttControl, PlanDistributor
from hub.control.registry import SiteRegistry
from hub.control.state import StateStore
from simulate.broker import free_port
from spanedge import topics
from spanedge.errors import InvalidDataflow, InvalidPlan
from spanedge.loader import load_app
from spanedge.signing import sign_plan
from spanedge.sites import Sites, parse_sites
from tests.integration.hubkit import CLI, api_status, hub_ca, start_hub
from tests.keys import KEY, ROGUE, TRUSTED, key_env
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
COLD_CHAIN = ROOT / "examples" / "cold_chain"
TOKEN = "integration-token-0123456789abcdef0123"

pytestmark = pytest.mark.timeout(90)


def sites_text(broker_url: str) -> str:
    return (COLD_CHAIN / "sites.yaml").read_text().replace("mqtt://localhost:1883", broker_url)


@pytest.fixture
def sites(mosquitto: Any) -> Sites:
    return parse_sites(sites_text(mosquitto.url))


def fresh_message(port: int, topic: str, timeout: float = 10.0) -> mqtt.MQTTMessage:
    """Connect a new client, subscribe, and return the first (retained) message on ``topic``."""
    received: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"fresh-{time.monotonic_ns()}")
    client.on_connect = lambda c, *_: c.subscribe(topic, qos=1)
    client.on_message = lambda c, u, m: received.put(m)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        return received.get(timeout=timeout)
    finally:
        client.disconnect()
        client.loop_stop()


def publish(port: int, topic: str, payload: bytes, retain: bool = True) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{time.monotonic_ns()}")
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)
    finally:
        client.disconnect()
        client.loop_stop()


@pytest.fixture
def control_plane(mosquitto: Any, sites: Sites, tmp_path: Path) -> Iterator[tuple[Coordinator, MqttControl]]:
    registry = SiteRegistry(sites)
    control = MqttControl(sites.hubs[0].mqtt(), on_heartbeat=registry.heartbeat, client_id="hub-under-test")
    control.start()
    assert control.connected
    store = StateStore(tmp_path / "hub")
    coordinator = Coordinator(registry, distributor=PlanDistributor(control, KEY, store), store=store)
    yield coordinator, control
    control.stop()


def test_a_fresh_agent_receives_the_retained_signed_plan_and_verifies_it(
    mosquitto: Any, control_plane: tuple[Coordinator, MqttControl]
) -> None:
    coordinator, _ = control_plane
    source = (COLD_CHAIN / "app.py").read_text()
    record, status = coordinator.deploy(source, "app.py")
    assert set(status.values()) == {"published"}

    message = fresh_message(mosquitto.port, topics.control("truck-7", "plan"))
    assert message.retain
    intake = plans.PlanIntake("truck-7", TRUSTED)
    (plan,) = intake.accept(message.payload)
    assert plan == record.plan
    assert plan.app_source == source
    assert {a.replica for a in plan.at("truck-7")} >= {"to_celsius@truck-7", "unit_stats@truck-7"}

    # a replay of the message it already applied is stale
    with pytest.raises(InvalidPlan, match="not newer"):
        intake.accept(message.payload)

    # deleting the app republishes the site's message without it
    coordinator.delete("cold-chain")
    emptied = fresh_message(mosquitto.port, topics.control("truck-7", "plan"))
    assert intake.accept(emptied.payload) == []


def test_forged_and_stale_plans_on_the_broker_are_rejected_by_an_agent(
    mosquitto: Any, control_plane: tuple[Coordinator, MqttControl]
) -> None:
    coordinator, _ = control_plane
    source = (COLD_CHAIN / "app.py").read_text()
    coordinator.deploy(source, "app.py")
    topic = topics.control("truck-9", "plan")
    first = fresh_message(mosquitto.port, topic).payload
    coordinator.deploy(source.replace("0.0 <= stats", "1.0 <= stats"), "app.py")
    second = fresh_message(mosquitto.port, topic).payload
    assert second != first

    intake = plans.PlanIntake("truck-9", TRUSTED)
    assert intake.accept(second)[0].version == 2

    publish(mosquitto.port, topic, first)  # an attacker replays the older, validly signed plan
    with pytest.raises(InvalidPlan, match="not newer"):
        intake.accept(fresh_message(mosquitto.port, topic).payload)

    body = orjson.loads(orjson.loads(second)["payload"])
    body["version"] += 1
    publish(mosquitto.port, topic, sign_plan(body, ROGUE))  # a gateway signing a plan for another site
    with pytest.raises(InvalidPlan, match="trusts only key ids"):
        intake.accept(fresh_message(mosquitto.port, topic).payload)
    assert intake.version == orjson.loads(orjson.loads(second)["payload"])["version"]


def test_heartbeats_over_mqtt_feed_the_registry(mosquitto: Any, control_plane: tuple[Coordinator, MqttControl]) -> None:
    coordinator, _ = control_plane
    registry = coordinator.registry
    beat = {
        "site": "truck-7",
        "ts": time.time(),
        "apps": ["cold-chain"],
        "operators": {"readings@truck-7": {"in": 10, "out": 10, "rate_in": 90.0, "rate_out": 90.0}},
        "outbox": {"records": 3, "bytes": 300, "dropped": 0, "sent": 10},
        "latency": {"cloud": {"rtt_ms": 120.0, "p95_ms": 150.0, "samples": 5}},
    }
    publish(mosquitto.port, topics.control("truck-7", "heartbeat"), orjson.dumps(beat), retain=False)
    wait_for(lambda: registry.alive("truck-7"), what="the heartbeat of truck-7")
    assert registry.link("truck-7", "cloud")["latency_ms"] == 60
    assert registry.stream_rate("readings", "truck-7") == 90
    assert not registry.alive("truck-9")


# -- the hub process -------------------------------------------------------------------------


@pytest.fixture
def hub_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    return {**env, "SPANEDGE_TOKEN": TOKEN, **key_env(tmp_path)}


def test_the_hub_refuses_to_start_without_a_token(mosquitto: Any, tmp_path: Path, hub_env: dict[str, str]) -> None:
    sites_file = tmp_path / "sites.yaml"
    sites_file.write_text(sites_text(mosquitto.url))
    env = {k: v for k, v in hub_env.items() if k != "SPANEDGE_TOKEN"}
    proc = start_hub(sites_file, tmp_path / "state", free_port(), env)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert b"export SPANEDGE_TOKEN=" in output


def test_the_hub_process_serves_authenticates_deploys_and_resumes_after_sigkill(
    mosquitto: Any, tmp_path: Path, hub_env: dict[str, str]
) -> None:
    sites_file = tmp_path / "sites.yaml"
    sites_file.write_text(sites_text(mosquitto.url))
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    ca = hub_ca(tmp_path / "state")
    proc = start_hub(sites_file, tmp_path / "state", port, hub_env)
    try:
        wait_for(lambda: api_status(f"{url}/healthz", ca) == 200, 60, "the hub to answer /healthz")
        assert api_status(f"{url}/apps", ca) == 401
        assert api_status(f"{url}/apps", ca, "wrong") == 401
        assert api_status(f"{url}/apps", ca, TOKEN) == 200
        with pytest.raises(HubError, match="rejected the token"):
            HubClient(url, "wrong", ca_file=ca).apps()

        plan = HubClient(url, TOKEN, ca_file=ca).deploy(COLD_CHAIN / "app.py", sites_file)
        assert plan.app == "cold-chain"
        assert plan.site_of("anomaly") == "cloud"
        assert set(plan.baselines) == {"central", "local-first"}

        bad = tmp_path / "bad_app.py"
        bad.write_text("from spanedge import App\napp = App('broken'\n")
        with pytest.raises(InvalidDataflow) as remote:
            HubClient(url, TOKEN, ca_file=ca).deploy(bad, sites_file)
        with pytest.raises(InvalidDataflow) as local:
            load_app(bad.resolve())
        assert str(remote.value) == str(local.value)

        status = subprocess.run(
            [*CLI, "status", "--hub-url", url, "--hub-ca", str(ca)],
            cwd=ROOT,
            env=hub_env,
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert "app 'cold-chain' plan v1" in status.stdout.decode()
        assert "truck-7" in status.stdout.decode()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    proc = start_hub(sites_file, tmp_path / "state", port, hub_env)
    try:
        wait_for(lambda: api_status(f"{url}/healthz", ca) == 200, 60, "the restarted hub to answer /healthz")
        client = HubClient(url, TOKEN, ca_file=ca)
        assert [(a["app"], a["version"]) for a in client.apps()] == [("cold-chain", 1)]
        assert client.placement("cold-chain")["history"][0]["reason"] == "deployed"
        message = fresh_message(mosquitto.port, topics.control("truck-7", "plan"))
        (resumed,) = plans.PlanIntake("truck-7", TRUSTED).accept(message.payload)
        assert resumed == plan
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_plans_published_while_the_broker_is_down_are_sent_when_it_is_back(mosquitto: Any, sites: Sites) -> None:
    control = MqttControl(sites.hubs[0].mqtt(), client_id="hub-queueing", ack_timeout=1.0).start()
    try:
        mosquitto.stop()
        wait_for(lambda: not control.connected, what="the hub to notice the broker is gone")
        status = PlanDistributor(control, KEY).publish({}, ["truck-7"])
        assert status == {"truck-7": "pending"}
        mosquitto.start()
        message = fresh_message(mosquitto.port, topics.control("truck-7", "plan"), timeout=30)
        assert plans.PlanIntake("truck-7", TRUSTED).accept(message.payload) == []
    finally:
        control.stop()
