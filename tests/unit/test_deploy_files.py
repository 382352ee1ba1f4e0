"""The files in ``deploy/`` hold together: the compose file, the Dockerfiles, the systemd unit, the examples.

No Docker engine or systemd is needed: each file is parsed and checked for what a
gateway relies on (non-root users, state that outlives a container, SIGTERM with
time to drain, the light core on agents, broker queues set deliberately), and every
``SPANEDGE_AGENT_*`` variable they name is checked against the agent's real options.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from edge_agent.config import env_var
from spanedge.cli import cli
from spanedge.cli.agent import agent
from spanedge.signing import ENV_KEY_FILE, ENV_PUBLIC_KEY_FILE, ENV_PUBLIC_KEYS
from spanedge.sites import Tier, load_sites
from tests.conftest import ROOT, missing_part

DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
AGENT_DOCKERFILE = DEPLOY / "agent.Dockerfile"
HUB_DOCKERFILE = DEPLOY / "hub.Dockerfile"
STATE = "/var/lib/spanedge"


def instructions(path: Path) -> list[tuple[str, str]]:
    """A Dockerfile's ``(INSTRUCTION, arguments)`` pairs: comments dropped, continued lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        words = (pending + line).split(maxsplit=1)
        pending = ""
        out.append((words[0].upper(), words[1] if len(words) > 1 else ""))
    assert not pending, f"{path.name} ends inside a continued line"
    return out


def final_stage(steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The instructions after the last ``FROM``: what the shipped image is made of."""
    last = max(i for i, (name, _) in enumerate(steps) if name == "FROM")
    return steps[last:]


def exec_form(args: str) -> list[str]:
    """The arguments of an exec-form instruction (``["a", "b"]``) or, failing that, its shell words."""
    if args.startswith("["):
        value = json.loads(args)
        assert isinstance(value, list)
        return [str(v) for v in value]
    return shlex.split(args)


def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def agent_services(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The compose services built from the agent's Dockerfile."""
    return {
        name: svc
        for name, svc in data["services"].items()
        if isinstance(svc.get("build"), dict) and svc["build"].get("dockerfile") == "deploy/agent.Dockerfile"
    }


def agent_env_vars() -> set[str]:
    """The ``SPANEDGE_AGENT_*`` variables that ``spanedge agent`` reads: one per option."""
    names = {p.name for p in agent.params if p.name}
    assert {"site", "sites", "state_dir"} <= names, names
    return {env_var(name) for name in names}


# -- Dockerfiles ---------------------------------------------------------------------


@pytest.mark.parametrize("path", [AGENT_DOCKERFILE, HUB_DOCKERFILE], ids=lambda p: p.name)
def test_each_image_runs_as_a_user_that_is_not_root(path: Path) -> None:
    steps = instructions(path)
    assert steps[0][0] in ("FROM", "ARG"), f"{path.name} must start with FROM"
    froms = [args for name, args in steps if name == "FROM"]
    assert froms, f"{path.name} has no FROM"
    assert all(f.split()[0].startswith("python:3.11-slim") for f in froms), froms
    users = [args.split(":")[0] for name, args in final_stage(steps) if name == "USER"]
    assert users, f"{path.name}: the final image has no USER"
    assert users[-1] not in ("root", "0"), f"{path.name} runs as root"


@pytest.mark.parametrize("path", [AGENT_DOCKERFILE, HUB_DOCKERFILE], ids=lambda p: p.name)
def test_each_image_copies_only_sources_that_exist(path: Path) -> None:
    for name, args in instructions(path):
        if name != "COPY" or "--from=" in args:
            continue
        *sources, _ = shlex.split(args)
        for source in sources:
            assert (ROOT / source).exists(), f"{path.name} copies {source}, which the repository lacks"


def test_the_agent_image_is_the_light_core_with_its_state_in_a_volume() -> None:
    steps = instructions(AGENT_DOCKERFILE)
    runs = " ".join(args for name, args in steps if name == "RUN")
    for heavy in ("pyspark", "fastapi", "pulp", "highspy", "numpy", "[hub]", "[all]", "[placement]", "[sim]"):
        assert heavy not in runs, f"the agent image installs {heavy}"
    assert "pip install" in runs
    image = final_stage(steps)
    volumes = [v for name, args in image if name == "VOLUME" for v in exec_form(args)]
    assert STATE in volumes
    env = " ".join(args for name, args in image if name == "ENV")
    assert f"SPANEDGE_AGENT_STATE_DIR={STATE}" in env
    entrypoints = [exec_form(args) for name, args in image if name == "ENTRYPOINT"]
    assert entrypoints[-1] == ["spanedge", "agent"]
    signals = [args for name, args in image if name == "STOPSIGNAL"]
    assert signals in ([], ["SIGTERM"])


def test_the_hub_image_has_spark_java_the_hub_extra_and_the_postgres_sink() -> None:
    steps = instructions(HUB_DOCKERFILE)
    runs = " ".join(args for name, args in steps if name == "RUN")
    assert "openjdk-17-jre-headless" in runs
    assert "[hub,postgres]" in runs
    image = final_stage(steps)
    assert STATE in [v for name, args in image if name == "VOLUME" for v in exec_form(args)]
    entrypoints = [exec_form(args) for name, args in image if name == "ENTRYPOINT"]
    assert entrypoints[-1] == ["spanedge", "hub"]


def test_the_hub_image_checks_its_health_over_verified_https() -> None:
    image = final_stage(instructions(HUB_DOCKERFILE))
    (command,) = [exec_form(args) for name, args in image if name == "CMD"]
    state_dir = command[command.index("--state-dir") + 1]
    assert "--plain-http" not in command
    (check,) = [args for name, args in image if name == "HEALTHCHECK"]
    probe = exec_form(check.split(" CMD ", 1)[1])
    assert probe[:2] == ["python", "-c"]
    port = command[command.index("--port") + 1]
    assert f"'https://127.0.0.1:{port}/healthz'" in probe[2]
    assert f"'{state_dir}/ca/ca.pem'" in probe[2]  # the CA the hub makes in its state directory
    assert "create_default_context(cafile=ca)" in probe[2]
    compile(probe[2], "HEALTHCHECK", "exec")


# -- docker-compose.yml --------------------------------------------------------------


def test_compose_runs_a_hub_a_broker_and_two_agents() -> None:
    data = compose()
    services = data["services"]
    assert {"hub", "broker"} <= set(services)
    assert services["hub"]["build"]["dockerfile"] == "deploy/hub.Dockerfile"
    agents = agent_services(data)
    assert len(agents) == 2, sorted(services)
    sites = load_sites(DEPLOY / "sites.yaml")
    served = [svc["environment"]["SPANEDGE_AGENT_SITE"] for svc in agents.values()]
    assert len(set(served)) == 2, "two agents serve the same site"
    assert {s.name for s in sites.spokes} == set(served)
    assert [s.tier for s in sites.hubs] == [Tier.HUB]


def test_compose_keeps_every_state_in_a_named_volume() -> None:
    data = compose()
    declared = set(data.get("volumes") or {})
    stateful = {**agent_services(data), "hub": data["services"]["hub"]}
    for name, svc in stateful.items():
        mounts = [str(v).split(":") for v in svc.get("volumes", [])]
        state = [m[0] for m in mounts if len(m) > 1 and m[1] == STATE]
        assert state, f"{name} keeps no state volume at {STATE}"
        assert state[0] in declared, f"{name}: {state[0]} is not a named volume"
    own = [m for svc in stateful.values() for m in svc["volumes"] if str(m).endswith(STATE)]
    assert len(set(own)) == len(own), "two services share one state volume"


def test_compose_gives_the_private_plan_key_to_the_hub_alone() -> None:
    data = compose()
    hub = data["services"]["hub"]
    key_file = hub["environment"][ENV_KEY_FILE]
    assert any(str(v).split(":")[1] == key_file for v in hub["volumes"]), "the hub's key file is not mounted"
    for name, svc in agent_services(data).items():
        env = svc["environment"]
        assert ENV_PUBLIC_KEY_FILE in env or ENV_PUBLIC_KEYS in env, f"{name} trusts no plan key"
        assert ENV_KEY_FILE not in env, f"{name} is given the hub's private key"
        assert not any(".pem" in str(v) for v in svc["volumes"]), f"{name} mounts a private key"


def test_compose_agents_stop_with_sigterm_and_time_to_drain() -> None:
    for name, svc in agent_services(compose()).items():
        assert svc.get("stop_signal", "SIGTERM") == "SIGTERM", name
        grace = re.fullmatch(r"(\d+)s", str(svc.get("stop_grace_period", "")))
        assert grace, f"{name}: set stop_grace_period in seconds (30s), or Docker kills the agent after 10 s"
        assert int(grace[1]) >= 15, f"{name}: stop_grace_period leaves the agent too little time to drain"


def test_compose_broker_sets_its_queue_limits_deliberately() -> None:
    broker = compose()["services"]["broker"]
    mounts = [str(v).split(":") for v in broker["volumes"]]
    conf = [m for m in mounts if m[1] == "/mosquitto/config/mosquitto.conf"]
    assert conf, "the broker runs with the image's default config"
    settings = {}
    for line in (DEPLOY / conf[0][0]).read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            assert "#" not in value, f"mosquitto.conf: a comment at the end of {line!r} is read as a value"
            settings[key] = value
    assert int(settings["max_queued_messages"]) != 1000  # Mosquitto's default, which drops QoS 1 messages
    assert "max_queued_bytes" in settings
    assert settings["persistence"] == "true"


# -- systemd -------------------------------------------------------------------------


def test_the_systemd_unit_restarts_on_failure_and_stops_with_time_to_drain() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    unit.read(DEPLOY / "spanedge-agent.service")
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    command = shlex.split(service["ExecStart"].lstrip("-@:+!"))
    assert Path(command[0]).name == "spanedge"
    assert command[1] == "agent"
    assert service["EnvironmentFile"].lstrip("-") == "/etc/spanedge/agent.env"
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) >= 15
    assert service["StateDirectory"] == "spanedge"
    assert service.get("DynamicUser") == "yes" or service.get("User") not in (None, "root", "0")
    assert unit["Install"]["WantedBy"] == "multi-user.target"


# -- environment variables -----------------------------------------------------------


def test_agent_env_example_is_valid_for_systemd_and_docker() -> None:
    values = {}
    for line in (DEPLOY / "agent.env.example").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", line), f"agent.env.example: {line!r} is not VAR=value"
        key, _, value = line.partition("=")
        values[key] = value
    assert values["SPANEDGE_AGENT_SITE"]
    assert ENV_PUBLIC_KEYS in values  # what a managed agent needs to accept plans


@pytest.mark.parametrize(
    "name", ["agent.Dockerfile", "docker-compose.yml", "spanedge-agent.service", "agent.env.example"]
)
def test_every_agent_variable_named_is_an_agent_option(name: str) -> None:
    named = set(re.findall(r"\bSPANEDGE_AGENT_[A-Z0-9_]+", (DEPLOY / name).read_text()))
    assert named, f"{name} names no agent option"
    unknown = named - agent_env_vars()
    assert not unknown, f"{name} sets {sorted(unknown)}, which `spanedge agent` does not read"


# -- the secure broker of the compose file -------------------------------------------


def header_commands(path: Path) -> list[list[str]]:
    """The ``spanedge`` command lines of a file's header comment (``sudo`` dropped, continued lines joined)."""
    commands, pending = [], ""
    for raw in path.read_text().splitlines():
        if not raw.startswith("#"):
            break
        line = raw.lstrip("#").strip()
        if pending or line.startswith(("spanedge ", "sudo spanedge ")):
            pending += line.removesuffix("\\").strip() + " "
            if not line.endswith("\\"):
                words = shlex.split(pending.split("#", 1)[0])
                commands.append(words[1:] if words[0] == "sudo" else words)
                pending = ""
    return commands


def settings(text: str) -> dict[str, str]:
    """A mosquitto.conf as ``{option: value}``, each option once."""
    pairs = [line.partition(" ") for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert len({k for k, _, _ in pairs}) == len(pairs), "an option repeats"
    return {k: v for k, _, v in pairs}


def broker_config_run(tmp_path: Path) -> tuple[list[str], Path, Path]:
    """Run the header's ``broker-config`` with --out and --ca-dir in ``tmp_path``: (its arguments, out, ca)."""
    runs = [c for c in header_commands(DEPLOY / "mosquitto.conf") if c[:2] == ["spanedge", "broker-config"]]
    assert len(runs) == 1, "deploy/mosquitto.conf shows no (or several) broker-config commands"
    args = runs[0][1:]
    assert [c for c in header_commands(COMPOSE) if c[:2] == ["spanedge", "broker-config"]] == [runs[0]], (
        "docker-compose.yml and mosquitto.conf show different broker-config commands"
    )
    out, ca = tmp_path / "mqtt", tmp_path / "ca"
    local = {"--out": str(out), "--ca-dir": str(ca), "--broker-owner": f"{os.getuid()}:{os.getgid()}"}
    here = [local.get(args[i - 1], a) if i else a for i, a in enumerate(args)]
    here = [str(ROOT / a) if a == "deploy/sites.yaml" else a for a in here]
    result = CliRunner().invoke(cli, here)
    assert result.exit_code == 0, result.output
    return args, out, ca


def test_deploy_mosquitto_conf_is_what_broker_config_writes(tmp_path: Path) -> None:
    _, out, _ = broker_config_run(tmp_path)
    shipped = settings((DEPLOY / "mosquitto.conf").read_text())
    assert shipped == settings((out / "mosquitto.conf").read_text())
    assert shipped["allow_anonymous"] == "false"
    assert shipped["require_certificate"] == "true"
    assert shipped["listener"] == "8883 broker"


def test_compose_broker_mounts_what_broker_config_wrote_where_its_config_points(tmp_path: Path) -> None:
    args, out, ca = broker_config_run(tmp_path)
    option = dict(zip(args[1::2], args[2::2], strict=False))
    broker = compose()["services"]["broker"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in broker["volumes"]}
    assert mounts["/mosquitto/config/mosquitto.conf"] == "./mosquitto.conf"
    # each place the broker sees, and where the command wrote it on this machine
    seen = {option["--broker-dir"]: out, option["--broker-ca-dir"]: ca}
    conf = settings((DEPLOY / "mosquitto.conf").read_text())
    for key in ("cafile", "certfile", "keyfile", "crlfile", "acl_file"):
        target = next((t for t in mounts if conf[key] == t or conf[key].startswith(t + "/")), None)
        assert target is not None, f"mosquitto.conf's {key} {conf[key]} is in no mount of the broker"
        source = (DEPLOY / mounts[target]).resolve()
        root = next(b for b in seen if target == b or target.startswith(b + "/"))
        written = seen[root] / Path(target).relative_to(root)
        deploy_dir = {option["--out"]: out, option["--ca-dir"]: ca}
        expected = next(
            (ROOT / d / written.relative_to(w)).resolve() for d, w in deploy_dir.items() if written.is_relative_to(w)
        )
        assert source == expected, f"the broker mounts {mounts[target]} at {target}; the command wrote it at {written}"
        assert written.exists(), f"broker-config writes no {written.name} for {key}"
    assert conf["persistence_location"].rstrip("/") in mounts, "the broker's persistence directory is not a volume"
    assert mounts[conf["persistence_location"].rstrip("/")] in compose()["volumes"]


def _env_vars_in_code() -> set[str]:
    """Every ``SPANEDGE_*`` variable the packages name in their code, and every one their commands read."""
    named = set()
    for package in ("spanedge", "edge_agent", "hub"):
        for path in (ROOT / package).rglob("*.py"):
            named |= set(re.findall(r"[\"'](SPANEDGE_[A-Z0-9_]+)[\"']", path.read_text()))
    for command in cli.commands.values():
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            named |= {envvar} if isinstance(envvar, str) else set(envvar or ())
    return named | agent_env_vars()


def test_every_spanedge_variable_in_compose_is_one_the_code_reads() -> None:
    known = _env_vars_in_code()
    for name, svc in compose()["services"].items():
        unknown = {v for v in svc.get("environment", {}) if v.startswith("SPANEDGE_")} - known
        assert not unknown, f"compose service {name} sets {sorted(unknown)}, which no SpanEdge command reads"


def _told_paths(name: str, svc: dict[str, Any]) -> set[str]:
    """The paths a service's command is told to use: its variables, its flags and its sites.yaml's files."""
    told = {str(v) for v in svc.get("environment", {}).values() if str(v).startswith("/")}
    command = [str(w) for w in svc.get("command", [])]
    told |= {w for w in command if w.startswith("/")}
    flags = dict(zip(command[::2], command[1::2], strict=False))
    if "--state-dir" in flags:
        told.add(f"{flags['--state-dir']}/ca")  # where the hub keeps (or makes) its CA
    sites = load_sites(DEPLOY / "sites.yaml")
    site = svc.get("environment", {}).get("SPANEDGE_AGENT_SITE") or sites.hubs[0].name
    tls = sites.site(site).mqtt().tls
    assert tls is not None, f"{name}: its site {site} talks to its broker without TLS"
    told |= {p for p in (tls.ca_file, tls.cert_file, tls.key_file) if p}
    return told


def test_every_compose_mount_is_a_path_its_service_is_told_to_use() -> None:
    services = compose()["services"]
    for name in ("hub", *agent_services(compose())):
        svc = services[name]
        told = _told_paths(name, svc)
        for mount in svc["volumes"]:
            target = str(mount).split(":")[1]
            used = any(p == target or p.startswith(target + "/") or target.startswith(p + "/") for p in told)
            assert used, f"compose service {name} mounts {target}, which none of its settings names"


def test_every_site_in_compose_is_in_deploy_sites_yaml_with_its_own_certificate() -> None:
    sites = load_sites(DEPLOY / "sites.yaml")
    services = compose()["services"]
    for name, svc in {"hub": services["hub"], **agent_services(compose())}.items():
        site = svc.get("environment", {}).get("SPANEDGE_AGENT_SITE", sites.hubs[0].name)
        assert site in sites.sites, f"compose service {name} serves {site}, which deploy/sites.yaml lacks"
        certs = [str(m).split(":")[0] for m in svc["volumes"] if "/certs/" in str(m)]
        assert certs == [f"./mqtt/certs/{site}"], f"{name} must mount its own site's certificate only: {certs}"
    for site in sites.sites.values():
        assert site.mqtt().scheme == "mqtts", f"deploy/sites.yaml: {site.name} talks to its broker without TLS"


def test_compose_commands_use_only_options_the_commands_take() -> None:
    hub_command = cli.commands["hub"]
    taken = {o for p in hub_command.params for o in getattr(p, "opts", [])}
    flags = [str(w) for w in compose()["services"]["hub"]["command"] if str(w).startswith("--")]
    assert set(flags) <= taken, f"the hub's command has {sorted(set(flags) - taken)}, which `spanedge hub` lacks"
    for words in header_commands(COMPOSE) + header_commands(DEPLOY / "mosquitto.conf"):
        command: click.Command = cli
        rest = words[1:]
        while isinstance(command, click.Group):
            assert rest[0] in command.commands, f"{' '.join(words)}: spanedge has no command {rest[0]!r}"
            command, rest = command.commands[rest[0]], rest[1:]
        options = {o for p in command.params for o in getattr(p, "opts", [])}
        used = {w for w in rest if w.startswith("--")}
        assert used <= options, f"`{' '.join(words[:2])}` takes no {sorted(used - options)}"


def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        missing_part("systemd-analyze is not installed (apt-get install systemd); the unit is not verified")
    spanedge = Path(sys.executable).with_name("spanedge")
    assert spanedge.exists(), f"no spanedge command beside {sys.executable}: pip install -e ."
    # verify checks that ExecStart's program exists: point it at this machine's spanedge
    text = (DEPLOY / "spanedge-agent.service").read_text()
    assert "ExecStart=/opt/spanedge/bin/spanedge " in text
    unit = tmp_path / "spanedge-agent.service"
    unit.write_text(text.replace("/opt/spanedge/bin/spanedge", str(spanedge)))
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not result.stderr.strip(), f"systemd-analyze verify warns: {result.stderr}"
