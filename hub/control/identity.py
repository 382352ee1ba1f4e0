"""The hub's instance id and the MQTT client ids made from it.

A hub makes its instance id (8 hex digits) at its first start and keeps it in
``<state_dir>/hub-id.json``, so a restarted hub connects with the same client
ids and resumes its own persistent MQTT sessions::

    spanedge-hub-<hub site>-<instance>-ingest     the ingest's persistent session (hub.ingest.consumer)
    spanedge-hub-<hub site>-<instance>-control    plan distribution and heartbeats (hub.control.distribution)

Two hubs with their own state directories never share a client id, so one
cannot take over the other's session. A state directory that already holds
a hub's data (deployed apps, ingest logs, checkpoints) but no ``hub-id.json``
was written by a hub that connected its ingest as ``spanedge-hub-ingest-<hub
site>``: its broker may hold records queued under that id, so such a state
directory keeps that ingest client id for good (``legacy_ingest`` in the file).
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from spanedge.errors import SpanEdgeError

IDENTITY_FILE = "hub-id.json"
#: What a hub that predates instance ids left in its state directory (``apps/`` counts only if not empty).
HUB_DATA = ("apps", "distribution.json", "ingest", "checkpoints")


@dataclass(frozen=True)
class HubIdentity:
    """Which hub this is: its instance id, and whether its state directory predates instance ids."""

    instance: str
    legacy_ingest: bool = False

    @classmethod
    def of(cls, state_dir: Path) -> HubIdentity:
        """The identity kept in ``state_dir``, made and kept there at the first start.

        Raises:
            SpanEdgeError: the file cannot be read, written, or is not an identity; the message says which file.
        """
        path = Path(state_dir) / IDENTITY_FILE
        if not path.exists():
            legacy = _has_data(Path(state_dir))
            _create(path, {"instance": secrets.token_hex(4), "created": time.time(), "legacy_ingest": legacy})
        try:
            data = json.loads(path.read_text())
            return cls(instance=str(data["instance"]), legacy_ingest=bool(data.get("legacy_ingest", False)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            msg = (
                f"cannot read the hub's instance id from {path}: {exc}; restore the file from a backup, or remove "
                "it on a state directory without data to make a new id"
            )
            raise SpanEdgeError(msg) from None

    def client_id(self, hub_site: str, role: str) -> str:
        """The MQTT client id of this hub's ``role`` connection (``ingest``, ``control``, ``presence-...``)."""
        if role == "ingest" and self.legacy_ingest:
            return f"spanedge-hub-ingest-{hub_site}"
        return f"spanedge-hub-{hub_site}-{self.instance}-{role}"


def _has_data(state_dir: Path) -> bool:
    """Whether ``state_dir`` holds a hub's data (:data:`HUB_DATA`); the empty ``apps/`` a new hub makes does not count."""
    apps = state_dir / "apps"
    if apps.is_dir() and any(apps.iterdir()):
        return True
    return any((state_dir / name).exists() for name in HUB_DATA if name != "apps")


def _create(path: Path, data: dict[str, object]) -> None:
    """Write ``data`` to ``path`` unless it exists (another process made it first), durably."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, path)  # fails if the file appeared meanwhile: the first one stays
        except FileExistsError:
            pass
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as exc:
        msg = f"cannot write the hub's instance id to {path}: {exc.strerror}; give the hub a writable --state-dir"
        raise SpanEdgeError(msg) from None
