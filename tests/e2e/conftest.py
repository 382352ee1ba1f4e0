"""Simulated topologies for the end-to-end tests: the cold-chain example on 3 spokes and a hub.

Each fixture runs one whole simulation (brokers, WAN proxies, hub with Spark,
one agent per spoke, seeded sensors) and hands the outcome to several tests.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import EXAMPLES, missing_part

COLD_CHAIN = EXAMPLES / "cold_chain"
MODE = os.environ.get("SPANEDGE_E2E_MODE", "managed")


def _require_parts() -> None:
    from simulate.broker import mosquitto_path
    from spanedge.errors import SpanEdgeError

    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(f"needs Mosquitto: {exc}")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        missing_part("needs Java for the hub's Spark: install a JDK 17+ (apt-get install openjdk-17-jre-headless)")
    if importlib.util.find_spec("pyspark") is None:
        missing_part("needs pyspark for the hub: pip install 'spanedge[hub]'")


def write_sites(directory: Path, tweak: dict[str, Any]) -> Path:
    """Copy the cold-chain sites.yaml with its simulation section updated by ``tweak``."""
    data = yaml.safe_load((COLD_CHAIN / "sites.yaml").read_text())
    sim = data["simulation"]
    for site, overrides in tweak.pop("sensors", {}).items():
        sim["sensors"][site]["readings"] = {**sim["sensors"][site]["readings"], **overrides}
    sim.update(tweak)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "sites.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def simulate_cold_chain(directory: Path, duration: float, faults: list[str], tweak: dict[str, Any]) -> Any:
    """Run the cold-chain example across the simulated topology and return the outcome."""
    from simulate.runner import Options, run

    opts = Options(
        sites=write_sites(directory, tweak),
        app=COLD_CHAIN / "app.py",
        duration=duration,
        faults=faults,
        mode=MODE,
        run_dir=directory / "run",
    )
    return asyncio.run(run(opts))


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """40 s of sensor data, no faults; 5% malformed messages at warehouse-north only."""
    _require_parts()
    return simulate_cold_chain(
        tmp_path_factory.mktemp("clean"),
        duration=40,
        faults=[],
        tweak={"sensors": {"warehouse-north": {"malformed": 0.05}}},
    )


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """50 s of sensor data: truck-9 partitioned for 20 s from 8 s, truck-7's agent SIGKILLed at 12 s."""
    _require_parts()
    return simulate_cold_chain(
        tmp_path_factory.mktemp("faults"),
        duration=50,
        faults=["partition:truck-9:20s@8s", "kill-agent:truck-7@12s"],
        tweak={},
    )


SMART_FARM = EXAMPLES / "smart_farm"


def simulate_smart_farm(
    directory: Path, duration: float, faults: list[str], tweak: dict[str, Any], app: Path | None = None
) -> Any:
    """Run the smart-farm example (or ``app`` on its sites) on secured brokers, its simulation section updated by ``tweak``."""
    from simulate.runner import Options, run

    data = yaml.safe_load((SMART_FARM / "sites.yaml").read_text())
    data["simulation"].update(tweak)
    directory.mkdir(parents=True, exist_ok=True)
    sites = directory / "sites.yaml"
    sites.write_text(yaml.safe_dump(data, sort_keys=False))
    opts = Options(
        sites=sites,
        app=app or SMART_FARM / "app.py",
        duration=duration,
        faults=faults,
        mode="managed",
        run_dir=directory / "run",
    )
    return asyncio.run(run(opts))


@pytest.fixture(scope="module")
def move_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """80 s of probe data; barn's links slow down to 300 ms at 20 s, so field-east's offloaded windows move."""
    _require_parts()
    return simulate_smart_farm(
        tmp_path_factory.mktemp("move"), duration=80, faults=["latency:barn:300@20s"], tweak={"settle": "15s"}
    )
