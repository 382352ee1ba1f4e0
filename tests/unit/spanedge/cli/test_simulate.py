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


def test_an_error_quoting_a_pattern_prints_it_whole_with_the_file_and_line(tmp_path: Path) -> None:
    sites = tmp_path / "farm.yaml"
    text = (EXAMPLES / "cold_chain" / "sites.yaml").read_text()
    sites.write_text(text.replace("  truck-9:\n", "  Truck_9:\n", 1))
    line = text.splitlines().index("  truck-9:") + 1
    code, out = _run(str(sites), str(EXAMPLES / "cold_chain" / "app.py"), "--no-live", "--run-dir", str(tmp_path / "r"))
    assert code == 2
    assert f"{sites}:{line}: sites.Truck_9: site name 'Truck_9' has uppercase letters" in out
    assert "(pattern ^[a-z0-9][a-z0-9_-]{0,62}$)" in out  # not read as terminal markup


def test_errors_in_the_simulation_section_name_the_file_and_line(tmp_path: Path) -> None:
    sites = tmp_path / "farm.yaml"
    text = (EXAMPLES / "cold_chain" / "sites.yaml").read_text()
    sensors = text.index("    truck-9:\n      readings: *fridge")
    sites.write_text(text[:sensors] + text[sensors:].replace("    truck-9:", "    truck-8:", 1))
    line = text[:sensors].count("\n") + 1
    app = str(EXAMPLES / "cold_chain" / "app.py")
    code, out = _run(str(sites), app, "--no-live", "--run-dir", str(tmp_path / "r"))
    assert code == 2
    assert f"error: {sites}:{line}: simulation.sensors.truck-8: unknown site 'truck-8'; known sites: " in out
    sites.write_text(text.replace("count: 20", "count: 0"))
    line = text[: text.index("count: 20")].count("\n") + 1
    code, out = _run(str(sites), app, "--no-live", "--run-dir", str(tmp_path / "r"))
    assert code == 2
    assert f"{sites}:{line}: simulation.sensors.truck-7.readings.count: Expected `int` >= 1 (got 0)" in out
    sites.write_text(text.replace("readings", "temps"))
    code, out = _run(str(sites), app, "--no-live", "--run-dir", str(tmp_path / "r"))
    assert code == 2
    line = text[: text.index("      readings:")].count("\n") + 1
    assert f"error: {sites}:{line}: site 'truck-7' binds stream 'temps', but app 'cold-chain' has no source" in out


def test_swapped_arguments_say_which_argument_is_which(tmp_path: Path) -> None:
    sites, app = str(EXAMPLES / "cold_chain" / "sites.yaml"), str(EXAMPLES / "cold_chain" / "app.py")
    code, out = _run(app, sites, "--no-live", "--run-dir", str(tmp_path / "r"))
    assert code == 2
    assert out.strip() == (
        "error: the arguments are swapped: SITES (the first argument) is the sites file and APP_FILE (the second) "
        f"the app's Python file; run spanedge simulate {sites} {app}"
    )
    code, out = _run(app, app, "--no-live", "--run-dir", str(tmp_path / "r"))
    assert code == 2
    assert f"but SITES is the Python file {app}" in out
    assert "not valid YAML" not in out
    assert not (tmp_path / "r").exists()
