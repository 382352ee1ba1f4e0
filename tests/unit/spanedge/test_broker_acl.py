"""Per-site MQTT identities: the generated ACLs, password hashes and ``spanedge broker-config``."""

from __future__ import annotations

import base64
import hashlib
import os
import pwd
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from cryptography import x509

from spanedge import topics
from spanedge.broker_acl import (
    MAX_INFLIGHT_MESSAGES,
    MAX_QUEUED_MESSAGES,
    acl_text,
    broker_groups,
    identities,
    password_file,
    password_hash,
    spoke_patterns,
)
from spanedge.ca import CertificateAuthority, common_name
from spanedge.cli import cli
from spanedge.cli.broker_files import BrokerOwner
from spanedge.errors import InvalidName, InvalidSites
from spanedge.sites import parse_sites

SHARED = """
sites:
  cloud: {tier: hub, broker: "mqtt://hub.example:1883"}
  truck-7:
    tier: spoke
    broker: "mqtt://hub.example:1883"
    streams: {readings: {topic: "trucks/7/+/temp", rate: 10}}
  truck-9:
    tier: spoke
    broker: "mqtt://gw9.example:1883"
    streams: {readings: {topic: "trucks/9/+/temp", rate: 10}}
"""
#: mosquitto_passwd -b file alice secret (Mosquitto 2.0)
MOSQUITTO_PASSWD_LINE = "alice:$7$101$n9O741KcdBkSAEVz$zOLnT3j5+Cqq9CJpVXRKOLkdsOJJOdjBc+jFqH2S9stmGXa1gdYtfM78kC/ayNBLkd/Hzg5x/twQCNwXMb5rhw=="


def _rules(text: str, user: str) -> list[str]:
    """The ``topic`` lines of ``user`` in an ACL."""
    rules, current = [], None
    for line in text.splitlines():
        if line.startswith("user "):
            current = line.removeprefix("user ")
        elif line.startswith("topic ") and current == user:
            rules.append(line)
    return rules


def test_spokes_get_their_own_topics_by_username_pattern() -> None:
    text = acl_text(parse_sites(SHARED), ["cloud", "truck-7"])
    assert spoke_patterns() == [
        "pattern write spanedge/v1/+/+/%u",
        "pattern write spanedge/v1/control/%u/heartbeat",
        "pattern readwrite spanedge/v1/control/%u/probe",
        "pattern read spanedge/v1/control/%u/plan",
        "pattern read spanedge/v1/control/%u/model/#",
    ]
    for line in spoke_patterns():
        assert line in text.splitlines()
    assert _rules(text, "cloud") == ["topic readwrite #", "topic read $SYS/#"]
    # on a broker shared with the hub, a spoke gets its own stream topics, never '#'
    assert _rules(text, "truck-7") == ["topic readwrite trucks/7/+/temp"]
    assert "topic readwrite #" not in _rules(text, "truck-9")
    assert _rules(text, "truck-9") == ["topic read trucks/7/+/temp"]  # an offloaded replica reads truck-7's stream


def test_a_spoke_owns_a_broker_it_has_to_itself() -> None:
    text = acl_text(parse_sites(SHARED), ["truck-9"], observers=["monitor"])
    assert _rules(text, "truck-9") == ["topic readwrite #"]
    assert _rules(text, "truck-7") == ["topic read trucks/9/+/temp"]
    assert _rules(text, "monitor") == ["topic read #", "topic read $SYS/#"]


def _matches(topic_filter: str, topic: str) -> bool:
    """Whether an MQTT topic filter matches a topic (``+`` one level, ``#`` the rest)."""
    want, got = topic_filter.split("/"), topic.split("/")
    for i, level in enumerate(want):
        if level == "#":
            return True
        if i >= len(got) or level not in ("+", got[i]):
            return False
    return len(want) == len(got)


def test_only_hub_sites_may_write_a_hub_presence() -> None:
    sites = parse_sites(SHARED)
    presence = topics.control("cloud", "presence")
    text = acl_text(sites, ["cloud", "truck-7"], local_topics=["cold-chain/alerts"])
    for spoke in ("truck-7", "truck-9"):
        granted = [line.split(" ", 2)[2] for line in _rules(text, spoke) if "write" in line.split(" ")[1]]
        granted += [line.split(" ", 2)[2].replace("%u", spoke) for line in spoke_patterns() if "write" in line]
        assert not [f for f in granted if _matches(f, presence)], f"{spoke} may write {presence}"
    assert "topic readwrite #" in _rules(text, "cloud")


def test_local_sink_topics_are_granted_on_a_shared_broker() -> None:
    text = acl_text(parse_sites(SHARED), ["cloud", "truck-7"], local_topics=["cold-chain/alerts"])
    assert _rules(text, "truck-7") == ["topic readwrite trucks/7/+/temp", "topic write cold-chain/alerts"]


def test_brokers_are_grouped_by_address() -> None:
    assert broker_groups(parse_sites(SHARED)) == {
        "hub.example:1883": ["cloud", "truck-7"],
        "gw9.example:1883": ["truck-9"],
    }


@pytest.mark.parametrize("name", ["plan", "heartbeat", "probe", "presence"])
def test_a_site_named_like_a_control_topic_is_refused_when_the_file_loads(name: str) -> None:
    with pytest.raises(InvalidSites, match=rf"sites\.{name}: site name '{name}' is reserved \(its data topics"):
        parse_sites(SHARED.replace("truck-9", name))
    with pytest.raises(InvalidName, match="is reserved"):
        identities(parse_sites(SHARED), [name])


def test_an_observer_with_a_site_name_is_refused() -> None:
    with pytest.raises(InvalidSites, match="observer 'truck-7' has the name of a site"):
        identities(parse_sites(SHARED), ["truck-7"])
    with pytest.raises(InvalidName):
        identities(parse_sites(SHARED), ["bad/name"])


def test_the_hash_matches_mosquitto_passwd() -> None:
    user, hashed = MOSQUITTO_PASSWD_LINE.split(":", 1)
    salt = base64.b64decode(hashed.split("$")[3])
    assert f"{user}:{password_hash('secret', salt=salt)}" == MOSQUITTO_PASSWD_LINE


def test_a_password_file_holds_one_salted_hash_per_user() -> None:
    text = password_file({"truck-7": "pw-7", "cloud": "pw-c"})
    lines = text.splitlines()
    assert [line.split(":")[0] for line in lines] == ["cloud", "truck-7"]
    _, _, iterations, salt, digest = lines[1].split(":", 1)[1].split("$")
    assert int(iterations) == 101
    assert base64.b64decode(digest) == hashlib.pbkdf2_hmac("sha512", b"pw-7", base64.b64decode(salt), 101)
    assert password_hash("pw") != password_hash("pw")  # a fresh salt each time
    with pytest.raises(ValueError, match="must not be empty"):
        password_hash("")


TLS_SITES = """
sites:
  cloud: {tier: hub, broker: "mqtts://hub.example:8883", tls: {ca_file: ca.pem}}
  truck-7:
    tier: spoke
    broker: "mqtts://hub.example:8883"
    tls: {ca_file: ca.pem}
    streams: {readings: {topic: "trucks/7/+/temp", rate: 10}}
  truck-9:
    tier: spoke
    broker: "mqtts://gw9.example:8884"
    tls: {ca_file: ca.pem}
    streams: {readings: {topic: "trucks/9/+/temp", rate: 10}}
"""
SELF = f"{os.getuid()}:{os.getgid()}"  # an owner the test may give files to, as any user


def _settings(path: Path) -> dict[str, str]:
    """A mosquitto.conf as ``{option: value}`` (each option once)."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    pairs = [line.partition(" ") for line in lines]
    assert len({k for k, _, _ in pairs}) == len(pairs), f"an option repeats in {path}"
    return {k: v for k, _, v in pairs}


def _run(tmp_path: Path, *extra: str, sites: str = TLS_SITES) -> tuple[Path, Result]:
    path = tmp_path / "sites.yaml"
    path.write_text(sites)
    out = tmp_path / "mqtt"
    args = ["broker-config", "--sites", str(path), "--out", str(out), "--broker-owner", SELF, *extra]
    return out, CliRunner().invoke(cli, args)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_broker_config_writes_a_whole_config_per_broker_with_passwords(tmp_path: Path) -> None:
    out, result = _run(tmp_path, "--observer", "monitor")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (out / "credentials").iterdir()) == ["cloud", "monitor", "truck-7", "truck-9"]
    assert mode(out / "credentials") == 0o700
    assert mode(out / "credentials" / "truck-7") == 0o600
    assert mode(out / "passwords") == 0o600
    assert mode(out / "acl") == 0o600
    assert mode(out / "data") == 0o700
    assert "user truck-7\ntopic readwrite trucks/7/+/temp" in (out / "acl").read_text()
    assert "user truck-9\ntopic readwrite #" in (out / "truck-9" / "acl").read_text()
    hub = _settings(out / "mosquitto.conf")
    assert hub["listener"] == "8883 hub.example"  # the broker's host and port in sites.yaml
    assert hub["allow_anonymous"] == "false"
    assert hub["password_file"] == str((out / "passwords").resolve())
    assert hub["acl_file"] == str((out / "acl").resolve())
    assert hub["persistence"] == "true"
    assert hub["persistence_location"] == f"{(out / 'data').resolve()}/"
    assert int(hub["max_queued_messages"]) == MAX_QUEUED_MESSAGES
    assert hub["max_queued_bytes"] == "0"
    assert int(hub["max_inflight_messages"]) == MAX_INFLIGHT_MESSAGES
    assert "require_certificate" not in hub
    assert "user" not in hub  # a numeric owner: the broker's own default account
    assert _settings(out / "truck-9" / "mosquitto.conf")["listener"] == "8884 gw9.example"
    first = (out / "credentials" / "truck-7").read_text()
    _, again = _run(tmp_path, "--observer", "monitor")
    assert again.exit_code == 0, again.output
    assert (out / "credentials" / "truck-7").read_text() == first  # running it again rotates nothing


def test_broker_config_issues_server_and_client_certificates_of_the_hub_ca(tmp_path: Path) -> None:
    out, result = _run(
        tmp_path, "--ca-dir", str(tmp_path / "ca"), "--identity", "certificate", "--tls-host", "10.0.0.5"
    )
    assert result.exit_code == 0, result.output
    ca = CertificateAuthority.open(tmp_path / "ca")
    hub = _settings(out / "mosquitto.conf")
    assert hub["require_certificate"] == "true"
    assert hub["use_identity_as_username"] == "true"
    assert "password_file" not in hub
    assert hub["crlfile"] == str(ca.crl_file.resolve())
    assert hub["cafile"] == str((out / "tls" / "ca.pem").resolve())
    assert mode(out / "tls" / "server-key.pem") == 0o600
    server = x509.load_pem_x509_certificate((out / "tls" / "server.pem").read_bytes())
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["hub.example"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.5"]
    truck = out / "certs" / "truck-7"
    assert common_name((truck / "cert.pem").read_bytes()) == "truck-7"
    assert (truck / "ca.pem").read_bytes() == ca.cert_pem
    assert {p.name: mode(p) for p in truck.iterdir()} == {"ca.pem": 0o600, "cert.pem": 0o600, "key.pem": 0o600}
    first = (truck / "cert.pem").read_bytes()
    _, again = _run(tmp_path, "--ca-dir", str(tmp_path / "ca"), "--identity", "certificate")
    assert again.exit_code == 0, again.output
    assert (truck / "cert.pem").read_bytes() == first  # a site keeps its certificate


def test_broker_config_writes_paths_as_the_broker_sees_them(tmp_path: Path) -> None:
    extra = ["--ca-dir", str(tmp_path / "ca"), "--broker-dir", "/mosquitto/config", "--broker-ca-dir", "/mosquitto/ca"]
    out, result = _run(tmp_path, *extra, "--data-dir", "/mosquitto/data", "--bind", "0.0.0.0")
    assert result.exit_code == 0, result.output
    hub = _settings(out / "mosquitto.conf")
    assert hub["listener"] == "8883 0.0.0.0"
    assert hub["acl_file"] == "/mosquitto/config/acl"
    assert hub["password_file"] == "/mosquitto/config/passwords"
    assert hub["keyfile"] == "/mosquitto/config/tls/server-key.pem"
    assert hub["crlfile"] == "/mosquitto/ca/crl.pem"
    assert hub["persistence_location"] == "/mosquitto/data/"
    truck = _settings(out / "truck-9" / "mosquitto.conf")
    assert truck["acl_file"] == "/mosquitto/config/truck-9/acl"
    assert truck["persistence_location"] == "/mosquitto/data/truck-9/"
    assert not (out / "data").exists()  # on the broker's own disk


def test_broker_config_refuses_a_broker_without_tls(tmp_path: Path) -> None:
    _, result = _run(tmp_path, sites=SHARED)
    assert result.exit_code == 2
    assert "site 'cloud' names broker mqtt://hub.example:1883, without TLS" in result.output
    assert "mqtts://hub.example:1883" in result.output


def test_certificate_identities_need_the_ca(tmp_path: Path) -> None:
    _, result = _run(tmp_path, "--identity", "certificate")
    assert result.exit_code == 2
    assert "--identity certificate needs --ca-dir" in result.output


def test_the_broker_owner_is_mosquitto_for_root_and_nobody_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert BrokerOwner.default() is None
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(pwd, "getpwnam", lambda name: pwd.struct_passwd((name, "x", 105, 108, "", "/", "/bin/false")))
    assert BrokerOwner.default() == BrokerOwner("mosquitto", 105, 108)
    assert BrokerOwner.parse("1883:1884") == BrokerOwner(None, 1883, 1884)


def test_an_unknown_broker_owner_is_refused(tmp_path: Path) -> None:
    _, result = _run(tmp_path, "--broker-owner", "no-such-user-here")
    assert result.exit_code == 2
    assert "no user 'no-such-user-here' on this machine" in result.output


def test_broker_config_refuses_a_bad_sites_file(tmp_path: Path) -> None:
    sites = tmp_path / "sites.yaml"
    sites.write_text("sites: {}\n")
    result = CliRunner().invoke(cli, ["broker-config", "--sites", str(sites), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "error:" in result.output
