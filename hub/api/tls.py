"""The REST API's HTTPS certificate: given by the operator, or issued by the hub's certificate authority.

Without ``--tls-cert``/``--tls-key`` the hub's CA (:mod:`spanedge.ca`, in ``<state-dir>/ca``, the same CA that
signs the sites' certificates) issues a server certificate into ``<state-dir>/tls/`` at the first start, for
the hub's ``--host`` and ``localhost``, ``127.0.0.1`` and the machine's host name. Later starts reuse it until
those names change, it nears its expiry or the CA that signed it is replaced. Plain HTTP is only for a
loopback address (:func:`check_plain_http`).
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from spanedge.ca import CertificateAuthority, CertificateError, fingerprint

log = logging.getLogger(__name__)

RENEW_BEFORE = datetime.timedelta(days=30)
"""A certificate the hub issued is issued again when it expires within this long."""


@dataclass(frozen=True)
class ServerTls:
    """What the REST API serves HTTPS with, and what its clients trust."""

    cert_file: Path
    key_file: Path
    #: the CA certificate clients pass as ``--hub-ca`` (None: the certificate was given, its CA is the operator's)
    ca_file: Path | None = None
    #: the SHA-256 fingerprint of ``ca_file`` (hex)
    ca_fingerprint: str | None = None


def is_loopback(host: str) -> bool:
    """True if ``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_plain_http(host: str) -> None:
    """Refuse plain HTTP on an address other hosts reach, where bearer tokens would cross the network in clear.

    Raises:
        CertificateError: ``host`` is not a loopback address.
    """
    if not is_loopback(host):
        msg = (
            f"--plain-http sends the API's bearer tokens in clear, so it is allowed only on a loopback address "
            f"(127.0.0.1, ::1, localhost), not --host {host}; drop --plain-http to serve HTTPS"
        )
        raise CertificateError(msg)


def server_hosts(host: str, extra: tuple[str, ...] = (), hostname: str | None = None) -> tuple[str, ...]:
    """The names the hub's certificate carries.

    ``host`` (unless a wildcard address), localhost, 127.0.0.1, the machine's host name, then ``extra``
    (``--tls-name``: the names clients on other machines reach the hub by).
    """
    names = [] if host in ("", "0.0.0.0", "::") else [host]  # a wildcard address names no host
    names += ["localhost", "127.0.0.1", socket.gethostname() if hostname is None else hostname, *extra]
    return tuple(dict.fromkeys(name for name in names if name))


def given_tls(cert_file: Path | None, key_file: Path | None) -> ServerTls:
    """The operator's certificate and key, checked to load and to match each other.

    Raises:
        CertificateError: only one of the two is given, or they cannot be read or do not match.
    """
    if cert_file is None or key_file is None:
        msg = "give both --tls-cert and --tls-key (SPANEDGE_HUB_TLS_CERT, SPANEDGE_HUB_TLS_KEY), or neither"
        raise CertificateError(msg)
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        msg = (
            f"cannot serve HTTPS with --tls-cert {cert_file} and --tls-key {key_file}: {exc}; "
            "give a PEM certificate and its unencrypted PEM private key"
        )
        raise CertificateError(msg) from None
    return ServerTls(cert_file, key_file)


def reissue_reason(cert_file: Path, key_file: Path, hosts: tuple[str, ...], ca_pem: bytes) -> str | None:
    """Why the certificate in ``cert_file`` must be issued again for ``hosts`` by the CA ``ca_pem``; None if it need not."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    if not cert_file.exists() or not key_file.exists():
        return "there is none yet"
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound) as exc:
        return f"{cert_file} cannot be read ({exc})"
    try:
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except (ValueError, TypeError, InvalidSignature):
        return "another CA signed it"
    held = {str(v) for v in names.get_values_for_type(x509.IPAddress)} | set(names.get_values_for_type(x509.DNSName))
    if held != set(hosts):
        return f"it names {', '.join(sorted(held))}, not {', '.join(sorted(hosts))}"
    if cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) < RENEW_BEFORE:
        return f"it expires on {cert.not_valid_after_utc:%Y-%m-%d}"
    return None


def issued_tls(state_dir: Path, host: str, names: tuple[str, ...] = ()) -> ServerTls:
    """The hub CA's certificate for ``host`` and ``names`` in ``<state_dir>/tls/``: reused, or issued if needed.

    The CA is made at the first call.

    Raises:
        CertificateError: the CA cannot be read or made, or the certificate cannot be written.
    """
    ca = CertificateAuthority.open(state_dir / "ca")
    directory = state_dir / "tls"
    cert_file, key_file = directory / "server.pem", directory / "server-key.pem"
    hosts = server_hosts(host, names)
    reason = reissue_reason(cert_file, key_file, hosts, ca.cert_pem)
    if reason is not None:
        log.info("issuing the REST API's certificate for %s: %s", ", ".join(hosts), reason)
        try:
            ca.write_server_files(directory, hosts)
        except OSError as exc:
            msg = f"cannot write the REST API's certificate to {directory}: {exc}; make --state-dir writable"
            raise CertificateError(msg) from None
    return ServerTls(cert_file, key_file, ca.cert_file, fingerprint(ca.cert_pem))


def server_tls(
    state_dir: Path,
    host: str,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    names: tuple[str, ...] = (),
) -> ServerTls:
    """The given certificate if ``cert_file`` or ``key_file`` is set, else the one the hub's CA issues (see above).

    Raises:
        CertificateError: ``names`` with a given certificate, or see :func:`given_tls` and :func:`issued_tls`.
    """
    if cert_file is not None or key_file is not None:
        if names:
            msg = f"--tls-name {' '.join(names)} names the certificate the hub issues; a given --tls-cert names its own"
            raise CertificateError(msg)
        return given_tls(cert_file, key_file)
    return issued_tls(state_dir, host, names)
