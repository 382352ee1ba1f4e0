"""The brokers' ACL files, written by the hub as its fleet changes, and their reload.

With ``spanedge hub --broker-dir DIR``, the hub writes, on start and after every
``site add`` and ``site revoke``, the files its brokers read:

* ``DIR/acl``: the ACL of the hub's broker, and ``DIR/<site>/acl`` for the broker of
  every other address (named after its first site), as ``spanedge broker-config``
  lays them out, but with each spoke's own topics under its ``user`` line
  (:func:`spanedge.broker_acl.acl_text` with ``per_site``), so a revoked site has no rule at all;
* ``DIR/crl.pem``: the CA's certificate revocation list (the listener's ``crlfile``).

Sites that enrol with a join token log in with their client certificate: the listener
has ``require_certificate true`` and ``use_identity_as_username true``, so a site's
MQTT username is its certificate's common name, which the hub's CA sets to the site name.

Then it sends SIGHUP to the process in each ``--broker-pid-file``: Mosquitto 2.0 rereads
its ACL file, and its listeners' certificates and revocation list, without dropping
its clients. A revoked site's TLS handshake is refused from then on; a connection it
already holds stays open but may neither publish nor subscribe to anything.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Collection, Sequence
from pathlib import Path

from spanedge.broker_acl import acl_text, broker_groups
from spanedge.sites import Sites

log = logging.getLogger(__name__)


class BrokerFiles:
    """Writes the brokers' ACL and CRL files into ``directory`` and reloads the brokers of ``pid_files``."""

    def __init__(
        self,
        directory: Path | None,
        pid_files: Sequence[Path] = (),
        crl_file: Path | None = None,
        *,
        observers: Sequence[str] = (),
        local_topics: Sequence[str] = (),
    ) -> None:
        """Write into ``directory`` (None: write nothing), copy ``crl_file`` there, reload ``pid_files``.

        ``observers`` and ``local_topics`` are those ``spanedge broker-config`` was given
        (``--observer``, ``--local-topic``): the ACLs the hub rewrites keep them.
        """
        self.directory = directory
        self.pid_files = tuple(pid_files)
        self.crl_file = crl_file
        self.observers = tuple(observers)
        self.local_topics = tuple(local_topics)

    def write(self, sites: Sites, revoked: Collection[str]) -> list[Path]:
        """Write every broker's ACL (``revoked`` sites without rules) and the CRL; the files written."""
        if self.directory is None:
            return []
        written = []
        hubs = {s.name for s in sites.hubs}
        top_taken = False
        for local in broker_groups(sites).values():
            top = bool(hubs & set(local)) and not top_taken
            top_taken = top_taken or top
            directory = self.directory if top else self.directory / local[0]
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / "acl"
            text = acl_text(
                sites,
                local,
                observers=self.observers,
                local_topics=self.local_topics,
                per_site=True,
                revoked=revoked,
            )
            _replace(path, text.encode(), 0o644)
            written.append(path)
        if self.crl_file is not None:
            path = self.directory / "crl.pem"
            _replace(path, self.crl_file.read_bytes(), 0o644)
            written.append(path)
        return written

    def reload(self) -> list[str]:
        """Send SIGHUP to each broker of :attr:`pid_files`; what happened to each, for the answer and the log."""
        outcome = []
        for pid_file in self.pid_files:
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, signal.SIGHUP)
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                line = f"{pid_file}: not reloaded ({reason}); reload that broker by hand (kill -HUP its pid)"
                log.warning("broker %s", line)
            else:
                line = f"{pid_file}: pid {pid} reloaded (SIGHUP)"
            outcome.append(line)
        return outcome


def _replace(path: Path, data: bytes, mode: int) -> None:
    """Write ``path`` atomically with ``mode``: a broker reloading meanwhile reads the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)
