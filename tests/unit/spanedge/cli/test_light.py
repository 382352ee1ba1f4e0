"""The command line of the light core: click alone, with neither typer nor rich importable.

Each command runs in a subprocess whose import system refuses ``typer`` and ``rich``
(a finder first on ``sys.meta_path``), as on a gateway that installed ``pip install
spanedge``; the finder reports at exit which of them the command tried to import.
``status`` and ``deploy`` talk to a stub hub (an HTTP server in this process) and print
on a pseudo-terminal, where they would use rich if it were there.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from spanedge.cli.status import render_status
from spanedge.loader import load_app
from spanedge.plan import Plan
from spanedge.report import plan_report, to_text
from spanedge.sites import load_sites
from spanedge.testing import local_plan
from tests.conftest import EXAMPLES

SITES = EXAMPLES / "cold_chain" / "sites.yaml"
APP = EXAMPLES / "cold_chain" / "app.py"
HIDDEN = ("typer", "rich")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: Runs ``spanedge`` with the packages named in argv[1] hidden; prints the hidden ones it asked for at exit.
LAUNCH = """
import atexit, sys

hidden, wanted = set(sys.argv[1].split(",")), set()


class Hidden:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in hidden:
            wanted.add(top)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Hidden())
atexit.register(lambda: sys.stderr.write(f"asked for: {','.join(sorted(wanted))}\\n"))
sys.argv = ["spanedge", *sys.argv[2:]]
from spanedge.cli import main

main()
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_") and k != "NO_COLOR"}


def _asked_for(stderr: str) -> list[str]:
    """The hidden packages the command tried to import, from the launcher's last line."""
    last = stderr.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("asked for: "), stderr
    return [name for name in last.removeprefix("asked for: ").split(",") if name]


def spanedge(*args: str) -> tuple[int, str, str]:
    """Run ``spanedge args`` with typer and rich hidden, stdout piped; return its code, stdout and stderr."""
    command = [sys.executable, "-c", LAUNCH, ",".join(HIDDEN), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=_env(), check=False)
    return done.returncode, done.stdout, done.stderr


def spanedge_on_terminal(*args: str) -> tuple[int, str, str]:
    """Like :func:`spanedge`, with stdout a pseudo-terminal (lines end in ``\\n`` again)."""
    command = [sys.executable, "-c", LAUNCH, ",".join(HIDDEN), *args]
    leader, follower = pty.openpty()
    with subprocess.Popen(command, stdout=follower, stderr=subprocess.PIPE, env=_env()) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        assert proc.stderr is not None
        stderr = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    return code, b"".join(chunks).decode().replace("\r\n", "\n"), stderr


class StubHub:
    """A hub's REST API as ``status`` and ``deploy`` read it: fixed answers, and the apps posted to it."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.posted: list[dict[str, Any]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path not in hub.answers:
                    self.send_error(404)
                    return
                self._answer(hub.answers[self.path])

            def do_POST(self) -> None:
                hub.posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self._answer(hub.answers["POST " + self.path])

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def stub_hub() -> Iterator[StubHub]:
    sites = [
        {"site": "cloud", "tier": "hub", "alive": True, "last_heartbeat_age_s": None, "latency": {}},
        {
            "site": "truck-7",
            "tier": "spoke",
            "alive": True,
            "last_heartbeat_age_s": 1.5,
            "outbox": {"records": 12},
            "latency": {"cloud": {"latency_ms": 40.0, "source": "measured"}},
        },
        {"site": "truck-9", "tier": "spoke", "alive": False, "last_heartbeat_age_s": 99.0, "latency": {}},
    ]
    apps = [
        {
            "app": "cold-chain",
            "version": 2,
            "replicas": 3,
            "sites": ["truck-7", "cloud"],
            "totals": {"wan_bytes_per_s": 500, "worst_latency_ms": 40.0},
        }
    ]
    placement = {
        "replicas": [
            {"site": "truck-7", "replica": "to_celsius@truck-7"},
            {"site": "cloud", "replica": "fleet_max"},
        ],
        "history": [{"version": 2, "reason": "latency drift"}],
    }
    plan = local_plan(load_app(APP), load_sites(SITES))
    hub = StubHub(
        {
            "/sites": {"sites": sites},
            "/apps": {"apps": apps},
            "/apps/cold-chain/placement": placement,
            "POST /apps": {"plan": json.loads(plan.to_json())},
        }
    )
    thread = threading.Thread(target=hub.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.server.shutdown()
        hub.server.server_close()
        thread.join(10)


def test_agent_help_needs_neither_typer_nor_rich() -> None:
    import dataclasses

    from edge_agent.config import AgentConfig, AgentLaunch

    code, out, err = spanedge("agent", "--help")
    assert code == 0, err
    assert out.startswith("Usage: spanedge agent [OPTIONS]")
    for settings in (AgentLaunch, AgentConfig):
        for f in dataclasses.fields(settings):
            if "help" in f.metadata:
                assert f"--{f.name.replace('_', '-')}" in out
                assert f"SPANEDGE_AGENT_{f.name.upper()}" in out
    assert "[env var: SPANEDGE_AGENT_HEARTBEAT_INTERVAL; default: 5.0]" in " ".join(out.split())
    assert _asked_for(err) == []


def test_an_agent_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    code, out, err = spanedge("agent", "--site", "truck-7", "--sites", str(missing), "--plan", str(tmp_path / "p.json"))
    assert code == 2
    assert out == ""
    message, asked = err.splitlines()
    assert message.startswith("error: "), err
    assert str(missing) in message
    assert asked == "asked for: "


def test_an_invalid_agent_option_is_a_usage_error() -> None:
    code, _, err = spanedge("agent", "--site", "s", "--sites", str(SITES), "--log-level", "LOUD")
    assert code == 2
    assert "Invalid value for '--log-level'" in err
    assert "invalid log level 'LOUD'; use one of DEBUG, INFO, WARNING, ERROR" in err
    assert "Traceback" not in err


def test_status_prints_plain_tables_on_a_terminal_without_rich(stub_hub: StubHub) -> None:
    code, out, err = spanedge_on_terminal("status", "--hub-url", stub_hub.url, "--token", "t")
    assert code == 0, err
    assert _asked_for(err) == ["rich"]  # it tried the coloured tables, and fell back
    sites = stub_hub.answers["/sites"]["sites"]
    apps = stub_hub.answers["/apps"]["apps"]
    placements = {"cold-chain": stub_hub.answers["/apps/cold-chain/placement"]}
    expected = render_status(sites, apps, placements)
    assert ANSI.sub("", out).rstrip("\n") == expected
    down = next(line for line in out.splitlines() if "truck-9" in line)
    assert down.startswith("\x1b[31m")  # the site that is down is red
    assert out.startswith("\x1b[1msite ")  # the header is bold
    lines = expected.splitlines()
    assert lines[0].split() == ["site", "tier", "alive", "last", "heartbeat", "backlog", "latency", "(one-way", "ms)"]
    assert lines[3].split() == ["truck-7", "spoke", "yes", "1.5s", "ago", "12", "rec", "cloud", "40"]
    assert "  last change: v2 latency drift" in lines


def test_status_piped_is_the_plain_text_alone(stub_hub: StubHub) -> None:
    code, out, err = spanedge("status", "--hub-url", stub_hub.url, "--token", "t")
    assert code == 0, err
    assert _asked_for(err) == []
    assert "\x1b[" not in out
    assert out.splitlines()[4].split()[:3] == ["truck-9", "spoke", "DOWN"]


def test_deploy_prints_the_hubs_plan_on_a_terminal_without_rich(stub_hub: StubHub) -> None:
    args = ("deploy", str(APP), "--sites", str(SITES), "--hub-url", stub_hub.url, "--token", "t")
    code, out, err = spanedge_on_terminal(*args)
    assert code == 0, err
    assert _asked_for(err) == ["rich"]
    assert [p["filename"] for p in stub_hub.posted] == [str(APP.resolve())]
    plan = Plan.from_dict(stub_hub.answers["POST /apps"]["plan"])
    assert ANSI.sub("", out).rstrip("\n") == to_text(plan_report(plan))
    assert "\x1b[1mreplica " in out


def test_a_missing_hub_is_one_line_without_rich() -> None:
    code, out, err = spanedge("status", "--hub-url", "http://127.0.0.1:1", "--token", "t")
    assert code == 2
    assert out == ""
    assert err.splitlines()[0].startswith("error: cannot reach the hub at http://127.0.0.1:1")
    assert "Traceback" not in err


def test_simulate_without_rich_names_the_sim_extra(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, out, err = spanedge("simulate", str(SITES), str(APP), "--no-live", "--run-dir", str(run_dir))
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        "error: rich is not installed; it comes with the 'sim' extra: run pip install 'spanedge[sim]'",
        "asked for: rich",
    ]
    assert not run_dir.exists()


def test_preview_runs_on_the_light_core_alone() -> None:
    """No rich, solver, numpy or Spark: the hub part of a preview is plain Python."""
    heavy = (*HIDDEN, "networkx", "numpy", "pulp", "highspy", "pyspark", "pyarrow", "pandas", "fastapi")
    records = EXAMPLES / "cold_chain" / "records.jsonl"
    command = [sys.executable, "-c", LAUNCH, ",".join(heavy), "preview", str(APP), "--input", str(records)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=_env(), check=False)
    assert done.returncode == 0, done.stderr
    assert _asked_for(done.stderr) == []
    assert "sink fleet_alerts (hub): 1 result" in done.stdout
