"""A real Prometheus scrapes a running hub and agent, and its query API returns their series."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import missing_part
from tests.integration.agentkit import AgentProcess, write_setup
from tests.integration.hubkit import api_status, hub_ca
from tests.integration.sparkcluster import free_port
from tests.keys import key_env
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "prometheus-test-token-0123456789abcdef"
CLI = [sys.executable, "-c", "from spanedge.cli import main; main()"]


def prometheus_path() -> str:
    found = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if found is None:
        missing_part("prometheus is not installed: apt-get install prometheus")
    assert found is not None
    return found


def lint(url: str, headers: dict[str, str], context: ssl.SSLContext | None = None) -> None:
    """Fetch the exposition at ``url`` (verified with ``context``) and check it with ``promtool check metrics``.

    Debian's prometheus package ships promtool.
    """
    promtool = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if promtool is None:
        missing_part("promtool is not installed: apt-get install prometheus")
    assert promtool is not None
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10, context=context) as answer:
        text = answer.read()
    assert b"spanedge_" in text, text[:500]
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, check=False, timeout=30)
    assert checked.returncode == 0, (url, checked.stdout, checked.stderr)
    assert checked.stdout.strip() == b"", (url, checked.stdout)


def query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.load(answer)
    except OSError:
        return []
    return list(body["data"]["result"]) if body.get("status") == "success" else []


def test_prometheus_scrapes_the_hub_and_an_agent(mosquitto_factory: Any, tmp_path: Path) -> None:
    binary = prometheus_path()
    hub_broker, site_broker = mosquitto_factory("hub"), mosquitto_factory("site")
    sites, plan, _ = write_setup(tmp_path, hub_broker.url, site_broker.url)
    hub_port, agent_port, prom_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    env |= {"SPANEDGE_TOKEN": TOKEN, **key_env(tmp_path)}
    hub_log = (tmp_path / "hub.log").open("wb")
    hub = subprocess.Popen(
        [
            *CLI,
            "hub",
            "--sites",
            str(sites),
            "--no-spark",
            "--port",
            str(hub_port),
            "--state-dir",
            str(tmp_path / "hub"),
        ],
        cwd=ROOT,
        env=env,
        stdout=hub_log,
        stderr=subprocess.STDOUT,
    )
    agent = AgentProcess(tmp_path, sites, plan, "--metrics-port", str(agent_port))
    ca = hub_ca(tmp_path / "hub")  # made by the hub at its first start, before it answers /healthz
    try:
        wait_for(lambda: api_status(f"https://127.0.0.1:{hub_port}/healthz", ca) == 200, 60, "the hub over HTTPS")
    except BaseException:
        hub.kill()
        hub.wait()
        hub_log.close()
        raise
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: hub
    scheme: https
    tls_config: {{ca_file: {ca}}}
    authorization: {{credentials: {TOKEN}}}
    static_configs: [{{targets: ["127.0.0.1:{hub_port}"]}}]
  - job_name: agent
    static_configs: [{{targets: ["127.0.0.1:{agent_port}"]}}]
"""
    )
    prom = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    try:
        agent.start()
        wait_for(lambda: len(query(prom_port, "up == 1")) == 2, 90, "both targets up in Prometheus")
        # the hub: its own process metrics and the sites it knows (the agent is standalone: no heartbeats there)
        assert query(prom_port, 'process_resident_memory_bytes{job="hub"}')
        links = query(prom_port, 'spanedge_link_latency_seconds{job="hub"}')
        assert {(r["metric"]["src"], r["metric"]["dst"]) for r in links} >= {("cloud", "truck-7")}
        # the agent: its outbox and operator counters, once a heartbeat was taken
        wait_for(lambda: query(prom_port, 'spanedge_agent_outbox_records{job="agent"}'), 60, "the agent's outbox")
        counters = query(prom_port, 'spanedge_operator_input_records_total{job="agent"}')
        assert {r["metric"]["replica"] for r in counters} >= {"readings@truck-7", "to_celsius@truck-7"}
        assert query(prom_port, 'process_cpu_seconds_total{job="agent"}')
        # both expositions pass Prometheus's own linter (counters end in _total, base units, ...)
        lint(
            f"https://127.0.0.1:{hub_port}/metrics",
            {"Authorization": f"Bearer {TOKEN}"},
            ssl.create_default_context(cafile=ca),
        )
        lint(f"http://127.0.0.1:{agent_port}/metrics", {})
    finally:
        prom.terminate()
        agent.terminate()
        hub.terminate()
        for proc in (prom, hub):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        hub_log.close()
