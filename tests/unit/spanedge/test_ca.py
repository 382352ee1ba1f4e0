"""The hub's certificate authority: files and modes, server and client certificates, revocation."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509

from spanedge.ca import CertificateAuthority, CertificateError, common_name, fingerprint, new_request


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_authority_keeps_its_key_private_and_loads_again(tmp_path: Path) -> None:
    ca = CertificateAuthority.open(tmp_path / "ca")
    assert mode(tmp_path / "ca") == 0o700
    assert mode(tmp_path / "ca" / "ca-key.pem") == 0o600
    assert ca.crl_file.exists()
    again = CertificateAuthority.open(tmp_path / "ca")
    assert fingerprint(again.cert_pem) == fingerprint(ca.cert_pem)


def test_the_directories_above_a_new_authority_stay_reachable_for_a_brokers_account(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        ca = CertificateAuthority.open(tmp_path / "state" / "hub" / "ca")
    finally:
        os.umask(old)
    assert mode(tmp_path / "state") == mode(tmp_path / "state" / "hub") == 0o755
    assert mode(ca.crl_file) == 0o644


def test_an_unreadable_authority_is_an_error_naming_its_directory(tmp_path: Path) -> None:
    (tmp_path / "ca").mkdir()
    (tmp_path / "ca" / "ca.pem").write_text("not a certificate")
    with pytest.raises(CertificateError, match=str(tmp_path / "ca")):
        CertificateAuthority.open(tmp_path / "ca")


def test_a_client_certificate_takes_the_name_the_authority_gives_not_the_requested_one(tmp_path: Path) -> None:
    ca = CertificateAuthority.open(tmp_path / "ca")
    csr, _key = new_request("cloud")
    cert = ca.issue_client("truck-12", csr)
    assert common_name(cert) == "truck-12"
    x509.load_pem_x509_certificate(cert).verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert_pem))
    assert [e["subject"] for e in ca.issued().values()] == ["truck-12"]


def test_a_request_that_is_not_pem_is_refused(tmp_path: Path) -> None:
    ca = CertificateAuthority.open(tmp_path / "ca")
    with pytest.raises(CertificateError, match="not valid PEM"):
        ca.issue_client("truck-12", b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")


def test_revoking_a_site_lists_its_certificates_in_the_revocation_list(tmp_path: Path) -> None:
    ca = CertificateAuthority.open(tmp_path / "ca")
    first = x509.load_pem_x509_certificate(ca.issue_client("truck-12", new_request("x")[0]))
    other = x509.load_pem_x509_certificate(ca.issue_client("truck-7", new_request("x")[0]))
    assert ca.revoke("truck-12") == [first.serial_number]
    crl = x509.load_pem_x509_crl(ca.crl_file.read_bytes())
    assert crl.get_revoked_certificate_by_serial_number(first.serial_number) is not None
    assert crl.get_revoked_certificate_by_serial_number(other.serial_number) is None
    assert ca.is_revoked(first.serial_number)
    assert not ca.is_revoked(other.serial_number)
    assert ca.revoke("truck-12") == []


def test_a_server_certificate_passes_a_real_handshake_with_a_client_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority.open(tmp_path / "ca")
    files = ca.write_server_files(tmp_path / "server", ("127.0.0.1", "localhost"))
    assert mode(files.key_file) == 0o600
    csr, key = new_request("truck-12")
    (tmp_path / "client.pem").write_bytes(ca.issue_client("truck-12", csr))
    (tmp_path / "client-key.pem").write_bytes(key)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(files.cert_file, files.key_file)
    server_ctx.load_verify_locations(files.ca_file)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(cafile=str(files.ca_file))
    client_ctx.load_cert_chain(tmp_path / "client.pem", tmp_path / "client-key.pem")
    a, b = socket.socketpair()
    peer: dict[str, object] = {}

    def serve() -> None:
        with server_ctx.wrap_socket(a, server_side=True) as tls:
            peer.update(tls.getpeercert() or {})

    thread = threading.Thread(target=serve)
    thread.start()
    with client_ctx.wrap_socket(b, server_hostname="localhost"):
        pass
    thread.join(10)
    assert (("commonName", "truck-12"),) in peer["subject"]  # type: ignore[operator]
