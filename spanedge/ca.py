"""The hub's certificate authority: server certificates, site client certificates and their revocation.

A CA lives in one directory (mode 0700):

* ``ca.pem``: its certificate, which brokers, agents and API clients trust;
* ``ca-key.pem`` (0600): its private key, which never leaves the hub;
* ``issued.json`` (0600): every certificate it signed, by serial: subject, not-after and,
  once revoked, when and why;
* ``crl.pem``: the certificate revocation list brokers load (``crlfile``), rewritten on
  every revocation.

Clients keep their own private keys: :func:`new_request` makes a key and a certificate
signing request on the gateway, and :meth:`CertificateAuthority.issue_client` signs the
request for one site name (the certificate's common name, which a broker with
``use_identity_as_username`` takes as the MQTT username).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanedge.errors import SpanEdgeError
from spanedge.private_files import private_dir
from spanedge.private_files import write_private as _write_private

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.x509 import Certificate, CertificateBuilder

CA_DAYS = 3650
SERVER_DAYS = 825
CLIENT_DAYS = 365
_BACKDATE = datetime.timedelta(hours=1)


class CertificateError(SpanEdgeError):
    """A certificate, key or request could not be read, made or signed."""


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a TLS server: the CA certificate clients trust, the server certificate and its key."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_public(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (0644), replacing it atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o644)
    tmp.replace(path)


def _key_pem(key: EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def new_key() -> EllipticCurvePrivateKey:
    """A fresh P-256 private key."""
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def new_request(common_name: str) -> tuple[bytes, bytes]:
    """A new private key and a certificate signing request for ``common_name``: ``(csr_pem, key_pem)``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    key = new_key()
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _request(csr_pem: bytes) -> Any:
    """The certificate signing request in ``csr_pem``, its signature checked.

    Raises:
        CertificateError: not a valid PEM request, or signed by another key than its own.
    """
    from cryptography import x509

    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError as exc:
        msg = f"the certificate signing request is not valid PEM: {exc}; make one with 'spanedge agent join'"
        raise CertificateError(msg) from None
    if not csr.is_signature_valid:
        msg = "the certificate signing request's signature does not match its key; make a new one with 'spanedge agent join'"
        raise CertificateError(msg)
    return csr


def requested_name(csr_pem: bytes) -> str:
    """The common name a certificate signing request asks for ("" if none).

    Raises:
        CertificateError: not a valid PEM request, or signed by another key than its own.
    """
    from cryptography.x509.oid import NameOID

    names = _request(csr_pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def fingerprint(cert_pem: bytes) -> str:
    """The SHA-256 fingerprint of a PEM certificate, as lowercase hex (what a join token pins)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    return x509.load_pem_x509_certificate(cert_pem).fingerprint(hashes.SHA256()).hex()


def common_name(cert_pem: bytes) -> str:
    """The subject common name of a PEM certificate."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    names = x509.load_pem_x509_certificate(cert_pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _alt_names(hosts: tuple[str, ...]) -> list[Any]:
    from cryptography import x509

    names: list[Any] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


class CertificateAuthority:
    """A CA in a directory: made by :meth:`open` on first use, then loaded from its files."""

    def __init__(self, directory: Path, key: EllipticCurvePrivateKey, cert: Certificate) -> None:
        self.directory = directory
        self._key = key
        self._cert = cert

    @property
    def cert_file(self) -> Path:
        """``ca.pem``: the certificate to trust."""
        return self.directory / "ca.pem"

    @property
    def crl_file(self) -> Path:
        """``crl.pem``: the current revocation list."""
        return self.directory / "crl.pem"

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate, PEM."""
        return _cert_pem(self._cert)

    @classmethod
    def open(cls, directory: Path, name: str = "spanedge hub CA", days: int = CA_DAYS) -> CertificateAuthority:
        """Load the CA in ``directory``, or make one there (named ``name``, valid ``days``) if it holds none.

        Raises:
            CertificateError: the directory holds a CA that cannot be read, or cannot be written.
        """
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        key_file, cert_file = directory / "ca-key.pem", directory / "ca.pem"
        if key_file.exists() or cert_file.exists():
            try:
                key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
                cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
            except (OSError, ValueError) as exc:
                msg = f"cannot read the certificate authority in {directory}: {exc}; restore ca.pem and ca-key.pem"
                raise CertificateError(msg) from None
            return cls(directory, key, cert)  # type: ignore[arg-type]
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)  # as the umask says: a broker's account reaches crl.pem
            private_dir(directory)
        except OSError as exc:
            msg = f"cannot create the certificate authority directory {directory}: {exc.strerror}"
            raise CertificateError(msg) from None
        key = new_key()
        cert = cls._self_signed(key, name, days)
        ca = cls(directory, key, cert)
        _write_private(key_file, _key_pem(key))
        _write_public(cert_file, _cert_pem(cert))
        ca._write_crl()
        return ca

    @staticmethod
    def _self_signed(key: EllipticCurvePrivateKey, name: str, days: int) -> Certificate:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import NameOID

        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        usage = x509.KeyUsage(
            digital_signature=False,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=True,
            crl_sign=True,
            encipher_only=False,
            decipher_only=False,
        )
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _BACKDATE)
            .not_valid_after(_now() + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(usage, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )

    def _builder(self, subject: str, public_key: Any, days: int) -> CertificateBuilder:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(self._cert.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _BACKDATE)
            .not_valid_after(_now() + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )

    def _sign(self, builder: CertificateBuilder, kind: str) -> Certificate:
        from cryptography.hazmat.primitives import hashes

        cert = builder.sign(self._key, hashes.SHA256())
        issued = self.issued()
        issued[str(cert.serial_number)] = {
            "subject": common_name(_cert_pem(cert)),
            "kind": kind,
            "not_after": cert.not_valid_after_utc.isoformat(),
        }
        self._write_issued(issued)
        return cert

    def issue_server(self, hosts: tuple[str, ...], days: int = SERVER_DAYS) -> tuple[bytes, bytes]:
        """A new key and a server certificate for ``hosts`` (IP addresses or DNS names): ``(cert_pem, key_pem)``."""
        from cryptography import x509
        from cryptography.x509.oid import ExtendedKeyUsageOID

        if not hosts:
            msg = "a server certificate needs at least one host name or address"
            raise CertificateError(msg)
        key = new_key()
        builder = (
            self._builder(hosts[0], key.public_key(), days)
            .add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        )
        return _cert_pem(self._sign(builder, "server")), _key_pem(key)

    def issue_client(self, name: str, csr_pem: bytes, days: int = CLIENT_DAYS) -> bytes:
        """Sign a certificate signing request as the client certificate of ``name`` (its common name).

        The request's own subject is ignored: the CA decides the name.

        Raises:
            CertificateError: the request is not a valid, self-signed PEM request.
        """
        from cryptography import x509
        from cryptography.x509.oid import ExtendedKeyUsageOID

        csr = _request(csr_pem)
        builder = self._builder(name, csr.public_key(), days).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        return _cert_pem(self._sign(builder, "client"))

    def write_server_files(self, directory: Path, hosts: tuple[str, ...], days: int = SERVER_DAYS) -> TlsFiles:
        """Issue a server certificate for ``hosts`` into ``directory``: ``ca.pem``, ``server.pem``, ``server-key.pem``."""
        cert, key = self.issue_server(hosts, days)
        directory.mkdir(parents=True, exist_ok=True)
        files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
        _write_public(files.ca_file, self.cert_pem)
        _write_public(files.cert_file, cert)
        _write_private(files.key_file, key)
        return files

    def issued(self) -> dict[str, dict[str, str]]:
        """Every certificate signed, by serial (decimal text): subject, kind, not-after, and revoked/reason if revoked."""
        path = self.directory / "issued.json"
        if not path.exists():
            return {}
        data: dict[str, dict[str, str]] = json.loads(path.read_text())
        return data

    def _write_issued(self, issued: dict[str, dict[str, str]]) -> None:
        _write_private(self.directory / "issued.json", json.dumps(issued, indent=1, sort_keys=True).encode())

    def revoke(self, name: str, reason: str = "revoked") -> list[int]:
        """Revoke every unexpired client certificate of ``name``, rewrite ``crl.pem``; returns the serials revoked."""
        issued = self.issued()
        when = _now().isoformat()
        serials = []
        for serial, entry in issued.items():
            if entry["subject"] == name and entry["kind"] == "client" and "revoked" not in entry:
                entry["revoked"], entry["reason"] = when, reason
                serials.append(int(serial))
        self._write_issued(issued)
        self._write_crl()
        return serials

    def is_revoked(self, serial: int) -> bool:
        """True if the certificate ``serial`` was revoked."""
        return "revoked" in self.issued().get(str(serial), {})

    def crl_pem(self) -> bytes:
        """A revocation list of every revoked certificate, signed now and valid for a week."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes

        builder = (
            x509.CertificateRevocationListBuilder()
            .issuer_name(self._cert.subject)
            .last_update(_now() - _BACKDATE)
            .next_update(_now() + datetime.timedelta(days=7))
        )
        for serial, entry in sorted(self.issued().items()):
            if "revoked" in entry:
                revoked = (
                    x509.RevokedCertificateBuilder()
                    .serial_number(int(serial))
                    .revocation_date(datetime.datetime.fromisoformat(entry["revoked"]))
                    .build()
                )
                builder = builder.add_revoked_certificate(revoked)
        return builder.sign(self._key, hashes.SHA256()).public_bytes(_pem())

    def _write_crl(self) -> None:
        _write_public(self.crl_file, self.crl_pem())


def _pem() -> Any:
    from cryptography.hazmat.primitives import serialization

    return serialization.Encoding.PEM
