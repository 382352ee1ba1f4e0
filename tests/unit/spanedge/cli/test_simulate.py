"""``spanedge simulate`` refuses bad input before starting anything."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from spanedge.cli.simulate import simulate
from tests.conftest import EXAMPLES


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(simulate, list(args))
    return result.exit_code, result.output


def test_a_bad_fault_is_refused_with_the_forms() -> None:
    code, out = _run(
        str(EXAMPLES / "cold_chain" / "sites.yaml"), str(EXAMPLES / "cold_chain" / "app.py"), "--fault", "x"
    )
    assert code == 2
    assert "missing '@<time>'" in out


def test_a_bad_baseline_is_refused() -> None:
    code, out = _run(
        str(EXAMPLES / "cold_chain" / "sites.yaml"), str(EXAMPLES / "cold_chain" / "app.py"), "--compare", "nearby"
    )
    assert code == 2
    assert "--compare takes central or local-first" in out


def test_sites_without_a_simulation_section_are_refused(tmp_path: Path) -> None:
    sites = tmp_path / "sites.yaml"
    sites.write_text('sites:\n  c: {tier: hub, broker: "mqtt://h:1"}\n')
    code, out = _run(
        str(sites), str(EXAMPLES / "cold_chain" / "app.py"), "--no-live", "--run-dir", str(tmp_path / "run")
    )
    assert code == 2
    assert "has no simulation: section" in out
    assert not (tmp_path / "run").exists()


def test_bad_options_are_refused_in_one_line_before_anything_starts(tmp_path: Path) -> None:
    sites, app = str(EXAMPLES / "cold_chain" / "sites.yaml"), str(EXAMPLES / "cold_chain" / "app.py")
    run = ["--no-live", "--run-dir", str(tmp_path / "run")]
    for args, message in (
        (["--placement", "nearest"], "error: --placement takes ilp, greedy, central or local-first, got 'nearest'"),
        (["--mode", "hybrid"], "error: --mode takes auto, managed or standalone, got 'hybrid'"),
        (["--broker", "rabbit"], "error: --broker takes auto, mosquitto or amqtt, got 'rabbit'"),
        (["--compare", "central", "--mode", "managed"], "drop --mode managed"),
        (["--placement", "central", "--mode", "managed"], "error: --placement central needs --mode standalone"),
    ):
        code, out = _run(sites, app, *args, *run)
        assert code == 2, (args, out)
        assert message in out
        assert len(out.strip().splitlines()) == 1, out
    assert not (tmp_path / "run").exists()
