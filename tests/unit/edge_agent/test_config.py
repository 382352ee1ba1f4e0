"""The agent's settings: defined once, read from options or SPANEDGE_AGENT_<OPTION>, checked before start."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from edge_agent.config import AgentConfig, AgentLaunch, check_log_level, env_var, option_fields
from spanedge.cli import cli
from spanedge.errors import InvalidSites
from spanedge.loader import load_app
from spanedge.sites import load_sites, parse_sites
from spanedge.testing import local_plan
from tests.conftest import EXAMPLES

SITES = EXAMPLES / "cold_chain" / "sites.yaml"
APP = EXAMPLES / "cold_chain" / "app.py"


def _plan_file(tmp_path: Path) -> Path:
    plan = dataclasses.replace(local_plan(load_app(APP), load_sites(SITES)), app_source=APP.read_text())
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    return path


def test_each_option_is_defined_once() -> None:
    launch = {f.name for f in option_fields(AgentLaunch)}
    tunables = {f.name for f in option_fields(AgentConfig)}
    assert launch.isdisjoint(tunables)
    assert {"site", "sites", "plan", "state_dir", "log_level", "transport"} == launch
    assert env_var("state_dir") == "SPANEDGE_AGENT_STATE_DIR"


def test_options_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env = {
        "SPANEDGE_AGENT_SITE": "truck-7",
        "SPANEDGE_AGENT_SITES": str(SITES),
        "SPANEDGE_AGENT_STATE_DIR": str(tmp_path / "state"),
        "SPANEDGE_AGENT_LOG_LEVEL": "debug",
        "SPANEDGE_AGENT_HEARTBEAT_INTERVAL": "0.5",
        "SPANEDGE_AGENT_IDLE_TIMEOUT": "30",
        "SPANEDGE_AGENT_METRICS_PORT": "9108",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    command = cli.commands["agent"]
    params = command.make_context("agent", ["--heartbeat-interval", "2"]).params
    assert params["site"] == "truck-7"
    assert params["sites"] == SITES
    assert params["state_dir"] == tmp_path / "state"
    assert params["log_level"] == "DEBUG"
    assert params["heartbeat_interval"] == 2.0  # a command-line option wins over the environment
    assert params["idle_timeout"] == 30.0
    assert params["metrics_port"] == 9108
    assert params["plan"] is None


def test_an_environment_option_reaches_the_agent(tmp_path: Path) -> None:
    env = {
        "SPANEDGE_AGENT_SITE": "truck-7",
        "SPANEDGE_AGENT_SITES": str(SITES),
        "SPANEDGE_AGENT_PLAN": str(_plan_file(tmp_path)),
        "SPANEDGE_AGENT_STATE_DIR": str(tmp_path / "state"),
        "SPANEDGE_AGENT_DROP_POLICY": "sideways",
    }
    result = CliRunner().invoke(cli, ["agent"], env=env)
    assert result.exit_code == 2
    assert "drop policy must be one of oldest, newest, got 'sideways'" in result.output
    assert "Traceback" not in result.output


def test_a_malformed_environment_value_names_the_option(tmp_path: Path) -> None:
    env = {"SPANEDGE_AGENT_SITE": "truck-7", "SPANEDGE_AGENT_SITES": str(SITES)}
    result = CliRunner().invoke(cli, ["agent"], env={**env, "SPANEDGE_AGENT_HEARTBEAT_INTERVAL": "often"})
    assert result.exit_code == 2
    assert "--heartbeat-interval" in result.output
    result = CliRunner().invoke(cli, ["agent"], env={**env, "SPANEDGE_AGENT_LOG_LEVEL": "LOUD"})
    assert result.exit_code == 2
    assert "invalid log level 'LOUD'; use one of DEBUG, INFO, WARNING, ERROR" in result.output


def test_an_invalid_log_level_is_refused_before_start() -> None:
    assert check_log_level("warning") == "WARNING"
    with pytest.raises(ValueError, match="invalid log level 'LOUD'; use one of DEBUG, INFO, WARNING, ERROR"):
        AgentLaunch(site="s", sites=SITES, log_level="LOUD")


def test_launch_loads_the_files_into_a_config(tmp_path: Path) -> None:
    launch = AgentLaunch(site="truck-7", sites=SITES, plan=_plan_file(tmp_path))
    config, plans = launch.load(heartbeat_interval=0.5)
    assert config.site == "truck-7"
    assert config.heartbeat_interval == 0.5
    assert config.state_dir == Path(".spanedge") / "agent-truck-7"
    assert config.trusted_keys is None
    assert plans is not None
    assert [p.app for p in plans] == ["cold-chain"]


def test_launch_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nowhere.yaml"):
        AgentLaunch(site="truck-7", sites=tmp_path / "nowhere.yaml").load()
    with pytest.raises(Exception, match=r"cannot read plan file .*plan\.json"):
        AgentLaunch(site="truck-7", sites=SITES, plan=tmp_path / "plan.json").load()


def test_a_bad_idle_timeout_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="idle_timeout"):
        AgentConfig(site="truck-7", sites=load_sites(SITES), state_dir=tmp_path, idle_timeout=-1.0)


HUB_SITE = (
    "site 'cloud' is a hub (tier: hub in sites.yaml); an agent serves one of the spokes "
    "(truck-7, truck-9, warehouse-north), and the hub's part runs in spanedge hub"
)


def test_an_agent_refuses_a_hub_site_naming_the_spokes(tmp_path: Path) -> None:
    with pytest.raises(InvalidSites) as caught:
        AgentLaunch(site="cloud", sites=SITES, plan=_plan_file(tmp_path)).load()
    assert str(caught.value) == HUB_SITE
    with pytest.raises(InvalidSites, match="is a hub"):
        AgentConfig(site="cloud", sites=load_sites(SITES), state_dir=tmp_path)
    only_hub = parse_sites("sites:\n  cloud: {tier: hub, broker: 'mqtt://127.0.0.1:1883'}\n")
    with pytest.raises(InvalidSites, match=r"an agent serves one of the spokes \(none\)"):
        AgentConfig(site="cloud", sites=only_hub, state_dir=tmp_path)


def test_spanedge_agent_at_a_hub_site_exits_with_the_reason(tmp_path: Path) -> None:
    args = ["agent", "--site", "cloud", "--sites", str(SITES), "--state-dir", str(tmp_path / "state")]
    result = CliRunner().invoke(cli, [*args, "--plan", str(_plan_file(tmp_path))])
    assert result.exit_code == 2
    assert result.output == f"error: {HUB_SITE}\n"
    assert not (tmp_path / "state").exists()
