"""The quickstart page, run as written: its commands are ``make demo``'s, and each of them runs.

The placement commands run as the page shows them. The first simulation (the cold chain) runs with a shorter
``--duration`` and must end with a report that found nothing lost, duplicated or wrong; the e2e suite runs the
smart farm with the page's latency fault at length (``tests/e2e/test_handover.py``), so it is not run twice.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import missing_part

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started" / "quickstart.md"
FENCE = re.compile(r"^```bash\n(.*?)^```\s*$", re.S | re.M)
SPANEDGE = [str(Path(sys.executable).with_name("spanedge"))]

pytestmark = pytest.mark.timeout(900)


def page_commands() -> list[str]:
    """The ``spanedge`` commands of the page's bash blocks, in order."""
    lines = [line.strip() for block in FENCE.findall(PAGE.read_text()) for line in block.splitlines()]
    return [line for line in lines if line.startswith("spanedge ")]


def demo_commands() -> list[str]:
    """The commands of the Makefile's ``demo`` recipe, without the virtualenv's path."""
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe is not None, "the Makefile has no demo target"
    return [line.strip().replace("$(BIN)/", "") for line in recipe.group(1).splitlines()]


def run(command: str) -> subprocess.CompletedProcess[str]:
    """Run a ``spanedge`` command of the page from the project's root; the caller checks its code and output."""
    args = shlex.split(command)
    assert args[0] == "spanedge"
    return subprocess.run([*SPANEDGE, *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_the_page_shows_what_make_demo_runs() -> None:
    assert page_commands() == demo_commands()


@pytest.mark.parametrize("command", [c for c in page_commands() if " deploy " in f" {c} "])
def test_each_placement_command_prints_the_plan_beside_its_baselines(command: str) -> None:
    done = run(command)
    assert done.returncode == 0, done.stdout + done.stderr
    for placement in ("ilp/highs", "central", "local-first"):
        assert placement in done.stdout, done.stdout


def test_the_first_simulation_runs_and_checks_out(tmp_path: Path) -> None:
    from simulate.broker import mosquitto_path
    from spanedge.errors import SpanEdgeError

    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    command = next(c for c in page_commands() if " simulate " in f" {c} ")
    short = re.sub(r"--duration \d+", "--duration 30", command)
    short = re.sub(r"@20s\b", "@10s", short)
    assert short != command, "the page's simulation has no --duration to shorten"
    done = run(f"{short} --run-dir {tmp_path / 'run'}")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    for measure in ("lost records", "duplicate results", "wrong results"):
        assert re.search(rf"^{measure} +0$", done.stdout, re.M), done.stdout[-4000:]
