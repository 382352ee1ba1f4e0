"""The light core as a gateway gets it: ``pip install spanedge`` in a fresh venv, then a standalone agent.

Slow (marked ``slow``): it creates a virtualenv and installs the project and its
core dependencies from the package index, as on a new gateway (about 20-40 s).
The agent then runs from that venv, with a plan made here by the dev venv,
against real Mosquitto brokers: one for the site, one for the hub.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.polling import wait_for

from .agentkit import HubObserver, Sensor, client, readings, reference, results, same, write_setup

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: What the light core must not bring: the solver and its graph library, numpy, Spark, the web framework and its
#: models, the simulator's clients, and rich's help screens.
HEAVY = (
    *("numpy", "pulp", "highspy", "networkx", "pyspark", "pyarrow", "pandas", "fastapi", "pydantic", "uvicorn"),
    *("aiomqtt", "amqtt", "typer", "rich", "pygments"),
)
#: Installed with the light core, but not loaded by an agent that runs a plan file (they cost it resident memory):
#: the signature library (managed mode), the metrics server, and what pydantic's plugin loader imports.
NOT_LOADED_BY_A_STANDALONE_AGENT = ("cryptography", "prometheus_client", "importlib.metadata")


def sources() -> list[str]:
    """What the build needs: pyproject.toml, the readme and the packages it lists (not venvs, caches, tests)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = project["tool"]["setuptools"]["packages"]["find"]["include"]
    return ["pyproject.toml", project["project"]["readme"], *sorted({p.rstrip("*") for p in packages})]


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a fresh venv holding ``pip install <repo>`` with no extras."""
    tmp = tmp_path_factory.mktemp("light")
    src = tmp / "src"
    src.mkdir()
    for name in sources():
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    done = subprocess.run([*pip, str(src)], capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, f"pip install {src} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return env_dir / "bin"


def run(light: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(light / args[0]), *args[1:]], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_the_light_core_has_no_solver_spark_or_web_framework(light: Path) -> None:
    probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
    present = run(light, "python", "-c", probe, *HEAVY)
    assert present.returncode == 0, present.stderr
    assert present.stdout.split() == [], "the light core installed these"
    agents = run(light, "python", "-c", "import edge_agent.main, paho.mqtt.client, psutil, cryptography")
    assert agents.returncode == 0, agents.stderr


def test_the_agent_command_and_a_missing_extra(light: Path, tmp_path: Path) -> None:
    helped = run(light, "spanedge", "agent", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--state-dir" in helped.stdout
    app, sites = ROOT / "examples" / "cold_chain" / "app.py", ROOT / "examples" / "cold_chain" / "sites.yaml"
    planned = run(light, "spanedge", "deploy", str(app), "--sites", str(sites), "--dry-run", cwd=tmp_path)
    assert planned.returncode == 2
    assert "Traceback" not in planned.stderr
    assert "comes with the 'placement' extra: run pip install 'spanedge[placement]'" in planned.stderr


@pytest.fixture
def agent_log(tmp_path: Path) -> Iterator[Path]:
    """Where the agent logs; printed if the test fails, to show what the agent saw."""
    log = tmp_path / "agent.log"
    yield log
    if log.exists():
        sys.stderr.write(log.read_text()[-4000:])


def test_a_standalone_agent_from_the_light_core(
    light: Path, mosquitto_factory: Any, tmp_path: Path, agent_log: Path
) -> None:
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    sites_path, plan_path, _ = write_setup(tmp_path, hub.url, site.url)
    observer = HubObserver(hub.port)
    local = client(site.port)
    local_stats: list[dict[str, Any]] = []
    local.on_message = lambda _c, _u, m: local_stats.append(orjson.loads(m.payload))
    local.subscribe("cold-chain/unit-stats", 1)
    args = ["agent", "--site", "truck-7", "--sites", str(sites_path), "--plan", str(plan_path)]
    args += ["--state-dir", str(tmp_path / "state")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    # The other options as a container or a systemd unit sets them: SPANEDGE_AGENT_<OPTION>.
    env |= {"SPANEDGE_AGENT_HEARTBEAT_INTERVAL": "1", "SPANEDGE_AGENT_CHECKPOINT_INTERVAL": "0.2"}
    env["PYTHONPROFILEIMPORTTIME"] = "1"  # every module the agent process imports, start to stop, goes to its log
    with agent_log.open("ab") as log:
        proc = subprocess.Popen([str(light / "spanedge"), *args], stdout=log, stderr=log, cwd=tmp_path, env=env)
    sensor = Sensor(site.port)
    try:
        wait_for(lambda: "subscribed to trucks" in agent_log.read_text(), 30, "the agent to subscribe")
        start = (time.time() - 3600) // 10 * 10
        closing = {"unit": "u0", "ts": start + 100.0, "temp_f": 40.0}
        sensor.send([*readings(start, 200, step=0.1), closing])  # two 10 s windows per unit, then close them
        want = reference(sensor.published, closed_before=start + 99.0)
        assert len(want) == 6
        wait_for(lambda: len(observer.deduped()) >= len(want), 30, "window results from the outbox at the hub")
        assert same(results(observer.deduped()), want)
        wait_for(lambda: len(local_stats) >= len(want), 10, "window results at the local MQTT sink")
        assert {(r["unit"], r["window_start"]) for r in local_stats} == set(want)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        sensor.close()
        observer.close()
        local.disconnect()
        local.loop_stop()
    assert code == 0
    assert "Traceback" not in agent_log.read_text()
    assert any((tmp_path / "state").iterdir()), "the agent left no outbox or checkpoint"
    modules = imported_modules(agent_log.read_text())
    loaded = modules | {m.partition(".")[0] for m in modules}
    assert {"spanedge", "edge_agent", "psutil"} <= loaded, "no import in the agent's log"
    assert loaded.isdisjoint(NOT_LOADED_BY_A_STANDALONE_AGENT), sorted(loaded & set(NOT_LOADED_BY_A_STANDALONE_AGENT))


def imported_modules(log: str) -> set[str]:
    """The modules a process imported, from what ``PYTHONPROFILEIMPORTTIME`` wrote to its stderr."""
    return {
        line.rpartition("|")[2].strip()
        for line in log.splitlines()
        if line.startswith("import time:") and not line.endswith("imported package")
    }


def test_the_same_app_through_spanedge_testing_on_the_light_core(light: Path, tmp_path: Path) -> None:
    """``spanedge.testing`` runs the agent's runtime from the light core alone, with the agent's results."""
    start = (time.time() - 3600) // 10 * 10
    sent = [*readings(start, 200, step=0.1), {"unit": "u0", "ts": start + 100.0, "temp_f": 40.0}]
    (tmp_path / "readings.json").write_bytes(orjson.dumps(sent))
    script = (
        "import json, sys\n"
        "from spanedge.loader import load_app\n"
        "from spanedge.testing import run_edge\n"
        "app = load_app(sys.argv[1])\n"
        "result = run_edge(app, {'readings': json.load(open(sys.argv[2]))}, site='truck-7', flush=False)\n"
        "print(json.dumps(result.sinks['local_stats']))\n"
    )
    app = ROOT / "examples" / "cold_chain" / "app.py"
    done = run(light, "python", "-c", script, str(app), str(tmp_path / "readings.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = {(v["unit"], v["window_start"]): v for v in orjson.loads(done.stdout)}
    want = reference(sent, closed_before=start + 99.0)
    assert len(want) == 6
    assert same({k: {f: v[f] for f in ("n", "mean_c", "max_c")} for k, v in got.items()}, want)
