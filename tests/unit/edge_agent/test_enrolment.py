"""``spanedge agent join`` on the gateway: the pinned CA is checked before anything is sent; files are private."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path
from typing import Any

import pytest

from edge_agent import enrolment
from edge_agent.enrolment import JoinFailed, join
from hub.control.brokers import BrokerFiles
from hub.control.coordinator import Coordinator
from hub.control.enrolment import Enrolment
from hub.control.fleet import Fleet
from hub.control.join_tokens import JoinTokens
from hub.control.registry import SiteRegistry
from spanedge.ca import CertificateAuthority
from spanedge.sites import load_sites, parse_sites
from tests.keys import KEY

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtts://hub.example:8883", tls: {ca_file: ca.pem}}
"""


@pytest.fixture
def hub(tmp_path: Path) -> Enrolment:
    fleet = Fleet(parse_sites(SITES), tmp_path / "hub" / "fleet.json")
    ca = CertificateAuthority.open(tmp_path / "hub" / "ca")
    coordinator = Coordinator(SiteRegistry(fleet.sites))
    tokens = JoinTokens(tmp_path / "hub" / "join-tokens.json")
    return Enrolment(
        fleet, tokens, ca, BrokerFiles(None), coordinator, KEY.public_key, default_broker="mqtts://hub.example:8883"
    )


def wire(monkeypatch: pytest.MonkeyPatch, hub: Enrolment, ca_pem: str | None = None) -> list[str]:
    """Answer the gateway's requests from ``hub`` (in process); the paths it asked for."""
    asked: list[str] = []

    def call(url: str, path: str, body: Any, ca: str | None, timeout: float) -> Any:
        asked.append(path)
        if path == "/join/ca":
            return {"ca": ca_pem or hub.ca.cert_pem.decode()}
        assert ca == hub.ca.cert_pem.decode()  # the join itself is verified against the pinned CA
        return hub.join(body["token"], body["csr"])

    monkeypatch.setattr(enrolment, "_call", call)
    return asked


def test_a_join_writes_a_private_identity_and_a_sites_file(
    tmp_path: Path, hub: Enrolment, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = wire(monkeypatch, hub)
    token = hub.add("truck-12", labels={"kind": "truck"}).token
    joined = join("https://hub.example:8443", token, tmp_path / "gw")
    assert asked == ["/join/ca", "/join"]
    assert joined.site == "truck-12"
    for path in (joined.key_file, joined.cert_file, joined.ca_file, joined.plan_key_file, joined.sites_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for directory in (joined.state_dir, joined.key_file.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    sites = load_sites(joined.sites_file)
    own = sites.sites["truck-12"]
    assert own.labels == {"kind": "truck"}
    assert own.tls is not None
    assert own.tls.cert_file == str(joined.cert_file)
    assert sites.sites["cloud"].tls is not None
    assert sites.sites["cloud"].tls.key_file == str(joined.key_file)
    assert joined.plan_key_file.read_text().strip() == KEY.public_key.to_text()


def test_a_hub_whose_ca_is_not_the_pinned_one_gets_nothing(
    tmp_path: Path, hub: Enrolment, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = CertificateAuthority.open(tmp_path / "other-ca")
    asked = wire(monkeypatch, hub, ca_pem=other.cert_pem.decode())
    token = hub.add("truck-12").token
    with pytest.raises(JoinFailed, match="this is not the hub that made the token"):
        join("https://hub.example:8443", token, tmp_path / "gw")
    assert asked == ["/join/ca"]  # neither the token nor a request was sent
    assert not (tmp_path / "gw").exists()


def test_a_malformed_token_or_url_fails_before_any_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(enrolment, "_call", lambda *a: pytest.fail("nothing may be sent"))
    with pytest.raises(JoinFailed, match="malformed join token"):
        join("https://hub.example:8443", "sej1.truck-12.x", tmp_path)
    with pytest.raises(JoinFailed, match="must start with https://"):
        join("hub.example:8443", "sej1.truck-12.x", tmp_path)


def test_https_requests_after_the_ca_fetch_trust_the_pinned_ca_alone(hub: Enrolment) -> None:
    context = enrolment._context("https://hub.example:8443", hub.ca.cert_pem.decode())
    assert context is not None
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "spanedge hub CA"),),)]
    assert enrolment._context("http://hub.example:8000", None) is None
