"""sites.yaml parsing and its error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanedge.errors import InvalidSites
from spanedge.sites import Tier, load_sites, parse_sites
from tests.conftest import EXAMPLES

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
        ("cpu: 0.5", r"<s>:10: sites.factory-a.cpu: Input should be greater than 0"),
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
    with pytest.raises(InvalidSites, match=r"links\[0\]: unknown site 'nowhere'"):
        parse_sites(GOOD.replace("[factory-a, cloud]", "[factory-a, nowhere]"))
    with pytest.raises(InvalidSites, match=r"<s>:3: not valid YAML"):
        parse_sites("sites:\n  a: [\n", "<s>")
    with pytest.raises(InvalidSites, match=r"sites.cloud.colour: Extra inputs are not permitted"):
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
