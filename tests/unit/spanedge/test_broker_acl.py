"""Per-site MQTT identities: the generated ACLs, password hashes and ``spanedge broker-config``."""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from spanedge.broker_acl import acl_text, broker_groups, identities, password_file, password_hash, spoke_patterns
from spanedge.cli import cli
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


def test_local_sink_topics_are_granted_on_a_shared_broker() -> None:
    text = acl_text(parse_sites(SHARED), ["cloud", "truck-7"], local_topics=["cold-chain/alerts"])
    assert _rules(text, "truck-7") == ["topic readwrite trucks/7/+/temp", "topic write cold-chain/alerts"]


def test_brokers_are_grouped_by_address() -> None:
    assert broker_groups(parse_sites(SHARED)) == {
        "hub.example:1883": ["cloud", "truck-7"],
        "gw9.example:1883": ["truck-9"],
    }


@pytest.mark.parametrize("name", ["plan", "heartbeat", "probe"])
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


def test_broker_config_writes_acls_passwords_and_configs(tmp_path: Path) -> None:
    sites = tmp_path / "sites.yaml"
    sites.write_text(SHARED)
    out = tmp_path / "mqtt"
    args = ["broker-config", "--sites", str(sites), "--out", str(out), "--observer", "monitor"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (out / "credentials").iterdir()) == ["cloud", "monitor", "truck-7", "truck-9"]
    assert stat.S_IMODE((out / "credentials" / "truck-7").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "passwords").stat().st_mode) == 0o600
    assert "user truck-7\ntopic readwrite trucks/7/+/temp" in (out / "acl").read_text()
    assert "user truck-9\ntopic readwrite #" in (out / "truck-9" / "acl").read_text()
    conf = (out / "mosquitto.conf").read_text()
    assert "allow_anonymous false" in conf
    assert f"acl_file {(out / 'acl').resolve()}" in conf
    assert "listener 8883" in conf
    first = (out / "credentials" / "truck-7").read_text()
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    assert (out / "credentials" / "truck-7").read_text() == first  # running it again rotates nothing


def test_broker_config_refuses_a_bad_sites_file(tmp_path: Path) -> None:
    sites = tmp_path / "sites.yaml"
    sites.write_text("sites: {}\n")
    result = CliRunner().invoke(cli, ["broker-config", "--sites", str(sites), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "error:" in result.output
