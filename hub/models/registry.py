"""The versions of every model, under ``<state_dir>/models/<app>/<model>/``.

Each version is ``v<N>.json`` (its :class:`~spanedge.models.version.ModelVersion`)
and, when the hub has a plan key, ``v<N>.signed`` (its signed message,
:mod:`spanedge.models.envelope`); files are written atomically, the signed one first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import msgspec

from spanedge.models.envelope import seal_model
from spanedge.models.version import ModelVersion
from spanedge.signing import PlanSigningKey

_VERSION_FILE = re.compile(r"^v(\d{1,9})\.json$")
_DECODER = msgspec.json.Decoder(ModelVersion)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` durably: a temporary file, fsynced, renamed into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class ModelRegistry:
    """Reads and writes model versions under ``root`` (``<state_dir>/models``)."""

    def __init__(self, root: Path, key: PlanSigningKey | None = None) -> None:
        """Keep versions under ``root``; sign each with ``key`` if given."""
        self.root = Path(root)
        self.key = key

    def _folder(self, app: str, model: str) -> Path:
        return self.root / app / model

    def numbers(self, app: str, model: str) -> list[int]:
        """The version numbers of ``app``'s ``model``, oldest first."""
        folder = self._folder(app, model)
        if not folder.is_dir():
            return []
        found = (_VERSION_FILE.match(p.name) for p in folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m is not None)

    def get(self, app: str, model: str, number: int) -> ModelVersion:
        """Version ``number``; ``KeyError`` if there is none, ``ValueError`` if its file is damaged."""
        path = self._folder(app, model) / f"v{number}.json"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            msg = f"model '{model}' of app '{app}' has no version {number}"
            raise KeyError(msg) from None
        try:
            return _DECODER.decode(data)
        except msgspec.DecodeError as exc:
            msg = f"model version file {path} is damaged ({exc}); delete it to train the version again"
            raise ValueError(msg) from None

    def versions(self, app: str, model: str) -> list[ModelVersion]:
        """Every version, oldest first."""
        return [self.get(app, model, n) for n in self.numbers(app, model)]

    def latest(self, app: str, model: str) -> ModelVersion | None:
        """The newest version, None if it was never trained."""
        numbers = self.numbers(app, model)
        return self.get(app, model, numbers[-1]) if numbers else None

    def next_number(self, app: str, model: str) -> int:
        """The number the next version gets."""
        numbers = self.numbers(app, model)
        return numbers[-1] + 1 if numbers else 1

    def save(self, version: ModelVersion) -> Path:
        """Store ``version`` (and its signed message); return its file."""
        folder = self._folder(version.app, version.model)
        folder.mkdir(parents=True, exist_ok=True)
        if self.key is not None:
            write_atomic(folder / f"v{version.version}.signed", seal_model(version, self.key))
        path = folder / f"v{version.version}.json"
        write_atomic(path, msgspec.json.encode(version))
        return path

    def signed(self, app: str, model: str, number: int) -> bytes | None:
        """The signed message of version ``number``, None if the hub signs nothing."""
        path = self._folder(app, model) / f"v{number}.signed"
        return path.read_bytes() if path.exists() else None
