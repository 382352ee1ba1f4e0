"""One hub per hub site and broker, with real Mosquitto and real hub processes.

A second hub against the broker of a running one exits with status 2 naming
the first, before it touches the first's MQTT sessions or starts Spark, and
the first keeps ingesting; a second hub on the same state directory is
refused by its lock; a taken REST port fails before Spark starts; a SIGKILLed
hub restarts on its state directory and resumes its persistent MQTT session.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from simulate.broker import free_port
from spanedge import topics
from spanedge.wire.presence import decode
from tests.conftest import missing_part
from tests.integration.hubkit import EXAMPLES, HubProcess, Publisher, cold_chain_readings, raw_records
from tests.integration.test_hub_control import fresh_message
from tests.keys import key_env
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(600)

TOKEN = "integration-token-0123456789abcdef0123"
APP = "cold-chain"
#: What the hub logs when it starts its parts: a hub refused before this touched no MQTT session nor Spark.
STARTING = "hub site cloud, broker"
#: Spark starts a hub's data plane; a hub with Spark needs a while for it on a busy machine.
SPARK_START_S = 240


@pytest.fixture
def hub_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    return {**env, "SPANEDGE_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", **key_env(tmp_path)}


@pytest.fixture
def sites_file(mosquitto: Any, tmp_path: Path) -> Path:
    path = tmp_path / "sites.yaml"
    path.write_text(
        (EXAMPLES / "cold_chain" / "sites.yaml").read_text().replace("mqtt://localhost:1883", mosquitto.url)
    )
    return path


@pytest.fixture
def spark_parts() -> None:
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            missing_part(f"{module} is not installed: pip install 'spanedge[hub]'")
    if shutil.which("java") is None:
        missing_part("java is not installed; Spark needs a JDK 17+ (apt-get install openjdk-17-jre-headless)")


def _instance(state_dir: Path) -> str:
    return str(json.loads((state_dir / "hub-id.json").read_text())["instance"])


def _presence(mosquitto: Any) -> Any:
    return decode(bytes(fresh_message(mosquitto.port, topics.control("cloud", "presence")).payload))


@pytest.mark.spark
@pytest.mark.usefixtures("spark_parts")
def test_a_second_hub_on_the_broker_exits_2_naming_the_first_which_keeps_ingesting(
    mosquitto: Any, tmp_path: Path, sites_file: Path, hub_env: dict[str, str]
) -> None:
    rows = cold_chain_readings(seconds=20)["truck-7"]
    first = HubProcess(sites_file, tmp_path / "first", free_port(), hub_env)
    publisher = Publisher(mosquitto.url, APP)
    try:
        wait_for(first.ingesting, SPARK_START_S, "the first hub's ingest to subscribe")
        publisher.send(raw_records("truck-7", rows[:20]))
        wait_for(lambda: first.ingested(APP, "truck-7", "readings") == 20, 60, "the first 20 records in its log")

        second = HubProcess(sites_file, tmp_path / "second", free_port(), hub_env)
        assert second.wait() == 2, second.output
        refused = second.output
        assert "error: another hub holds hub site 'cloud' on broker " + mosquitto.url in refused
        state_dir = (tmp_path / "first").resolve()
        held_by = f"instance {_instance(tmp_path / 'first')} (pid {first.proc.pid} on host {socket.gethostname()}"
        assert held_by in refused
        assert "live since 20" in refused
        assert f"state dir {state_dir})" in refused
        assert "Stop that hub before starting this one" in refused
        assert STARTING not in refused  # neither its ingest session nor Spark were started
        assert STARTING in first.output

        publisher.send(raw_records("truck-7", rows[20:40], first_seq=20))
        wait_for(lambda: first.ingested(APP, "truck-7", "readings") == 40, 60, "the next 20 records in its log")
        assert first.ingesting()
        assert "ingest: disconnected" not in first.output
        assert _presence(mosquitto).instance == _instance(tmp_path / "first")
    finally:
        publisher.close()
        first.stop()
    assert first.proc.returncode == 0, first.output
    gone = _presence(mosquitto)
    assert (gone.instance, gone.live) == (_instance(tmp_path / "first"), False)


def test_a_second_hub_on_the_same_state_dir_is_refused_by_its_lock(
    mosquitto: Any, tmp_path: Path, sites_file: Path, hub_env: dict[str, str]
) -> None:
    first = HubProcess(sites_file, tmp_path / "state", free_port(), hub_env, "--no-spark")
    try:
        wait_for(lambda: first.get("/healthz")[0] == 200, 60, "the first hub to answer /healthz")
        second = HubProcess(sites_file, tmp_path / "state", free_port(), hub_env, "--no-spark")
        assert second.wait() == 2, second.output
        assert f"the state directory {(tmp_path / 'state').resolve()} is in use by another hub" in second.output
        assert f"pid {first.proc.pid} on host {socket.gethostname()}, instance {_instance(tmp_path / 'state')}" in (
            second.output
        )
        assert first.get("/healthz")[0] == 200
    finally:
        first.stop()


def test_a_taken_rest_port_fails_before_spark_starts(
    mosquitto: Any, tmp_path: Path, sites_file: Path, hub_env: dict[str, str]
) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        hub = HubProcess(sites_file, tmp_path / "state", port, hub_env)
        assert hub.wait() == 2, hub.output
    finally:
        taken.close()
    assert f"error: the hub cannot listen on 127.0.0.1:{port} for its REST API: Address already in use" in hub.output
    assert "start the hub with another --port" in hub.output
    assert STARTING not in hub.output  # no ingest, no Spark
    assert not (tmp_path / "state" / "ingest").exists()
    gone = _presence(mosquitto)  # it let go of the hub site: the next hub starts
    assert (gone.instance, gone.live) == (_instance(tmp_path / "state"), False)


@pytest.mark.spark
@pytest.mark.usefixtures("spark_parts")
def test_a_sigkilled_hub_restarts_on_its_state_dir_and_resumes_its_session(
    mosquitto: Any, tmp_path: Path, sites_file: Path, hub_env: dict[str, str]
) -> None:
    rows = cold_chain_readings(seconds=30)["truck-9"]
    port = free_port()
    hub = HubProcess(sites_file, tmp_path / "state", port, hub_env)
    publisher = Publisher(mosquitto.url, APP)
    try:
        wait_for(hub.ingesting, SPARK_START_S, "the hub's ingest to subscribe")
        publisher.send(raw_records("truck-9", rows[:20]))
        wait_for(lambda: hub.ingested(APP, "truck-9", "readings") == 20, 60, "20 records in the hub's log")
        instance = _instance(tmp_path / "state")
        hub.kill()
        # queued at the broker for the dead hub's persistent ingest session
        publisher.send(raw_records("truck-9", rows[20:40], first_seq=20))

        hub = HubProcess(sites_file, tmp_path / "state", port, hub_env)
        wait_for(hub.ingesting, SPARK_START_S, "the restarted hub's ingest to subscribe")
        wait_for(lambda: hub.ingested(APP, "truck-9", "readings") == 20, 60, "the records queued while it was dead")
        publisher.send(raw_records("truck-9", rows[40:60], first_seq=40))
        wait_for(lambda: hub.ingested(APP, "truck-9", "readings") == 40, 60, "the records sent after its restart")
        assert _instance(tmp_path / "state") == instance
        assert "(session present: True)" in hub.output  # its own persistent session, resumed
        live = _presence(mosquitto)
        assert (live.instance, live.pid, live.live) == (instance, hub.proc.pid, True)
    finally:
        publisher.close()
        hub.stop()
    assert hub.proc.returncode == 0, hub.output


@pytest.mark.spark
@pytest.mark.usefixtures("spark_parts")
def test_a_hub_upgraded_on_its_state_dir_takes_what_its_old_session_holds(
    mosquitto: Any, tmp_path: Path, sites_file: Path, hub_env: dict[str, str]
) -> None:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    # the ingest session of a hub from before instance ids, with records queued while that hub was stopped
    old = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="spanedge-hub-ingest-cloud", clean_session=False)
    acked = threading.Event()
    old.on_subscribe = lambda *_: acked.set()
    old.connect("127.0.0.1", mosquitto.port)
    old.loop_start()
    old.subscribe(f"{topics.PREFIX}/+/+/+", qos=1)
    assert acked.wait(30), "the broker did not acknowledge the old session's subscription"
    old.disconnect()
    old.loop_stop()
    state = tmp_path / "state"
    (state / "ingest").mkdir(parents=True)  # its ingest log
    rows = cold_chain_readings(seconds=20)["truck-7"]
    publisher = Publisher(mosquitto.url, APP)
    hub: HubProcess | None = None
    try:
        publisher.send(raw_records("truck-7", rows[:20]))
        hub = HubProcess(sites_file, state, free_port(), hub_env)
        wait_for(hub.ingesting, SPARK_START_S, "the upgraded hub's ingest to subscribe")
        wait_for(lambda: hub.ingested(APP, "truck-7", "readings") == 20, 60, "the records the old session held")
        assert json.loads((state / "hub-id.json").read_text())["legacy_ingest"] is True
        assert "(session present: True)" in hub.output
    finally:
        publisher.close()
        if hub is not None:
            hub.stop()
