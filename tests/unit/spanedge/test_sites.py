"""sites.yaml parsing and its error messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spanedge.errors import InvalidSites
from spanedge.sites import Sites, Tier, load_sites, parse_sites
from tests.conftest import EXAMPLES

ROOT = Path(__file__).resolve().parents[3]

GOOD = """
sites:
  cloud: {tier: hub, broker: "mqtt://cloud.example:1883", cpu: 8}
  factory-a:
    tier: spoke
    broker: "mqtts://gw-a.example:8883"
    tls: {ca_file: ca.pem, cert_file: a.crt, key_file: a.key}
    username: agent-a
    password_env: FACTORY_A_PW
    cpu: 0.5
    streams:
      readings: {topic: "sensors/+/temp", rate: 50, record_bytes: 120}
default_link: {latency_ms: 70, bandwidth_mbps: 5}
links:
  - {between: [factory-a, cloud], latency_ms: 20, bandwidth_mbps: 50}
"""


def test_parses_sites_links_and_brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    sites = parse_sites(GOOD)
    assert [s.name for s in sites.hubs] == ["cloud"]
    spoke = sites.site("factory-a")
    assert spoke.tier is Tier.SPOKE
    assert spoke.streams["readings"].rate == 50
    broker = spoke.mqtt()
    assert (broker.scheme, broker.host, broker.port, broker.username) == ("mqtts", "gw-a.example", 8883, "agent-a")
    monkeypatch.setenv("FACTORY_A_PW", "s3cret")
    assert broker.password() == "s3cret"
    assert sites.links[0].latency_ms == 20
    assert sites.default_link.latency_ms == 70


def test_missing_password_variable_says_what_to_export(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FACTORY_A_PW", raising=False)
    with pytest.raises(InvalidSites, match="environment variable FACTORY_A_PW is not set"):
        parse_sites(GOOD).site("factory-a").mqtt().password()


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        ("cpu: 0.5", r"<s>:10: sites.factory-a.cpu: Expected `float` > 0.0 \(got -1\)"),
        ('broker: "mqtts://gw-a.example:8883"', r"<s>:6: sites.factory-a.broker: .*mqtt://host:1883"),
        ("rate: 50", r"<s>:12: sites.factory-a.streams.readings.rate"),
    ],
)
def test_errors_carry_file_line_and_field(bad: str, pattern: str) -> None:
    replacement = {
        "cpu: 0.5": "cpu: -1",
        'broker: "mqtts://gw-a.example:8883"': 'broker: "http://gw-a"',
        "rate: 50": "rate: fast",
    }[bad]
    with pytest.raises(InvalidSites, match=pattern):
        parse_sites(GOOD.replace(bad, replacement), "<s>")


def test_password_in_url_and_mqtts_without_tls_are_rejected() -> None:
    with pytest.raises(InvalidSites, match="do not put a password in the broker URL"):
        parse_sites(GOOD.replace("mqtts://gw-a.example:8883", "mqtt://u:pw@gw-a.example:1883"))
    with pytest.raises(InvalidSites, match="mqtts:// broker needs tls"):
        parse_sites(GOOD.replace("    tls: {ca_file: ca.pem, cert_file: a.crt, key_file: a.key}\n", ""))


def test_structural_errors() -> None:
    with pytest.raises(InvalidSites, match="at least one site must have tier: hub"):
        parse_sites("sites:\n  a: {tier: spoke, broker: 'mqtt://a'}\n")
    with pytest.raises(
        InvalidSites,
        match=r"<sites.yaml>:15: links\[0\].between: unknown site 'nowhere'; known sites: cloud, factory-a",
    ):
        parse_sites(GOOD.replace("[factory-a, cloud]", "[factory-a, nowhere]"))
    with pytest.raises(InvalidSites, match=r"<s>:3: not valid YAML"):
        parse_sites("sites:\n  a: [\n", "<s>")
    with pytest.raises(
        InvalidSites,
        match=r"<sites.yaml>:3: sites.cloud.colour: unknown field \(got .red.\); remove it or fix its spelling",
    ):
        parse_sites(GOOD.replace("cpu: 8}", "cpu: 8, colour: red}"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidSites, match="cannot read sites file"):
        load_sites(tmp_path / "nope.yaml")


@pytest.mark.parametrize("example", ["cold_chain", "traffic"])
def test_examples_parse_and_match_their_apps(example: str) -> None:
    from spanedge.loader import load_app

    app = load_app(EXAMPLES / example / "app.py")
    sites = load_sites(EXAMPLES / example / "sites.yaml")
    streams = {op.stream for op in app.operators.values() if op.stream}
    sites.check_app_streams(streams, app.name)
    assert len(sites.spokes) >= 3
    assert len(sites.hubs) >= 1
    app.graph()


def test_authenticate_gives_a_client_credentials_and_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, dict[str, object]]] = []

    class Client:
        def username_pw_set(self, username: str, password: str | None) -> None:
            calls.append(("login", {"username": username, "password": password}))

        def tls_set(self, **kwargs: object) -> None:
            calls.append(("tls", kwargs))

    monkeypatch.setenv("FACTORY_A_PW", "s3cret")
    sites = parse_sites(GOOD)
    sites.site("factory-a").mqtt().authenticate(Client())
    assert calls == [
        ("login", {"username": "agent-a", "password": "s3cret"}),
        ("tls", {"ca_certs": "ca.pem", "certfile": "a.crt", "keyfile": "a.key"}),
    ]
    calls.clear()
    sites.site("cloud").mqtt().authenticate(Client())
    assert calls == []


def _leaves(data: object, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    if isinstance(data, dict):
        return [leaf for key, value in data.items() for leaf in _leaves(value, (*path, key))]
    if isinstance(data, list):
        return [leaf for i, value in enumerate(data) for leaf in _leaves(value, (*path, i))]
    return [path]


def _shown(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


@pytest.mark.parametrize("leaf", _leaves(yaml.safe_load(GOOD)), ids=_shown)
def test_a_wrong_value_anywhere_is_named_by_its_place(leaf: tuple[str | int, ...]) -> None:
    data = yaml.safe_load(GOOD)
    parent = data
    for step in leaf[:-1]:
        parent = parent[step]
    parent[leaf[-1]] = [[1]]  # no field of a sites file takes a list of lists
    with pytest.raises(InvalidSites) as info:
        parse_sites(yaml.safe_dump(data, sort_keys=False), "s.yaml")
    assert f": {_shown(leaf)}: Expected `" in str(info.value)
    assert "(got [[1]])" in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sites: []", "s.yaml:1: sites: Expected `object`, got `array` (got [])"),
        ("sites: {a: 3}", "s.yaml:1: sites.a: Expected `object`, got `int` (got 3)"),
        ("sites: {1: {tier: hub, broker: 'mqtt://a'}}", "s.yaml:1: sites: key 1: Expected `str`, got `int`"),
        (
            "sites:\n  a: {broker: 'mqtt://a'}",
            "s.yaml:2: sites.a.tier: required field is missing; add it; use one of: hub, spoke",
        ),
        (
            "sites:\n  a:\n    tier: edge\n    broker: 'mqtt://a'",
            "s.yaml:3: sites.a.tier: Invalid enum value 'edge'; use one of: hub, spoke",
        ),
        (
            "sites:\n  a: {tier: hub, broker: 'mqtt://a', tls: {}}",
            "s.yaml:2: sites.a.tls.ca_file: required field is missing; add it",
        ),
        (
            "sites:\n  a:\n    tier: hub\n    broker: 'mqtt://a'\n    streams:\n      s: {topic: t, rate: 1, qos: 2}",
            "s.yaml:6: sites.a.streams.s.qos: Expected `int` <= 1 (got 2)",
        ),
        (
            "sites:\n  a: {tier: hub, broker: 'mqtt://a', streams: {s: {topic: '', rate: 1}}}",
            "s.yaml:2: sites.a.streams.s.topic: a stream needs an MQTT topic filter (topic:) or a connector URL (url:) (got '')",
        ),
        (
            "sites: {a: {tier: hub, broker: 'mqtt://a'}}\ndefault_link: {cost: -1}",
            "s.yaml:2: default_link.cost: Expected `float` >= 0.0 (got -1)",
        ),
        (
            "sites: {a: {tier: hub, broker: 'mqtt://a'}}\nlinks:\n  - {between: [a, a], latency_ms: 1}\n"
            "  - {between: [a], latency_ms: 1}",
            "s.yaml:4: links[1].between: Expected `array` of length 2, got 1 (got ['a'])",
        ),
        (
            "sites: {a: {tier: hub, broker: 'mqtt://a'}}\nlinks: {a: 1}",
            "s.yaml:2: links: Expected `array`, got `object`",
        ),
        (
            "sites: {a: {tier: hub, broker: 'mqtt://a'}}\nlink: []",
            "s.yaml:2: link: unknown field (got []); remove it or fix its spelling "
            "(fields here: sites, default_link, links, simulation)",
        ),
        (
            "sites:\n  a: {tier: hub, broker: 'mqtt://a', cpu: true}",
            "s.yaml:2: sites.a.cpu: Expected `float`, got `bool` (got True)",
        ),
        ("sites:\n  a: {tier: spoke, broker: 'mqtt://a'}", "s.yaml:1: sites: at least one site must have tier: hub"),
    ],
)
def test_malformed_files_say_what_where_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(InvalidSites) as info:
        parse_sites(text, "s.yaml")
    assert str(info.value) == f"invalid sites file:\n  {message}"


def test_sites_from_data_are_checked_and_name_where_they_come_from() -> None:
    data = yaml.safe_load(GOOD)
    sites = Sites.of(data)
    assert sites == parse_sites(GOOD)
    data["sites"]["cloud"]["cpu"] = 0
    with pytest.raises(
        InvalidSites, match=r"^invalid sites file:\n  generated: sites.cloud.cpu: Expected `float` > 0.0"
    ):
        Sites.of(data, "generated")


def test_copies_keep_the_names_and_the_plain_data_reads_back() -> None:
    sites = parse_sites(GOOD)
    roomy = sites.replace(sites={k: v.replace(cpu=4.0) for k, v in sites.sites.items()})
    assert [(s.name, s.cpu) for s in roomy.sites.values()] == [("cloud", 4.0), ("factory-a", 4.0)]
    assert sites.site("cloud").cpu == 8
    data = sites.to_data()
    assert data["sites"]["factory-a"]["tls"] == {"ca_file": "ca.pem", "cert_file": "a.crt", "key_file": "a.key"}
    assert "simulation" not in data
    assert Sites.of(data) == sites
    with pytest.raises(InvalidSites, match=r"links\[0\].between: unknown site 'factory-a'"):
        Sites.of({**data, "sites": {"cloud": data["sites"]["cloud"]}})


def test_the_agents_path_loads_neither_pydantic_nor_importlib_metadata() -> None:
    code = (
        "import sys, edge_agent.main; from spanedge.sites import load_sites;"
        f"load_sites({str(EXAMPLES / 'cold_chain' / 'sites.yaml')!r});"
        "print(sorted(m for m in ('pydantic', 'pydantic_core', 'importlib.metadata') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
