"""``spanedge hub --spark-master spark://...``: the hub's queries run on a standalone cluster's executors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import missing_part
from tests.integration.hubkit import (
    ROOT,
    Collector,
    Publisher,
    api_status,
    canon,
    cold_chain_readings,
    hub_ca,
    is_anomaly,
    stats_records,
    unit_stats,
)
from tests.integration.sparkcluster import StandaloneCluster, free_port
from tests.keys import key_env
from tests.polling import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

COLD_CHAIN = ROOT / "examples" / "cold_chain"
TOKEN = "cluster-test-token-0123456789abcdef0123456789"


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    if shutil.which("java") is None:
        missing_part("java is not installed; Spark needs a JDK 17+ (apt-get install openjdk-17-jre-headless)")
    with StandaloneCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g") as started:
        yield started


def test_the_hub_runs_the_cold_chain_on_a_standalone_cluster(mosquitto: Any, cluster: Any, tmp_path: Path) -> None:
    from hub.api.client import HubClient

    sites_file = tmp_path / "sites.yaml"
    sites_file.write_text((COLD_CHAIN / "sites.yaml").read_text().replace("mqtt://localhost:1883", mosquitto.url))
    # the ingest log and the checkpoints: a directory every executor can read (shared storage on a real cluster)
    shared = tmp_path / "shared"
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    env |= {"SPANEDGE_TOKEN": TOKEN, **key_env(tmp_path), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-c", "from spanedge.cli import main; main()", "hub", "--sites", str(sites_file)]
    command += ["--port", str(port), "--state-dir", str(shared), "--spark-master", cluster.url]
    command += ["--trigger", "500 milliseconds", "--conf", "spark.executor.memory=512m"]
    log = tmp_path / "hub.log"
    hub = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    readings = cold_chain_readings(seconds=40)
    stats = {site: unit_stats(rows) for site, rows in readings.items()}
    expected = sorted(canon(s) for rows in stats.values() for s in rows if is_anomaly(s))
    assert expected, "the generated readings must hold anomalies to check"
    collector = Collector(mosquitto.url, "cold-chain/alerts")
    publisher = Publisher(mosquitto.url, "cold-chain")
    try:
        ca = hub_ca(shared)
        wait_for(lambda: api_status(f"{url}/healthz", ca) == 200, 240, "the hub to answer /healthz (see hub.log)")
        plan = HubClient(url, TOKEN, timeout=300, ca_file=ca).deploy(COLD_CHAIN / "app.py", sites_file)
        assert plan.site_of("anomaly") == "cloud"
        # the driver registered with the master and got executors on the workers
        wait_for(lambda: len(cluster.state().get("activeapps", [])) == 1, 120, "the hub's Spark application")
        app_state = cluster.state()["activeapps"][0]
        assert app_state["cores"] == 2, app_state
        assert app_state["memoryperexecutor"] == 512, app_state  # spanedge hub --conf reached the session
        for site, rows in stats.items():  # window results as the agents publish them
            publisher.send(stats_records(site, rows), batch=20)
        wait_for(lambda: len(collector.get("cold-chain/alerts")) >= len(expected), 300, "the fleet alerts")
        got = sorted(canon(v) for v in collector.get("cold-chain/alerts"))
        assert got == expected
        assert hub.poll() is None, "the hub exited"
    finally:
        publisher.close()
        collector.close()
        hub.terminate()
        try:
            hub.wait(timeout=90)
        except subprocess.TimeoutExpired:
            hub.kill()
            hub.wait(timeout=30)
        print(log.read_text()[-4000:])  # shown if the test fails
