"""The ``spanedge`` command line: a user's mistake gives one line and an exit code, never a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

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


def test_an_app_that_exits_on_import_reads_like_an_import_error(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text("import sys\n\nsys.exit(4)\n")
    code, out = run("deploy", str(app), "--sites", SITES, "--dry-run")
    assert code == 2
    assert "Traceback" not in out
    assert out.count("\n") == 1
    assert out.startswith(f"error: {app}:3: the app raised SystemExit while loading: exit code 4; "), out


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_app_path_that_is_a_directory(tmp_path: Path, dry_run: bool) -> None:
    extra = ["--dry-run"] if dry_run else ["--hub-url", "http://127.0.0.1:1", "--token", "t"]
    code, out = run("deploy", str(tmp_path), "--sites", SITES, *extra)
    assert code == 2
    assert out == f"error: app file {tmp_path} is a directory; pass the app's .py file\n"


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_app_file_that_is_not_utf8(tmp_path: Path, dry_run: bool) -> None:
    app = tmp_path / "app.py"
    app.write_bytes(b"# caf\xe9\n")
    extra = ["--dry-run"] if dry_run else ["--hub-url", "http://127.0.0.1:1", "--token", "t"]
    code, out = run("deploy", str(app), "--sites", SITES, *extra)
    assert code == 2
    assert "Traceback" not in out
    assert out.startswith(f"error: app file {app} is not UTF-8 text (byte 5: "), out


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("", r"must define exactly one App \(found: none\)"),
        ("x = (\n", r"app\.py:1: syntax error in app: '\(' was never closed"),
    ],
)
def test_an_empty_or_broken_app_file(tmp_path: Path, source: str, expected: str) -> None:
    app = tmp_path / "app.py"
    app.write_text(source)
    code, out = run("deploy", str(app), "--sites", SITES, "--dry-run")
    assert code == 2
    assert out.count("\n") == 1
    assert re.search(expected, out), out


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize(
    ("option", "value", "rule"),
    [
        ("--slo-ms", "-5", "> 0 and <= 3600000, got -5.0"),
        ("--slo-ms", "nan", "> 0 and <= 3600000, got nan"),
        ("--traffic-weight", "inf", ">= 0 and <= 1000000, got inf"),
        ("--latency-weight", "1e400", ">= 0 and <= 1000000, got inf"),
        ("--traffic-weight", "-1", ">= 0 and <= 1000000, got -1.0"),
        ("--latency-weight", "2e6", ">= 0 and <= 1000000, got 2000000.0"),
    ],
)
def test_a_placement_setting_out_of_range_is_refused_before_anything_is_planned(
    dry_run: bool, option: str, value: str, rule: str
) -> None:
    extra = ["--dry-run"] if dry_run else ["--hub-url", "http://127.0.0.1:1", "--token", "t"]
    code, out = run("deploy", APP, "--sites", SITES, option, value, *extra)
    assert code == 2
    assert f"Error: {option} must be a finite number {rule}; " in out, out
    assert "Traceback" not in out


def _latin1(tmp_path: Path) -> Path:
    path = tmp_path / "sites.yaml"
    path.write_bytes(b"sites:\n  caf\xe9: {tier: hub}\n")
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["deploy", APP, "--dry-run", "--sites", "{sites}"],
        ["deploy", APP, "--hub-url", "http://127.0.0.1:1", "--token", "t", "--sites", "{sites}"],
        ["simulate", "{sites}", APP, "--placement", "central"],
        ["agent", "--site", "truck-7", "--sites", "{sites}"],
        ["hub", "--no-spark", "--token-file", "{token}", "--sites", "{sites}"],
    ],
)
def test_a_sites_file_that_is_not_utf8(tmp_path: Path, args: list[str]) -> None:
    sites = str(_latin1(tmp_path))
    token = tmp_path / "token"
    token.write_text("t" * 40)
    args = [a.format(sites=sites, token=token) for a in args]
    code, out = run(*args)
    assert code == 2, out
    assert (
        out == f"error: sites file {sites} is not UTF-8 text (byte 12: invalid continuation byte); save it as UTF-8\n"
    )


def test_a_latency_file_that_is_not_utf8(tmp_path: Path) -> None:
    latency = tmp_path / "latency.csv"
    latency.write_bytes(b"src,dst\n\xff\n")
    code, out = run("deploy", APP, "--sites", SITES, "--dry-run", "--latency", str(latency))
    assert code == 2
    assert out.startswith(f"error: latency file {latency} is not UTF-8 text"), out


def test_a_sites_file_that_is_a_directory(tmp_path: Path) -> None:
    code, out = run("deploy", APP, "--sites", str(tmp_path), "--dry-run")
    assert code == 2
    assert out == f"error: cannot read sites file {tmp_path}: Is a directory\n"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("localhost:8000", "hub URL must start with http:// or https://, got 'localhost:8000'"),
        ("http://[bad", "invalid hub URL 'http://[bad': Invalid IPv6 URL"),
        ("http://hub:99999", "invalid hub URL 'http://hub:99999': Port out of range 0-65535"),
        ("http://", "hub URL 'http://' names no host"),
    ],
)
@pytest.mark.parametrize("command", [["status"], ["deploy", APP, "--sites", SITES]])
def test_a_hub_url_that_is_not_one(url: str, expected: str, command: list[str]) -> None:
    code, out = run(*command, "--hub-url", url, "--token", "t")
    assert code == 2
    assert out == f"error: {expected}; pass it as https://HOST:PORT (--hub-url or SPANEDGE_HUB_URL)\n"


@pytest.mark.parametrize("command", [["status"], ["deploy", APP, "--sites", SITES]])
@pytest.mark.parametrize("by_env", [False, True], ids=["option", "env"])
def test_a_hub_ca_that_cannot_be_read_is_named(tmp_path: Path, command: list[str], by_env: bool) -> None:
    missing = tmp_path / "hub-ca.pem"
    args = [*command, "--hub-url", "https://127.0.0.1:1", "--token", "t"]
    env = {"SPANEDGE_HUB_CA": str(missing)} if by_env else {}
    result = CliRunner().invoke(cli, args if by_env else [*args, "--hub-ca", str(missing)], env=env)
    assert result.exit_code == 2
    assert result.output == (
        f"error: cannot read the hub's CA certificate {missing} (--hub-ca / SPANEDGE_HUB_CA): "
        "No such file or directory; pass the hub's <state-dir>/ca/ca.pem\n"
    )


def test_the_commands_reach_the_hub_over_https_by_default() -> None:
    from spanedge.cli.deploy import deploy
    from spanedge.cli.status import status

    for command in (deploy, status):
        params = {p.name: p for p in command.params}
        assert params["hub_url"].default == "https://127.0.0.1:8000"
        assert params["hub_ca"].envvar == "SPANEDGE_HUB_CA"
        assert not params["hub_ca"].required  # without it, the system's CAs


def test_dry_run_does_not_check_the_hub_url() -> None:
    code, _ = run("deploy", APP, "--sites", SITES, "--dry-run", "--json", "--hub-url", "localhost:8000")
    assert code == 0


def test_a_negative_duration_is_refused() -> None:
    code, out = run("simulate", SITES, APP, "--duration", "-5")
    assert code == 2
    assert out == "error: expected a duration such as '10s', '500ms' or '5m', got '-5'\n"


@pytest.mark.parametrize(("level", "access_log"), [("WARNING", False), ("INFO", False), ("DEBUG", True)])
def test_the_hub_log_level_governs_uvicorn(tmp_path: Path, level: str, access_log: bool) -> None:
    """uvicorn's own lines (and its access log, on only at DEBUG) follow ``spanedge hub --log-level``."""
    import logging

    uvicorn = pytest.importorskip("uvicorn")
    from hub.server import HubConfig, uvicorn_options
    from spanedge.tokens import Tokens, TokenScope
    from tests.keys import KEY

    tokens = Tokens([(TokenScope.ADMIN, "hub-admin-token-0123456789abcdef012345", "test")])
    config = HubConfig(tokens=tokens, plan_key=KEY, log_level=level)
    options = uvicorn_options(config)
    assert options["log_level"] == level.lower()
    assert options["access_log"] is access_log
    names = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
    saved = {
        n: (logging.getLogger(n).level, logging.getLogger(n).handlers[:], logging.getLogger(n).propagate) for n in names
    }
    try:
        uvicorn.Config(app=None, **options)  # configures uvicorn's loggers
        assert logging.getLogger("uvicorn.error").getEffectiveLevel() == getattr(logging, level)
        assert logging.getLogger("uvicorn.access").getEffectiveLevel() == getattr(logging, level)
        assert bool(logging.getLogger("uvicorn.access").handlers) is access_log
    finally:
        for n, (lvl, handlers, propagate) in saved.items():
            logger = logging.getLogger(n)
            logger.setLevel(lvl)
            logger.handlers = handlers
            logger.propagate = propagate


def test_spanedge_hub_passes_its_log_level_to_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    pytest.importorskip("fastapi")
    from hub.server import Hub
    from tests.keys import key_env

    seen: list[str] = []
    monkeypatch.setattr(Hub, "serve", lambda self: seen.append(self.config.log_level))
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)  # the command sets the root level; put it back afterwards
    env = {**key_env(tmp_path), "SPANEDGE_TOKEN": "hub-admin-token-0123456789abcdef012345"}
    args = ["hub", "--sites", SITES, "--no-spark", "--state-dir", str(tmp_path / "hub"), "--log-level", "warning"]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    assert seen == ["WARNING"]


@pytest.mark.parametrize(
    ("given", "closes"),
    [([], True), (["--window-close", "watermark"], True), (["--window-close", "next-batch"], False)],
)
def test_spanedge_hub_closes_windows_at_the_watermark_unless_asked_for_the_next_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: list[str], closes: bool
) -> None:
    import logging

    pytest.importorskip("fastapi")
    from hub.server import Hub
    from tests.keys import key_env

    seen: list[bool] = []
    monkeypatch.setattr(Hub, "serve", lambda self: seen.append(self.config.close_windows))
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)
    env = {**key_env(tmp_path), "SPANEDGE_TOKEN": "hub-admin-token-0123456789abcdef012345"}
    args = ["hub", "--sites", SITES, "--no-spark", "--state-dir", str(tmp_path / "hub"), *given]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    assert seen == [closes]
    wrong = CliRunner().invoke(cli, [*args, "--window-close", "soon"], env=env)
    assert wrong.exit_code != 0
    assert "'soon' is not one of 'next-batch', 'watermark'" in wrong.output


def test_spanedge_hub_hands_its_spark_settings_to_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    pytest.importorskip("fastapi")
    from hub.server import Hub
    from tests.keys import key_env

    seen: list[dict[str, str]] = []
    monkeypatch.setattr(Hub, "serve", lambda self: seen.append(dict(self.config.spark_conf)))
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)
    env = {**key_env(tmp_path), "SPANEDGE_TOKEN": "hub-admin-token-0123456789abcdef012345"}
    args = ["hub", "--sites", SITES, "--no-spark", "--state-dir", str(tmp_path / "hub")]
    given = ["--conf", "spark.executor.memory=2g", "--conf", "spark.sql.shuffle.partitions = 8"]
    assert CliRunner().invoke(cli, args, env=env).exit_code == 0
    result = CliRunner().invoke(cli, [*args, *given, "--conf", "spark.executor.extraJavaOptions=-Da=b"], env=env)
    assert result.exit_code == 0, result.output
    assert seen == [
        {},
        {
            "spark.executor.memory": "2g",
            "spark.sql.shuffle.partitions": "8",
            "spark.executor.extraJavaOptions": "-Da=b",
        },
    ]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("executor.memory=2g", "'executor.memory=2g' is not a Spark setting; give KEY=VALUE with a key that starts"),
        ("spark.executor.memory", "'spark.executor.memory' is not a Spark setting; give KEY=VALUE"),
        ("spark.master=local[4]", "the Spark master is set with --spark-master, not --conf spark.master"),
    ],
)
def test_a_spark_setting_that_is_not_one(tmp_path: Path, given: str, expected: str) -> None:
    from tests.keys import key_env

    env = {**key_env(tmp_path), "SPANEDGE_TOKEN": "hub-admin-token-0123456789abcdef012345"}
    args = ["hub", "--sites", SITES, "--no-spark", "--state-dir", str(tmp_path / "hub"), "--conf", given]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 2
    assert "Invalid value for '--conf'" in result.output
    assert expected in " ".join(result.output.split())


def test_spanedge_hub_triggers_micro_batches_as_the_hub_does_by_default() -> None:
    from hub.engine.session import DEFAULT_TRIGGER
    from hub.server import HubConfig
    from spanedge.cli.hub import hub

    defaults = {p.name: p.default for p in hub.params}
    # None: 230 ms for the queries without a window, or --trigger if shorter (hub.engine.session.stateless_trigger_of)
    assert (defaults["trigger"], defaults["stateless_trigger"]) == (DEFAULT_TRIGGER, None)
    config = HubConfig(tokens={}, plan_key=None, state_dir=Path("."))  # type: ignore[arg-type]
    assert (config.trigger, config.stateless_trigger) == (DEFAULT_TRIGGER, None)
    help_text = " ".join(CliRunner().invoke(cli, ["hub", "--help"]).output.split())
    assert "[default: 230 milliseconds, or --trigger if shorter]" in help_text


@pytest.mark.parametrize("option", ["--trigger", "--stateless-trigger"])
def test_spanedge_hub_takes_a_trigger_only_as_an_interval(tmp_path: Path, option: str) -> None:
    from tests.keys import key_env

    env = {**key_env(tmp_path), "SPANEDGE_TOKEN": "hub-admin-token-0123456789abcdef012345"}
    args = ["hub", "--sites", SITES, "--no-spark", "--state-dir", str(tmp_path / "hub"), option, "fast"]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 2
    assert f"Invalid value for '{option}'" in result.output
    assert "'fast' is not an interval" in " ".join(result.output.split())


def test_spanedge_hub_passes_both_triggers_to_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    pytest.importorskip("fastapi")
    from hub.server import Hub
    from tests.keys import key_env

    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(Hub, "serve", lambda self: seen.append((self.config.trigger, self.config.stateless_trigger)))
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)
    env = {**key_env(tmp_path), "SPANEDGE_TOKEN": "hub-admin-token-0123456789abcdef012345"}
    args = ["hub", "--sites", SITES, "--no-spark", "--state-dir", str(tmp_path / "hub")]
    given = ["--trigger", "1 second", "--stateless-trigger", "0 seconds"]
    result = CliRunner().invoke(cli, [*args, *given], env=env)
    assert result.exit_code == 0, result.output
    assert seen == [("1 second", "0 seconds")]


def test_spanedge_hub_waits_for_an_old_owner_as_long_as_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    pytest.importorskip("fastapi")
    from hub.server import Hub
    from tests.keys import key_env

    seen: list[float] = []
    monkeypatch.setattr(Hub, "serve", lambda self: seen.append(self.coordinator.holds.limit_s))
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)
    env = {**key_env(tmp_path), "SPANEDGE_TOKEN": "hub-admin-token-0123456789abcdef012345"}
    args = ["hub", "--sites", SITES, "--no-spark", "--state-dir", str(tmp_path / "hub")]
    assert CliRunner().invoke(cli, args, env=env).exit_code == 0
    result = CliRunner().invoke(cli, [*args, "--handover-wait", "90"], env=env)
    assert result.exit_code == 0, result.output
    assert seen == [30.0, 90.0]
    wrong = CliRunner().invoke(cli, [*args, "--handover-wait", "-1"], env=env)
    assert wrong.exit_code != 0
    assert "-1" in wrong.output


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--plan", "plan.json"], "--plan does not go with 'agent join'"),
        (["--sites", SITES], "--sites does not go with 'agent join'"),
        (
            ["--site", "truck-9"],
            "--site truck-9 (or SPANEDGE_AGENT_SITE) was given, but the token enrols site truck-12",
        ),
    ],
)
def test_agent_join_refuses_options_the_join_decides(options: list[str], expected: str) -> None:
    from spanedge.join_token import new_join_token

    token = new_join_token("truck-12", "0" * 64).text
    code, out = run("agent", *options, "join", "https://hub.example:8443", token)
    assert code == 2
    assert expected in " ".join(out.split())


def test_site_add_sends_each_stream_as_sites_yaml_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from typing import Any

    from hub.api.client import HubClient

    sent: list[dict[str, Any]] = []

    def add_site(self: HubClient, site: str, **body: Any) -> dict[str, Any]:
        sent.append(body)
        answer = {"site": site, "token": "sej1.truck-13.x", "expires_at": 0.0, "broker": "mqtt://b:1883"}
        return {**answer, "labels": {}, "streams": body["streams"]}

    monkeypatch.setattr(HubClient, "add_site", add_site)
    args = ["site", "add", "truck-13", "--stream", "readings=trucks/13/+/temp"]
    code, out = run(*args, "--stream", "doors={topic: trucks/13/doors, rate: 2, qos: 0}", "--token", "t")
    assert code == 0, out
    assert sent[0]["streams"] == {
        "readings": {"topic": "trucks/13/+/temp", "rate": 1.0},
        "doors": {"topic": "trucks/13/doors", "rate": 2.0, "qos": 0},
    }
    assert "it sources readings (trucks/13/+/temp)" in out


@pytest.mark.parametrize(
    ("stream", "says"),
    [
        ("readings", "'readings' is not NAME=TOPIC"),
        ("readings=trucks/#/temp", "topic filter 'trucks/#/temp' is invalid"),
        ("readings={topic: t, rate: fast}", "streams.readings.rate: Expected `float`"),
    ],
)
def test_site_add_refuses_a_bad_stream_with_an_example(stream: str, says: str) -> None:
    code, out = run("site", "add", "truck-13", "--stream", stream)
    assert code == 2
    assert says in out
    assert "e.g. --stream readings=trucks/13/+/temp" in out
    code, out = run("site", "add", "truck-13", "--stream", "r=a/1", "--stream", "r=a/2")
    assert code == 2
    assert "stream 'r' is given twice" in out
