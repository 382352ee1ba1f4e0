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
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """50 s of sensor data: truck-9 partitioned for 20 s from 8 s, truck-7's agent SIGKILLed at 12 s.

    warehouse-north, untouched by the faults, sends 5% malformed messages: one run checks the
    results of a spoke left alone, one cut off, one killed and one fed bad input.
    """
    _require_parts()
    return simulate_cold_chain(
        tmp_path_factory.mktemp("faults"),
        duration=50,
        faults=["partition:truck-9:20s@8s", "kill-agent:truck-7@12s"],
        tweak={"sensors": {"warehouse-north": {"malformed": 0.05}}},
    )


SMART_FARM = EXAMPLES / "smart_farm"


def simulate_smart_farm(
    directory: Path,
    duration: float,
    faults: list[str],
    tweak: dict[str, Any],
    app: Path | None = None,
    hosts: str = "loopback",
    spokes: dict[str, Any] | None = None,
) -> Any:
    """Run the smart-farm example (or ``app`` on its sites) on secured brokers, its simulation section updated by ``tweak``.

    ``hosts`` is ``netns`` to run each site in its own network namespace. ``spokes`` adds sites: for each,
    its ``sites.yaml`` entry and, under ``sensors``, its sensors of the simulation section.
    """
    from simulate.runner import Options, run

    data = yaml.safe_load((SMART_FARM / "sites.yaml").read_text())
    data["simulation"].update(tweak)
    for name, entry in (spokes or {}).items():
        data["simulation"]["sensors"][name] = entry["sensors"]
        data["sites"][name] = {k: v for k, v in entry.items() if k != "sensors"}
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
        hosts=hosts,
    )
    return asyncio.run(run(opts))


#: field-west cut off from 4 s to 15 s, before the barn slows down in :func:`move_run`: longer than the
#: 10 s farm-wide window, and short enough that the cut, the agent's reconnect (at most 5 s) and its
#: heartbeat stay within the simulated hub's 20 s grace (``simulate.cluster.SITE_GRACE_S``).
CUT_WEST = "partition:field-west:11s@4s"
#: Seconds into the run when :data:`CUT_WEST` heals.
CUT_WEST_HEALS = 15
#: The smart farm's one 30 s window, made 10 s where a cut must span one of its ends.
FARM_WINDOW, SHORT_FARM_WINDOW = 'size="30s"', 'size="10s"'


def short_farm_window(directory: Path) -> Path:
    """The smart farm's app with its farm-wide window 10 s instead of 30 s, written to ``directory``."""
    text = (SMART_FARM / "app.py").read_text()
    assert text.count(FARM_WINDOW) == 1, f"examples/smart_farm/app.py changed: {FARM_WINDOW} not found once"
    directory.mkdir(parents=True, exist_ok=True)
    app = directory / "app.py"
    app.write_text(text.replace(FARM_WINDOW, SHORT_FARM_WINDOW))
    return app


@pytest.fixture(scope="module")
def move_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """80 s of probe data: field-west cut off for 11 s from 4 s; barn's links slow to 300 ms at 20 s.

    The slow barn makes a re-plan move field-east's offloaded windows away from it (20-50 s in).
    Before that, field-west's cut holds the hub's farm-wide window back: it is 10 s here instead of
    30 s, so that one of its ends falls within the cut however the run is timed. The cut heals
    before the barn slows, so the two faults touch no link at the same time.
    """
    _require_parts()
    directory = tmp_path_factory.mktemp("move")
    return simulate_smart_farm(
        directory,
        duration=80,
        faults=[CUT_WEST, "latency:barn:300@20s"],
        tweak={"settle": "15s"},
        app=short_farm_window(directory),
    )
