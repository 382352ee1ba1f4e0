"""The command line's polish: tables on a terminal or plain, the hub's log level, shell completion."""

from __future__ import annotations

import io
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spanedge.cli import cli
from spanedge.cli.output import show
from spanedge.report import Table
from tests.conftest import EXAMPLES

SITES = str(EXAMPLES / "cold_chain" / "sites.yaml")
BOX = set("┏┃━│─┡╇└┘")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _blocks() -> list[Any]:
    table = Table(("site", "alive"), (("truck-7", "yes"), ("truck-9", "DOWN")), frozenset({2}))
    return ["fleet", table, "warning: truck-9 is down"]


def test_a_report_is_plain_text_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    show(_blocks())
    text = out.getvalue()
    assert "\x1b[" not in text
    assert not BOX & set(text)
    assert text.splitlines() == [
        "fleet",
        "site     alive",
        "-------  -----",
        "truck-7  yes",
        "truck-9  DOWN",
        "warning: truck-9 is down",
    ]


def test_a_report_is_a_coloured_table_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    for name in ("NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    show(_blocks())
    text = out.getvalue()
    assert "\x1b[" in text
    down = next(line for line in text.splitlines() if "truck-9" in line and "DOWN" in line)
    assert "\x1b[31m" in down  # the alarm row is red


def test_table_cells_and_lines_on_a_terminal_are_text_not_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setenv("TERM", "xterm-256color")
    pattern = "^[a-z0-9][a-z0-9_-]{0,62}$"
    show([f"[bold]{pattern}", Table(("[i]name", "why"), (("w [keys [0, 50%)]", f"[red]{pattern}[/red]"),))])
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    assert f"[bold]{pattern}" in text
    assert "[i]name" in text
    assert "w [keys [0, 50%)]" in text
    assert f"[red]{pattern}[/red]" in text


def _simulation_reports(lost: int) -> list[Any]:
    from simulate.report import Report, SinkCheck, SiteCount, StreamCount

    return [
        Report(
            label,
            "cold-chain",
            label,
            "mosquitto",
            60.0,
            streams=[StreamCount("readings", "truck-7", 10, 1)],
            sinks=[SinkCheck("local_stats", "local", lost_records=lost if label == "central" else 0)],
            wan_bytes={"cloud<->truck-7": {"cloud>truck-7": 10, "truck-7>cloud": wan}},
            wan_total=wan + 10,
            sites=[SiteCount("truck-7")],
            problems=["truck-7 never drained"] if lost and label == "central" else [],
        )
        for label, wan in (("spanedge", 990), ("central", 19_990))
    ]


def test_the_simulation_report_is_plain_text_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    from spanedge.cli.simulate import simulation_report

    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    show(simulation_report(_simulation_reports(lost=0)))
    lines = out.getvalue().splitlines()
    assert lines[0] == "SpanEdge simulation: app 'cold-chain'"
    assert lines[1].split() == ["measure", "spanedge", "(spanedge)", "central", "(central)"]
    assert any(line.split()[:4] == ["WAN", "vs", "second", "run"] and "5.0%" in line for line in lines)
    assert not BOX & set(out.getvalue())


def test_the_simulation_report_marks_lost_records_and_lists_problems() -> None:
    from spanedge.cli.simulate import simulation_report

    blocks = simulation_report(_simulation_reports(lost=3))
    table = blocks[1]
    assert isinstance(table, Table)
    alarmed = {table.rows[i - 1][0] for i in table.alarm}
    assert alarmed == {"lost records"}
    assert [b for b in blocks[2:] if isinstance(b, str) and b.startswith(("warning:", "event:"))] == [
        "warning: [central] truck-7 never drained"
    ]


def test_plan_changes_in_the_simulation_report_are_events_not_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    from spanedge.cli.simulate import simulation_report

    reports = _simulation_reports(lost=0)
    reports[0].plan_history = [
        "plan v1 at +0.0 s: deployed",
        "plan v1 at +1.3 s: rate of readings@truck-7 100.0→14.0 rec/s (-86%); placement unchanged",
    ]
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    show(simulation_report(reports))
    lines = out.getvalue().splitlines()
    assert (
        "event: [spanedge] plan v1 at +1.3 s: rate of readings@truck-7 100.0→14.0 rec/s (-86%); placement unchanged"
        in lines
    )
    assert not [line for line in lines if line.startswith("warning:")]
    assert any(line.startswith("out: results received; checked: ") for line in lines)  # what the rows count


def test_status_folds_unchanged_replans_into_the_last_change() -> None:
    from spanedge.cli.status import status_report

    def entry(version: int, reason: str, changed: bool = True) -> dict[str, Any]:
        return {"version": version, "reason": reason, "changed": changed}

    app = {"app": "cold-chain", "version": 2, "replicas": 1, "sites": ["truck-7"], "totals": {}}
    history = [entry(1, "deployed"), entry(2, "site truck-9 down")]
    history += [entry(2, f"latency {i}; placement unchanged", changed=False) for i in range(3)]
    lines = status_report([], [app], {"cold-chain": {"history": history}})
    assert "  last change: v2 site truck-9 down; re-planned 3 times since, placement unchanged" in lines
    lines = status_report([], [app], {"cold-chain": {"history": history[:2]}})
    assert "  last change: v2 site truck-9 down" in lines
    # a rollout's step keeps the placement but changes versions: it is the last change, not folded away
    step = entry(0, "rollout: stage 1/2 kind=truck:1: version 1a7146e5b96e given to truck-7", changed=False)
    lines = status_report([], [app], {"cold-chain": {"history": [*history, step]}})
    assert "  last change: rollout: stage 1/2 kind=truck:1: version 1a7146e5b96e given to truck-7" in lines


@pytest.fixture
def root_level() -> Iterator[None]:
    """Put the root logger's level back after a command set it."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--log-level", "LOUD"], {}), ([], {"SPANEDGE_HUB_LOG_LEVEL": "LOUD"})],
)
def test_the_hub_refuses_an_invalid_log_level_before_starting(
    args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, root_level: None
) -> None:
    import hub.server

    started: list[object] = []
    monkeypatch.setattr(hub.server, "Hub", lambda *a, **k: started.append(a))
    args = ["hub", "--sites", SITES, "--state-dir", str(tmp_path), *args]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--log-level'" in result.output
    assert "invalid log level 'LOUD'; use one of DEBUG, INFO, WARNING, ERROR" in result.output
    assert "Traceback" not in result.output
    assert started == []


def test_the_hub_runs_at_the_log_level_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, root_level: None) -> None:
    import hub.server
    from tests.keys import key_env

    levels: list[int] = []

    class Hub:
        def __init__(self, *args: object) -> None:
            levels.append(logging.getLogger().level)

        def serve(self) -> None:
            levels.append(logging.getLogger().level)

    monkeypatch.setattr(hub.server, "Hub", Hub)
    env = {**key_env(tmp_path), "SPANEDGE_TOKEN": "hub-admin-token-0123456789abcdef012345"}
    args = ["hub", "--sites", SITES, "--no-spark", "--state-dir", str(tmp_path / "hub"), "--log-level", "debug"]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    assert levels == [logging.DEBUG, logging.DEBUG]


def _complete(*words: str) -> list[str]:
    """What bash completion offers after ``spanedge <words>`` (the last word is the one being typed).

    Click's bash protocol: ``_SPANEDGE_COMPLETE=bash_complete`` with the words so far, one ``type,value`` line
    per candidate.
    """
    env = {"_SPANEDGE_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(("spanedge", *words))}
    env["COMP_CWORD"] = str(len(words))
    result = CliRunner().invoke(cli, [], env=env, prog_name="spanedge")
    assert result.exit_code == 0, result.output
    return [line.partition(",")[2] for line in result.output.splitlines()]


def test_shell_completion_offers_commands_and_option_values() -> None:
    assert "simulate" in _complete("sim")
    assert _complete("simulate", "sites.yaml", "app.py", "--placement", "l") == ["local-first"]
    assert _complete("simulate", "sites.yaml", "app.py", "--compare", "") == ["central", "local-first"]
    assert _complete("simulate", "sites.yaml", "app.py", "--broker", "m") == ["mosquitto"]
    assert _complete("hub", "--log-level", "") == ["DEBUG", "INFO", "WARNING", "ERROR"]
    assert _complete("hub", "--log-level", "w") == ["WARNING"]


def test_the_completion_script_is_clicks() -> None:
    """``eval "$(_SPANEDGE_COMPLETE=bash_source spanedge)"`` (the README's line) defines the bash completion."""
    result = CliRunner().invoke(cli, [], env={"_SPANEDGE_COMPLETE": "bash_source"}, prog_name="spanedge")
    assert result.exit_code == 0, result.output
    assert "_SPANEDGE_COMPLETE=bash_complete" in result.output
    assert "complete -o nosort -F _spanedge_completion spanedge" in result.output
