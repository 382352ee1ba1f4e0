"""The REST API's certificate: issued by the hub's CA at the first start, reused, issued again when it must be."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from cryptography import x509

from hub.api.tls import check_plain_http, issued_tls, reissue_reason, server_hosts, server_tls
from spanedge.ca import CertificateAuthority, CertificateError, fingerprint


def names_of(cert_file: Path) -> set[str]:
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(v) for v in names.get_values_for_type(x509.IPAddress)} | set(names.get_values_for_type(x509.DNSName))


def test_the_first_start_makes_the_ca_and_a_certificate_for_the_host_and_the_local_names(tmp_path: Path) -> None:
    tls = issued_tls(tmp_path, "10.1.2.3")
    ca = CertificateAuthority.open(tmp_path / "ca")
    assert tls.ca_file == tmp_path / "ca" / "ca.pem"
    assert tls.ca_fingerprint == fingerprint(ca.cert_pem)
    assert (tls.cert_file, tls.key_file) == (tmp_path / "tls" / "server.pem", tmp_path / "tls" / "server-key.pem")
    assert names_of(tls.cert_file) == {"10.1.2.3", "localhost", "127.0.0.1", socket.gethostname()}
    assert tls.key_file.stat().st_mode & 0o077 == 0
    cert = x509.load_pem_x509_certificate(tls.cert_file.read_bytes())
    assert cert.issuer == x509.load_pem_x509_certificate(ca.cert_pem).subject


def test_a_later_start_reuses_the_certificate(tmp_path: Path) -> None:
    first = issued_tls(tmp_path, "127.0.0.1").cert_file.read_bytes()
    assert issued_tls(tmp_path, "127.0.0.1").cert_file.read_bytes() == first


def test_a_new_host_gets_a_new_certificate_from_the_same_ca(tmp_path: Path) -> None:
    first = issued_tls(tmp_path, "127.0.0.1")
    second = issued_tls(tmp_path, "hub.example.com")
    assert "hub.example.com" in names_of(second.cert_file)
    assert second.ca_fingerprint == first.ca_fingerprint


def test_a_certificate_near_its_expiry_is_issued_again(tmp_path: Path) -> None:
    ca = CertificateAuthority.open(tmp_path / "ca")
    hosts = server_hosts("127.0.0.1")
    old = ca.write_server_files(tmp_path / "tls", hosts, days=10)
    assert reissue_reason(old.cert_file, old.key_file, hosts, ca.cert_pem) is not None
    renewed = issued_tls(tmp_path, "127.0.0.1")
    cert = x509.load_pem_x509_certificate(renewed.cert_file.read_bytes())
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days > 300


def test_a_certificate_of_another_ca_or_without_its_key_is_issued_again(tmp_path: Path) -> None:
    other = CertificateAuthority.open(tmp_path / "other-ca")
    hosts = server_hosts("127.0.0.1")
    files = other.write_server_files(tmp_path / "tls", hosts)
    ca = CertificateAuthority.open(tmp_path / "ca")
    assert reissue_reason(files.cert_file, files.key_file, hosts, ca.cert_pem) == "another CA signed it"
    files.key_file.unlink()
    assert reissue_reason(files.cert_file, files.key_file, hosts, other.cert_pem) == "there is none yet"
    tls = issued_tls(tmp_path, "127.0.0.1")
    assert reissue_reason(tls.cert_file, tls.key_file, hosts, ca.cert_pem) is None


def test_a_wildcard_address_is_not_a_name_of_the_certificate() -> None:
    assert server_hosts("0.0.0.0", hostname="gw") == ("localhost", "127.0.0.1", "gw")
    assert server_hosts("::", hostname="gw") == ("localhost", "127.0.0.1", "gw")
    assert server_hosts("localhost", hostname="gw") == ("localhost", "127.0.0.1", "gw")


def test_more_names_go_on_the_certificate_the_ca_issues(tmp_path: Path) -> None:
    tls = issued_tls(tmp_path, "0.0.0.0", ("hub.example.com", "192.0.2.7"))
    assert names_of(tls.cert_file) >= {"hub.example.com", "192.0.2.7", "localhost"}
    assert "0.0.0.0" not in names_of(tls.cert_file)
    given = CertificateAuthority.open(tmp_path / "operator").write_server_files(tmp_path / "given", ("hub",))
    with pytest.raises(CertificateError, match="--tls-name hub.example.com names the certificate the hub issues"):
        server_tls(tmp_path, "0.0.0.0", given.cert_file, given.key_file, ("hub.example.com",))


def test_a_given_certificate_is_used_and_no_ca_is_made(tmp_path: Path) -> None:
    files = CertificateAuthority.open(tmp_path / "operator-ca").write_server_files(tmp_path / "given", ("hub",))
    tls = server_tls(tmp_path / "state", "0.0.0.0", files.cert_file, files.key_file)
    assert (tls.cert_file, tls.key_file, tls.ca_file) == (files.cert_file, files.key_file, None)
    assert not (tmp_path / "state" / "ca").exists()


def test_a_given_certificate_needs_its_own_key(tmp_path: Path) -> None:
    ca = CertificateAuthority.open(tmp_path / "ca")
    one = ca.write_server_files(tmp_path / "one", ("hub",))
    two = ca.write_server_files(tmp_path / "two", ("hub",))
    with pytest.raises(CertificateError, match="give both --tls-cert and --tls-key"):
        server_tls(tmp_path, "127.0.0.1", one.cert_file, None)
    with pytest.raises(CertificateError, match=f"cannot serve HTTPS with --tls-cert {one.cert_file}"):
        server_tls(tmp_path, "127.0.0.1", one.cert_file, two.key_file)
    with pytest.raises(CertificateError, match="No such file"):
        server_tls(tmp_path, "127.0.0.1", tmp_path / "missing.pem", one.key_file)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.5", "::1", "localhost"])
def test_plain_http_is_allowed_on_a_loopback_address(host: str) -> None:
    check_plain_http(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.4", "hub.example.com", "::"])
def test_plain_http_is_refused_where_other_hosts_reach_it(host: str) -> None:
    with pytest.raises(CertificateError, match=f"only on a loopback address .*not --host {host}; drop --plain-http"):
        check_plain_http(host)


def test_the_hub_serves_uvicorn_its_certificate(tmp_path: Path) -> None:
    from hub.server import HubConfig, uvicorn_options
    from tests.keys import KEY

    config = HubConfig(tokens={}, plan_key=KEY, state_dir=tmp_path)  # type: ignore[arg-type]
    tls = issued_tls(tmp_path, config.host)
    options = uvicorn_options(config, tls)
    assert (options["ssl_certfile"], options["ssl_keyfile"]) == (str(tls.cert_file), str(tls.key_file))
    assert "ssl_certfile" not in uvicorn_options(config)
