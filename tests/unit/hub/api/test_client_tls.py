"""The REST client verifies the hub's certificate, and says what is wrong and how to fix it when it does not verify.

The hub here is a standard-library HTTPS server on loopback with a certificate of a test CA.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hub.api.client import HubClient, HubError
from spanedge.ca import CertificateAuthority, TlsFiles


class Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def serve(tls: TlsFiles | None) -> Iterator[str]:
    """Serve ``/healthz`` on a free loopback port (HTTPS with ``tls``, else plain); yield ``host:port``."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls.cert_file, tls.key_file)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority.open(tmp_path / "ca")


@pytest.fixture
def hub(ca: CertificateAuthority, tmp_path: Path) -> Iterator[str]:
    yield from serve(ca.write_server_files(tmp_path / "tls", ("localhost", "127.0.0.1")))


def test_a_client_trusting_the_hubs_ca_gets_its_answer(hub: str, ca: CertificateAuthority) -> None:
    assert HubClient(f"https://{hub}", None, ca_file=ca.cert_file).health() == {"ok": True}


def test_a_client_trusting_another_ca_is_told_the_url_the_problem_and_the_fix(hub: str, tmp_path: Path) -> None:
    other = CertificateAuthority.open(tmp_path / "other")
    with pytest.raises(HubError) as error:
        HubClient(f"https://{hub}", None, ca_file=other.cert_file).health()
    message = str(error.value)
    assert message.startswith(f"the certificate of the hub at https://{hub} does not verify: ")
    assert "unable to get local issuer certificate" in message
    assert "--hub-ca FILE or SPANEDGE_HUB_CA" in message
    assert "<state-dir>/ca/ca.pem" in message


def test_without_a_ca_the_system_cas_are_trusted_and_nothing_else(hub: str) -> None:
    with pytest.raises(HubError, match=r"does not verify: .*--hub-ca FILE"):
        HubClient(f"https://{hub}", None).health()


def test_a_certificate_for_other_names_says_which_names_to_use(ca: CertificateAuthority, tmp_path: Path) -> None:
    for address in serve(ca.write_server_files(tmp_path / "named", ("hub.example.com",))):
        with pytest.raises(HubError, match=r"IP address mismatch.*'127.0.0.1'; use a host name the certificate names"):
            HubClient(f"https://{address}", None, ca_file=ca.cert_file).health()


def test_an_expired_certificate_says_to_restart_the_hub(ca: CertificateAuthority, tmp_path: Path) -> None:
    for address in serve(ca.write_server_files(tmp_path / "expired", ("127.0.0.1",), days=0)):
        with pytest.raises(HubError, match=r"certificate has expired; restart the hub"):
            HubClient(f"https://{address}", None, ca_file=ca.cert_file).health()


def test_a_ca_file_that_cannot_be_read_is_named(hub: str, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    with pytest.raises(HubError, match=f"cannot read the hub's CA certificate {missing} .*No such file"):
        HubClient(f"https://{hub}", None, ca_file=missing).health()
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(HubError, match=f"cannot read the hub's CA certificate {junk} "):
        HubClient(f"https://{hub}", None, ca_file=junk).health()


def test_plain_http_to_an_https_hub_says_to_use_https(hub: str, ca: CertificateAuthority) -> None:
    with pytest.raises(HubError, match=f"serves HTTPS by default: use https://{hub}"):
        HubClient(f"http://{hub}", None, ca_file=ca.cert_file, timeout=10).health()


def test_https_to_a_plain_http_hub_says_to_use_http(ca: CertificateAuthority) -> None:
    for address in serve(None):
        with pytest.raises(HubError, match=f"does not speak TLS .*use http://{address}"):
            HubClient(f"https://{address}", None, ca_file=ca.cert_file).health()
