"""The signed model versions a site accepted, kept under ``<state dir>/models/`` for a restart.

Each is the hub's message as it came, ``<app>/<model>/v<N>.signed``, in a
directory of mode 0700 with files of mode 0600 (the versions are the site's
own, like its plans). The newest :data:`spanedge.models.installed.KEPT_VERSIONS`
per model are kept; a restarted agent verifies them again before it uses them.
"""

from __future__ import annotations

import re
from pathlib import Path

from spanedge.models.envelope import MAX_MESSAGE_BYTES
from spanedge.models.installed import KEPT_VERSIONS
from spanedge.names import NAME_PATTERN
from spanedge.private_files import private_dir, write_private

_FILE = re.compile(r"^v(\d{1,9})\.signed$")
_NAME = re.compile(NAME_PATTERN)
#: A site keeps the versions of at most this many models.
MAX_MODELS = 1000


class ModelStore:
    """Keeps accepted model messages under ``folder`` (``<state dir>/models``)."""

    def __init__(self, folder: Path) -> None:
        """Keep them under ``folder``."""
        self.folder = Path(folder)

    def save(self, app: str, model: str, number: int, message: bytes) -> Path:
        """Keep the message of version ``number`` of ``app``'s ``model``; drop the versions older than the kept ones.

        Raises:
            ValueError: ``app`` or ``model`` is not a valid name (it would leave the folder).
        """
        for name in (app, model):
            if not _NAME.match(name):
                msg = f"model store: {name!r} is not an app or model name"
                raise ValueError(msg)
        folder = private_dir(self.folder / app / model)
        path = folder / f"v{number}.signed"
        write_private(path, message)
        for old in self._numbers(folder)[:-KEPT_VERSIONS]:
            (folder / f"v{old}.signed").unlink(missing_ok=True)
        return path

    def load(self) -> list[tuple[str, str, int, bytes]]:
        """Every kept ``(app, model, number, message)``, oldest version first per model."""
        if not self.folder.is_dir():
            return []
        out: list[tuple[str, str, int, bytes]] = []
        apps = sorted(p for p in self.folder.iterdir() if p.is_dir() and _NAME.match(p.name))
        models = [m for a in apps for m in sorted(a.iterdir()) if m.is_dir() and _NAME.match(m.name)]
        for folder in models[:MAX_MODELS]:
            for number in self._numbers(folder)[-KEPT_VERSIONS:]:
                path = folder / f"v{number}.signed"
                if path.stat().st_size <= MAX_MESSAGE_BYTES:
                    out.append((folder.parent.name, folder.name, number, path.read_bytes()))
        return out

    @staticmethod
    def _numbers(folder: Path) -> list[int]:
        found = (_FILE.match(p.name) for p in folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m is not None)
