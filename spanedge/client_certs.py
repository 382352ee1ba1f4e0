"""Checks of the client certificates a process presents to its brokers, before it connects.

A broker with ``use_identity_as_username`` takes a client certificate's common
name as the MQTT username, so a gateway given another site's certificate would
log in as that site and have every message refused by the ACL; an expired or
not yet valid certificate, or one another CA issued, is refused in the TLS
handshake with nothing but "certificate verify failed" in the broker's log.
:func:`check_client_certificates` says which file is wrong and how to fix it
before any connection is tried.
"""

from __future__ import annotations

import datetime
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from spanedge.errors import InvalidSites
from spanedge.sites import Sites

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

log = logging.getLogger(__name__)

#: A client certificate that expires within this long is warned of at start.
EXPIRY_WARNING = datetime.timedelta(days=30)


def check_client_certificates(sites: Sites, site: str, *, now: datetime.datetime | None = None) -> None:
    """Check every client certificate in ``sites`` that the process of ``site`` presents.

    A certificate used without a username (its common name is the identity) must name ``site``;
    every one must be valid now, and one that expires within :data:`EXPIRY_WARNING` is warned of.
    One that the ``ca_file`` beside it did not issue is logged as a warning: that broker refuses it
    unless it trusts another CA for its clients.

    Raises:
        InvalidSites: a certificate cannot be read, names another site, or is not valid now.
    """
    if not any((b := e.mqtt()).tls is not None and b.tls.cert_file for e in sites.sites.values()):
        return  # passwords only: nothing to read, and no need to load the cryptography package
    from cryptography.exceptions import InvalidSignature
    from cryptography.x509.oid import NameOID

    moment = now or datetime.datetime.now(datetime.UTC)
    seen: set[str] = set()
    for name, entry in sites.sites.items():
        broker = entry.mqtt()
        tls = broker.tls
        if tls is None or tls.cert_file is None or tls.cert_file in seen:
            continue
        seen.add(tls.cert_file)
        where = f"the client certificate {tls.cert_file} (for the broker of site {name!r})"
        cert = _load(where, tls.cert_file)
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        subject = str(names[0].value) if names else ""
        if broker.username is None and subject != site:
            msg = (
                f"{where} names site {subject!r}, but this process runs site {site!r}: the broker would log it in "
                f"as {subject!r}; use the certificate 'spanedge agent join' made for {site!r}"
            )
            raise InvalidSites(msg)
        if not cert.not_valid_before_utc <= moment <= cert.not_valid_after_utc:
            msg = (
                f"{where} is valid from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} to "
                f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, not now; the broker refuses it: "
                "enrol the gateway again ('spanedge site add' on the hub, then 'spanedge agent join')"
            )
            raise InvalidSites(msg)
        left = cert.not_valid_after_utc - moment
        if left < EXPIRY_WARNING:
            log.warning(
                "%s expires on %s UTC (in %d days); enrol the gateway again before then "
                "('spanedge site add' on the hub, then 'spanedge agent join')",
                where,
                f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M}",
                left.days,
            )
        ca = _load(f"the CA certificate {tls.ca_file}", tls.ca_file)
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            log.warning(
                "%s was not issued by the CA in %s (its issuer: %s); the broker refuses it unless it trusts that issuer",
                where,
                tls.ca_file,
                cert.issuer.rfc4514_string(),
            )


def _load(what: str, path: str) -> Certificate:
    """The first certificate of PEM file ``path``, or a clear error naming ``what``."""
    from cryptography import x509

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        msg = f"cannot read {what}: {exc.strerror}"
        raise InvalidSites(msg) from None
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        msg = f"{what} is not a PEM certificate"
        raise InvalidSites(msg) from None
