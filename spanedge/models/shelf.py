"""The versions the hub sent out, read from its model folder by whatever process scores at the hub.

The hub's Spark workers are processes of their own: they do not see the
versions the hub installs in memory. A :class:`Shelf` reads them from
``<state_dir>/models/<app>/<model>/v<N>.json`` (:mod:`hub.models.registry`),
taking only the versions with a switch time (those sent to the sites), and
looks again at most every :data:`REFRESH_S` seconds, so a version the hub
sends out is scored with at the hub too, from the same event time on, without
restarting any query.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import msgspec

from spanedge.models.envelope import MAX_MESSAGE_BYTES
from spanedge.models.installed import InstalledModels
from spanedge.models.version import ModelVersion

log = logging.getLogger(__name__)

#: A shelf looks for new versions at most this often (seconds).
REFRESH_S = 1.0
_VERSION_FILE = re.compile(r"^v(\d{1,9})\.json$")
_DECODER = msgspec.json.Decoder(ModelVersion)


class Shelf:
    """The versions sent out under ``root`` (``<state_dir>/models``), by ``(app, model)``."""

    def __init__(self, root: Path) -> None:
        """Read versions under ``root``."""
        self.root = Path(root)
        self._clock = time.monotonic
        self._lock = threading.Lock()
        self._checked: dict[tuple[str, str], float] = {}
        self._seen: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
        self.models = InstalledModels()

    def pick(self, app: str, model: str, event_time: float | None) -> ModelVersion | None:
        """The version sent out for a record of ``app``'s ``model`` at ``event_time`` (None: none was)."""
        key = (app, model)
        now = self._clock()
        with self._lock:
            due = now - self._checked.get(key, -REFRESH_S) >= REFRESH_S
            if due:
                self._checked[key] = now
        if due:
            self.refresh(app, model)
        return self.models.pick(app, model, event_time)

    def refresh(self, app: str, model: str) -> None:
        """Read the version files of ``app``'s ``model`` that are new or changed since the last look."""
        folder = self.root / app / model
        try:
            names = [p for p in folder.iterdir() if _VERSION_FILE.match(p.name)]
        except OSError:
            return
        seen = self._seen.setdefault((app, model), {})
        for path in sorted(names, key=lambda p: int(p.name[1:-5])):
            try:
                stat = path.stat()
            except OSError:
                continue
            mark = (stat.st_mtime_ns, stat.st_size)
            if seen.get(path.name) == mark or stat.st_size > MAX_MESSAGE_BYTES:
                continue
            seen[path.name] = mark
            try:
                version = _DECODER.decode(path.read_bytes())
            except (OSError, msgspec.DecodeError) as exc:
                log.warning("model version file %s cannot be read (%s); it is not scored with", path, exc)
                continue
            if version.switch_at is not None and (version.app, version.model) == (app, model):
                self.models.install(version)


_SHELVES: dict[str, Shelf] = {}
_SHELVES_LOCK = threading.Lock()


def shelf_of(root: str) -> Shelf:
    """The one :class:`Shelf` of ``root`` in this process."""
    with _SHELVES_LOCK:
        shelf = _SHELVES.get(root)
        if shelf is None:
            shelf = _SHELVES[root] = Shelf(Path(root))
        return shelf
