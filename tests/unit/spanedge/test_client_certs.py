"""The client certificates a process presents: its own site's, valid now, from the CA beside them."""

from __future__ import annotations

import datetime
import logging
from pathlib import Path

import pytest

from spanedge.ca import CertificateAuthority, new_request
from spanedge.client_certs import check_client_certificates
from spanedge.errors import InvalidSites
from spanedge.sites import Sites, parse_sites


def _gateway(tmp_path: Path, holder: str, ca: CertificateAuthority | None = None, username: str = "") -> Sites:
    """The sites a gateway holding ``holder``'s certificate (issued by ``ca``) uses, trusting the hub's CA."""
    hub_ca = CertificateAuthority.open(tmp_path / "hub-ca")
    csr, key = new_request(holder)
    (tmp_path / "cert.pem").write_bytes((ca or hub_ca).issue_client(holder, csr))
    (tmp_path / "key.pem").write_bytes(key)
    tls = f'tls: {{ca_file: "{hub_ca.cert_file}", cert_file: "{tmp_path}/cert.pem", key_file: "{tmp_path}/key.pem"}}'
    login = f", username: {username}, password_env: PW" if username else ""
    return parse_sites(
        "sites:\n"
        f'  cloud: {{tier: hub, broker: "mqtts://hub.example:8883", {tls}{login}}}\n'
        f'  truck-12: {{tier: spoke, broker: "mqtts://hub.example:8883", {tls}{login}}}\n'
        f'  truck-13: {{tier: spoke, broker: "mqtts://hub.example:8883", {tls}{login}}}\n'
    )


def test_a_certificate_of_the_site_itself_passes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    check_client_certificates(_gateway(tmp_path, "truck-12"), "truck-12")
    assert not caplog.records


def test_another_sites_certificate_is_refused_with_the_file_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(InvalidSites, match=r"cert.pem \(for the broker of site 'cloud'\) names site 'truck-12'") as e:
        check_client_certificates(_gateway(tmp_path, "truck-12"), "truck-13")
    assert "but this process runs site 'truck-13'" in str(e.value)
    assert "use the certificate 'spanedge agent join' made for 'truck-13'" in str(e.value)


def test_with_a_username_the_certificate_is_only_for_tls(tmp_path: Path) -> None:
    check_client_certificates(_gateway(tmp_path, "gateway-7", username="truck-13"), "truck-13")


def test_a_certificate_not_valid_now_is_refused(tmp_path: Path) -> None:
    sites = _gateway(tmp_path, "truck-12")
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=400)
    with pytest.raises(InvalidSites, match="UTC, not now; the broker refuses it: enrol the gateway again"):
        check_client_certificates(sites, "truck-12", now=later)


def test_a_certificate_of_another_ca_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    other = CertificateAuthority.open(tmp_path / "other-ca", name="someone else's CA")
    with caplog.at_level(logging.WARNING):
        check_client_certificates(_gateway(tmp_path, "truck-12", ca=other), "truck-12")
    assert "was not issued by the CA in" in caplog.text
    assert "someone else's CA" in caplog.text


def test_an_unreadable_certificate_is_named(tmp_path: Path) -> None:
    sites = _gateway(tmp_path, "truck-12")
    (tmp_path / "cert.pem").write_text("not a certificate")
    with pytest.raises(InvalidSites, match="cert.pem .* is not a PEM certificate"):
        check_client_certificates(sites, "truck-12")
    (tmp_path / "cert.pem").unlink()
    with pytest.raises(InvalidSites, match="cannot read the client certificate .*No such file"):
        check_client_certificates(sites, "truck-12")


def test_a_certificate_near_its_expiry_is_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sites = _gateway(tmp_path, "truck-12")
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=350)  # a client certificate lasts 365
    with caplog.at_level(logging.WARNING):
        check_client_certificates(sites, "truck-12", now=soon)
    assert "expires on" in caplog.text
    assert "enrol the gateway again before then" in caplog.text
