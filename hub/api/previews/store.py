"""The previews the hub keeps: the last :data:`~hub.api.previews.limits.KEEP` per app, in memory and on disk.

Each app's previews are one file, ``<state_dir>/previews/<app>.json``
(``{"app", "previews": [...]}``, oldest first), replaced atomically at every
new preview and removed with the app. A hub without a state directory keeps
them in memory only. A file that cannot be read is logged and left out: the
previews are a report, not state the hub needs to run.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hub.api.previews.limits import KEEP
from hub.api.previews.models import PreviewView
from hub.control.state import write_json_atomic
from spanedge.errors import InvalidName
from spanedge.names import file_stem

log = logging.getLogger(__name__)


class PreviewStore:
    """The last ``keep`` previews of each app, kept under ``root`` (None: in memory only)."""

    def __init__(self, root: Path | None, keep: int = KEEP, deployed: Collection[str] | None = None) -> None:
        """Read the previews kept under ``root``; with ``deployed``, drop those of the apps not in it."""
        self.root = root
        self.keep = keep
        self._lock = threading.Lock()
        self._apps: dict[str, list[dict[str, Any]]] = {}
        if root is not None and root.is_dir():
            for path in sorted(root.glob("*.json")):
                self._load(path, deployed)

    def _load(self, path: Path, deployed: Collection[str] | None) -> None:
        try:
            data = json.loads(path.read_text())
            app = file_stem(str(data["app"]))
            if path.name != f"{app}.json":
                msg = f"it holds the previews of app {app!r}"
                raise ValueError(msg)
            previews = [PreviewView.model_validate(p).model_dump(mode="json") for p in data["previews"]]
        except (OSError, ValueError, KeyError, TypeError, InvalidName, ValidationError) as exc:
            log.warning("left out the previews in %s, which cannot be read: %s", path, exc)
            return
        if deployed is not None and app not in deployed:
            path.unlink(missing_ok=True)
            return
        self._apps[app] = previews[-self.keep :]

    def add(self, app: str, preview: dict[str, Any]) -> None:
        """Keep ``preview`` (a :class:`PreviewView` as JSON) as the newest of ``app``, dropping the oldest past ``keep``.

        Raises:
            OSError: the file cannot be written (the preview is not kept).
        """
        with self._lock:
            kept = [*self._apps.get(app, []), preview][-self.keep :]
            if self.root is not None:
                write_json_atomic(self.root / f"{file_stem(app)}.json", {"app": app, "previews": kept})
            self._apps[app] = kept

    def latest(self, app: str, count: int | None = None) -> list[dict[str, Any]]:
        """The previews of ``app``, newest first; the ``count`` newest if given."""
        with self._lock:
            newest = list(reversed(self._apps.get(app, [])))
        return newest if count is None else newest[: max(count, 0)]

    def drop(self, app: str) -> None:
        """Forget the previews of ``app`` (deleted), in memory and on disk."""
        with self._lock:
            self._apps.pop(app, None)
            if self.root is not None:
                (self.root / f"{file_stem(app)}.json").unlink(missing_ok=True)
