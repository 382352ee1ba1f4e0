"""The ``spanedge`` command line: a user's mistake gives one line and an exit code, never a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spanedge.cli import cli
from tests.conftest import EXAMPLES

SITES = str(EXAMPLES / "cold_chain" / "sites.yaml")
APP = str(EXAMPLES / "cold_chain" / "app.py")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_version() -> None:
    code, out = run("--version")
    assert code == 0
    assert out.startswith("spanedge ")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import no_such_module_here\n", r"app\.py:1: the app raised ModuleNotFoundError while loading: No module"),
        (
            "from spanedge import App\napp = App('x')\nmissing + 1\n",
            r"app\.py:3: the app raised NameError while loading",
        ),
        (
            "def f():\n    return 1 / 0\n\nf()\n",
            r"app\.py:4: the app raised ZeroDivisionError while loading: division by zero \(in f at .*app\.py:2\)",
        ),
    ],
)
def test_an_app_that_fails_on_import_names_its_file_and_line(tmp_path: Path, source: str, expected: str) -> None:
    app = tmp_path / "app.py"
    app.write_text(source)
    code, out = run("deploy", str(app), "--sites", SITES, "--dry-run")
    assert code == 2
    assert "Traceback" not in out
    assert out.count("\n") == 1
    assert out.startswith(f"error: {app}:")

    assert re.search(expected, out), out


def test_an_output_path_that_cannot_be_written(tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "plan.json"
    code, out = run("deploy", APP, "--sites", SITES, "--dry-run", "--output", str(target))
    assert code == 2
    assert "Traceback" not in out
    assert f"error: cannot write {target}: No such file or directory" in out


def test_deploy_dry_run_prints_the_plan_as_json(tmp_path: Path) -> None:
    import json

    code, out = run("deploy", APP, "--sites", SITES, "--dry-run", "--json")
    assert code == 0
    plan = json.loads(out)
    assert plan["app"] == "cold-chain"
    assert {a["site"] for a in plan["assignments"]} >= {"cloud", "truck-7"}


def test_agent_options_come_from_the_agent_settings_and_the_environment(tmp_path: Path) -> None:
    import dataclasses

    from edge_agent.config import AgentConfig

    result = CliRunner().invoke(cli, ["agent", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for f in dataclasses.fields(AgentConfig):
        if "help" in f.metadata:
            assert f"--{f.name.replace('_', '-')}" in result.output
    # every option can come from SPANEDGE_AGENT_<OPTION>: here a missing sites file, named in the error
    env = {"SPANEDGE_AGENT_SITE": "truck-7", "SPANEDGE_AGENT_SITES": str(tmp_path / "nowhere.yaml")}
    result = CliRunner().invoke(cli, ["agent", "--plan", str(tmp_path / "plan.json")], env=env)
    assert result.exit_code == 2
    assert "nowhere.yaml" in result.output
    assert "Traceback" not in result.output


def test_an_invalid_log_level_is_refused() -> None:
    result = CliRunner().invoke(cli, ["agent", "--site", "s", "--sites", SITES, "--log-level", "LOUD"])
    assert result.exit_code == 2
    assert "invalid log level 'LOUD'" in result.output


def test_deploy_json_on_stdout_is_json_alone() -> None:
    """The solver writes nothing to the process's stdout, so ``--json`` output pipes into a JSON reader."""
    import json
    import subprocess
    import sys

    command = [sys.executable, "-c", "from spanedge.cli import main; main()"]
    result = subprocess.run(
        [*command, "deploy", APP, "--sites", SITES, "--dry-run", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "HiGHS" not in result.stdout
    plan = json.loads(result.stdout)
    assert plan["app"] == "cold-chain"
    assert plan["solver"]["method"].startswith("ilp")


def test_a_run_dir_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = "/proc/nope/x"
    code, out = run("simulate", SITES, APP, "--run-dir", target, "--placement", "central", "--live")
    assert code == 2, out
    assert "Traceback" not in out
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    assert lines[0].startswith(f"error: cannot create the run directory {target}: No such file or directory")


def test_a_hub_state_dir_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from tests.keys import key_env

    target = "/proc/nope/x"
    env = {**key_env(tmp_path), "SPANEDGE_TOKEN": "hub-admin-token-0123456789abcdef012345"}
    result = CliRunner().invoke(cli, ["hub", "--sites", SITES, "--no-spark", "--state-dir", target], env=env)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines() == [
        f"error: cannot create the hub's state directory {target}: No such file or directory; "
        "pass --state-dir in a writable place"
    ]
