"""Adding, enrolling and revoking a site at the hub, with its real CA, fleet file and broker files."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509

from hub.control.brokers import BrokerFiles
from hub.control.coordinator import Coordinator
from hub.control.enrolment import Enrolment
from hub.control.fleet import Fleet
from hub.control.join_tokens import JoinRefused, JoinTokens
from hub.control.registry import SiteRegistry
from spanedge.ca import CertificateAuthority, common_name, fingerprint, new_request
from spanedge.errors import InvalidSites
from spanedge.join_token import parse_join_token
from spanedge.sites import Sites, parse_sites
from tests.keys import KEY

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtts://hub.example:8883", tls: {ca_file: ca.pem}}
  truck-7:
    tier: spoke
    broker: "mqtts://hub.example:8883"
    tls: {ca_file: ca.pem}
    streams: {readings: {topic: "trucks/7/+/temp", rate: 10}}
"""


def enrolment(tmp_path: Path, declared: Sites | None = None) -> Enrolment:
    declared = declared or parse_sites(SITES)
    fleet = Fleet(declared, tmp_path / "fleet.json")
    ca = CertificateAuthority.open(tmp_path / "ca")
    pid_file = tmp_path / "broker.pid"
    pid_file.write_text("not a pid\n")
    brokers = BrokerFiles(tmp_path / "brokers", [pid_file], ca.crl_file)
    coordinator = Coordinator(SiteRegistry(fleet.sites))
    tokens = JoinTokens(tmp_path / "join-tokens.json")
    done = Enrolment(fleet, tokens, ca, brokers, coordinator, KEY.public_key, default_broker="mqtts://hub.example:8883")
    done.start()
    return done


def test_a_site_added_joins_with_its_token_and_gets_its_certificate(tmp_path: Path) -> None:
    hub = enrolment(tmp_path)
    invitation = hub.add("truck-12", labels={"fleet": "north", "kind": "truck"})
    token = parse_join_token(invitation.token)
    assert token.site == "truck-12"
    assert token.ca_sha256 == fingerprint(hub.ca.cert_pem)
    assert hub.fleet.sites.sites["truck-12"].labels == {"fleet": "north", "kind": "truck"}
    assert "truck-12" in hub.coordinator.registry.sites.sites
    acl = (tmp_path / "brokers" / "acl").read_text()
    assert "user truck-12\ntopic write spanedge/v1/+/+/truck-12" in acl
    assert "pattern" not in acl  # a site left out of the file gets no topic at all
    csr, _key = new_request("truck-12")
    answer = hub.join(invitation.token, csr.decode())
    cert = x509.load_pem_x509_certificate(answer["certificate"].encode())
    assert common_name(answer["certificate"].encode()) == "truck-12"
    assert cert.issuer == x509.load_pem_x509_certificate(hub.ca.cert_pem).subject
    assert answer["plan_public_key"] == KEY.public_key.to_text()
    view = answer["sites"]["sites"]
    assert set(view) == {"cloud", "truck-7", "truck-12"}
    assert all("tls" not in entry and "username" not in entry for entry in view.values())
    with pytest.raises(JoinRefused, match="already used"):
        hub.join(invitation.token, csr.decode())


def test_a_request_for_another_site_is_refused_and_keeps_the_token(tmp_path: Path) -> None:
    hub = enrolment(tmp_path)
    invitation = hub.add("truck-12")
    csr, _ = new_request("truck-7")
    with pytest.raises(JoinRefused, match="enrols site 'truck-12', not 'truck-7'"):
        hub.join(invitation.token, csr.decode())
    with pytest.raises(JoinRefused, match="not valid PEM") as caught:
        hub.join(invitation.token, "-----BEGIN CERTIFICATE REQUEST-----\nxx\n")
    assert caught.value.status == 400
    assert hub.join(invitation.token, new_request("truck-12")[0].decode())["site"] == "truck-12"


def test_a_name_of_sites_yaml_cannot_be_added(tmp_path: Path) -> None:
    with pytest.raises(InvalidSites, match="already in sites.yaml"):
        enrolment(tmp_path).add("truck-7")


def test_revoking_a_site_reaches_the_crl_the_acl_the_registry_and_survives_a_restart(tmp_path: Path) -> None:
    hub = enrolment(tmp_path)
    invitation = hub.add("truck-12", labels={"fleet": "north"})
    cert = hub.join(invitation.token, new_request("truck-12")[0].decode())["certificate"]
    serial = x509.load_pem_x509_certificate(cert.encode()).serial_number
    done = hub.revoke("truck-12")
    assert done["serials"] == [str(serial)]
    assert "not reloaded" in done["brokers_reloaded"][0]
    crl = x509.load_pem_x509_crl((tmp_path / "brokers" / "crl.pem").read_bytes())
    assert crl.get_revoked_certificate_by_serial_number(serial) is not None
    acl = (tmp_path / "brokers" / "acl").read_text()
    assert "user truck-12" not in acl
    assert "revoked, so without any rule: truck-12" in acl
    assert "truck-12" in hub.coordinator.registry.revoked
    assert hub.coordinator.gone("truck-12")
    assert not hub.coordinator.heartbeat("truck-12", {"site": "truck-12"})
    assert stat.S_IMODE((tmp_path / "fleet.json").stat().st_mode) == 0o600
    with pytest.raises(InvalidSites, match="already revoked"):
        hub.revoke("truck-12")
    with pytest.raises(InvalidSites, match="was revoked; enrol the gateway under another name"):
        hub.add("truck-12")
    again = enrolment(tmp_path)  # the hub restarts: the added site and its revocation are back
    assert again.fleet.sites.sites["truck-12"].labels == {"fleet": "north"}
    assert "truck-12" in again.coordinator.registry.revoked
    row = next(r for r in again.coordinator.registry.status() if r["site"] == "truck-12")
    assert row["revoked"] is True
    assert row["labels"] == {"fleet": "north"}


def test_a_hub_cannot_be_revoked(tmp_path: Path) -> None:
    with pytest.raises(InvalidSites, match="only spokes can be revoked"):
        enrolment(tmp_path).revoke("cloud")


def test_the_acls_the_hub_rewrites_keep_the_observers_and_local_topics_of_broker_config(tmp_path: Path) -> None:
    brokers = BrokerFiles(tmp_path / "brokers", observers=["monitor"], local_topics=["plant/alerts"])
    brokers.write(parse_sites(SITES), revoked=["truck-7"])
    acl = (tmp_path / "brokers" / "acl").read_text()
    assert "user monitor\ntopic read #\ntopic read $SYS/#" in acl
    assert "user truck-7" not in acl
    brokers.write(parse_sites(SITES), revoked=[])  # truck-7 shares the hub's broker: its local sinks publish there
    assert "user truck-7\n" in (tmp_path / "brokers" / "acl").read_text()
    assert "topic write plant/alerts" in (tmp_path / "brokers" / "acl").read_text()
