"""The command line of staged rollouts: the deploy options that need each other, and the rollout commands."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from spanedge.cli import cli


def test_gate_and_hold_need_a_rollout_and_a_rollout_needs_the_hub(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text("from spanedge import App\napp = App('demo')\n")
    sites = tmp_path / "sites.yaml"
    sites.write_text("sites: {}\n")
    runner = CliRunner()
    alone = runner.invoke(cli, ["deploy", str(app), "--sites", str(sites), "--gate", "cpu<0.8"])
    assert alone.exit_code == 2
    assert "give --rollout too" in alone.output
    dry = runner.invoke(cli, ["deploy", str(app), "--sites", str(sites), "--rollout", "*", "--dry-run"])
    assert dry.exit_code == 2
    assert "leave out --dry-run" in dry.output


def test_the_rollout_commands_are_listed() -> None:
    answer = CliRunner().invoke(cli, ["rollout", "--help"])
    assert answer.exit_code == 0
    assert "status" in answer.output
    assert "rollback" in answer.output
