"""The certificate authority and broker server certificate of one simulation run."""

from __future__ import annotations

from pathlib import Path

from spanedge.ca import CertificateAuthority, TlsFiles

__all__ = ["TlsFiles", "make_tls"]


def make_tls(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), days: int = 7) -> TlsFiles:
    """Make a new CA in ``directory / "ca"`` and a server certificate it signs for ``hosts``.

    Writes ``ca.pem``, ``server.pem`` and ``server-key.pem`` (mode 0600) to ``directory``.
    """
    ca = CertificateAuthority.open(directory / "ca", name="spanedge simulation CA", days=days)
    return ca.write_server_files(directory, hosts, days)
