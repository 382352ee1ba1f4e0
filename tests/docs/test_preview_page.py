"""The preview guide, run as written: each ``spanedge preview`` command of the page prints the output shown under it.

The CPU times are measured, so only their line is compared, not the numbers.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from spanedge.cli import cli

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guides" / "preview.md"
CPU = re.compile(r"^CPU per record: .*$", re.M)
EXAMPLE = re.compile(r"^```bash\n(spanedge preview [^\n]*)\n```\s*\n+```text\n(.*?)^```\s*$", re.S | re.M)


def examples() -> list[tuple[str, str]]:
    """The page's preview commands, each with the output shown under it."""
    found = EXAMPLE.findall(PAGE.read_text())
    assert len(found) == 2, "the page shows a run and a comparison"
    return [(command, output) for command, output in found]


@pytest.mark.parametrize(("command", "shown"), examples())
def test_each_command_prints_what_the_page_shows(command: str, shown: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    assert cpu_free(result.output) == cpu_free(shown)
    assert CPU.search(shown), "the page shows the CPU per record"


def cpu_free(text: str) -> str:
    """``text`` with the CPU times left out: they are measured, so they differ from run to run."""
    return CPU.sub("CPU per record: ...", text)
