"""The inputs of a run, checked before anything starts, and the sensors built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulate.errors import InvalidOption, SimulationError
from simulate.faults import InvalidFault
from simulate.scenario import PLACEMENTS, Options, Scenario, check_options, clear_run_dir
from simulate.sensor_fleet import SensorFleet
from tests.conftest import EXAMPLES

SITES = EXAMPLES / "cold_chain" / "sites.yaml"
APP = EXAMPLES / "cold_chain" / "app.py"


def test_a_scenario_reads_everything_and_makes_its_run_directory(tmp_path: Path) -> None:
    opts = Options(SITES, APP, duration=12, seed=99, faults=["kill-agent:truck-7@5s"], run_dir=tmp_path / "run")
    scenario = Scenario.load(opts)
    assert (scenario.hub, scenario.spokes) == ("cloud", ["truck-7", "truck-9", "warehouse-north"])
    assert (scenario.mode, scenario.placement, scenario.label) == ("managed", "ilp", "ilp")
    assert (scenario.duration, scenario.sim.seed) == (12, 99)
    assert [f.describe() for f in scenario.faults] == ["kill-agent:truck-7@5s"]
    assert scenario.app.name == "cold-chain"
    assert scenario.app_file == APP.resolve()
    assert scenario.run_dir.is_dir()


def test_baselines_need_standalone_mode_and_bad_faults_are_refused(tmp_path: Path) -> None:
    assert Options(SITES, APP, placement="central").resolved_mode() == "standalone"
    with pytest.raises(SimulationError, match="needs --mode standalone"):
        Scenario.load(Options(SITES, APP, placement="central", mode="managed", run_dir=tmp_path / "a"))
    with pytest.raises(InvalidFault, match="unknown site 'truck-8'"):
        Scenario.load(Options(SITES, APP, faults=["kill-agent:truck-8@1s"], run_dir=tmp_path / "b"))
    assert not (tmp_path / "b").exists()
    with pytest.raises(SimulationError, match="revoke:truck-7@5s revokes a site at the hub's REST API: it needs"):
        Scenario.load(Options(SITES, APP, faults=["revoke:truck-7@5s"], mode="standalone", run_dir=tmp_path / "c"))


def test_the_fleet_has_the_devices_and_qos_of_the_simulation_section(tmp_path: Path) -> None:
    scenario = Scenario.load(Options(SITES, APP, run_dir=tmp_path))
    ports = {name: 10_000 + i for i, name in enumerate(scenario.sites.sites)}
    fleet = SensorFleet.build(scenario.sites, scenario.sim, ports, start=1_700_000_000.0)
    assert set(fleet.sensors) == {"truck-7", "truck-9", "warehouse-north"}
    assert fleet.devices == 60
    truck = fleet.sensors["truck-7"]
    assert (truck.port, truck.qos) == (ports["truck-7"], {"readings": 1})
    assert truck.devices[0].topic == "trucks/7/truck-7-u00/temp"
    assert fleet.sent() == []
    assert fleet.sent_at("truck-7") == fleet.pending_at("cloud") == fleet.failures_at("cloud") == 0
    assert fleet.recent(0.0) == 0


@pytest.mark.parametrize(
    ("opts", "compare", "message"),
    [
        (
            Options(SITES, APP, placement="nearest"),
            None,
            "--placement takes ilp, greedy, central or local-first, got 'nearest'",
        ),
        (Options(SITES, APP, mode="hybrid"), None, "--mode takes auto, managed or standalone, got 'hybrid'"),
        (Options(SITES, APP, broker="rabbit"), None, "--broker takes auto, mosquitto or amqtt, got 'rabbit'"),
        (Options(SITES, APP, hosts="vm"), None, "--hosts takes loopback or netns, got 'vm'"),
        (Options(SITES, APP), "nearby", "--compare takes central or local-first, got 'nearby'"),
        (Options(SITES, APP, mode="managed"), "central", "drop --mode managed"),
        (Options(SITES, APP, duration=0.0), None, "--duration must be positive"),
        (Options(SITES, APP, drain_timeout=-1), None, "drain_timeout must be positive"),
        (Options(SITES, APP, spark_master=""), None, "--spark-master must not be empty"),
    ],
)
def test_bad_options_are_refused_with_what_they_can_be(opts: Options, compare: str | None, message: str) -> None:
    with pytest.raises(InvalidOption, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_options(opts, compare)
    assert isinstance(InvalidOption(message), ValueError)  # bad input: exit code 2


def test_an_unknown_placement_fails_before_the_run_directory_exists(tmp_path: Path) -> None:
    with pytest.raises(InvalidOption, match="--placement takes"):
        Scenario.load(Options(SITES, APP, placement="nearest", run_dir=tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    check_options(Options(SITES, APP, placement="local-first", mode="standalone"), None)


def test_the_placements_are_those_the_placement_package_solves() -> None:
    from placement.planner import METHODS

    assert set(PLACEMENTS) == set(METHODS)


def test_agents_subscribe_at_the_spokes_that_source_the_apps_streams(tmp_path: Path) -> None:
    farm = EXAMPLES / "smart_farm"
    scenario = Scenario.load(Options(farm / "sites.yaml", farm / "app.py", run_dir=tmp_path))
    assert scenario.spokes == ["barn", "shed", "field-east", "field-west"]
    assert scenario.source_sites == ["field-east", "field-west"]


def test_a_reused_run_directory_loses_the_earlier_runs_output_and_nothing_else(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    outbox = run_dir / "agents" / "truck-7" / "outbox.db"
    outbox.parent.mkdir(parents=True)
    outbox.write_bytes(b"an earlier run's records")
    (run_dir / "events.log").write_text("setup + 0.1s brokers\n")
    (run_dir / "notes.txt").write_text("mine")
    scenario = Scenario.load(Options(SITES, APP, run_dir=run_dir))
    assert scenario.run_dir == run_dir.resolve()
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]
    assert clear_run_dir(run_dir) == []


def test_a_chaos_seed_adds_its_faults_to_those_given_and_a_short_run_is_refused(tmp_path: Path) -> None:
    from simulate.chaos import chaos_faults
    from spanedge.sites import load_sites

    opts = Options(SITES, APP, duration=300, chaos=5, faults=["kill-agent:truck-7@5s"], run_dir=tmp_path / "run")
    scenario = Scenario.load(opts)
    expected = ["kill-agent:truck-7@5s", *chaos_faults(5, load_sites(SITES), 300)]
    assert [f.text for f in scenario.faults] == expected
    with pytest.raises(InvalidOption, match="--chaos 5: a chaos run needs --duration of at least"):
        Scenario.load(Options(SITES, APP, duration=60, chaos=5, run_dir=tmp_path / "short"))
