"""A rollout as the hub keeps it: the rollout and the candidate version, in ``<state-dir>/rollouts/<app>.json``.

Each file is written atomically (write, fsync, rename) after every step that
changed the rollout, before any plan message of the step leaves, so a hub
killed at any moment restarts with the step before or after it. The last
record of an app stays when its rollout is over, until the next one replaces it.
With ``--ha`` the records are one document, ``rollouts``, in the hub's shared
database (:class:`hub.ha.pg_state.PgStateStore`), written fenced by the
leader's epoch, so the hub that takes over goes on with the rollout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hub.control.rollout.model import Rollout
from hub.control.state import Documents, write_json_atomic
from spanedge.errors import InvalidRollout, SpanEdgeError
from spanedge.names import file_stem
from spanedge.plan import Plan

#: The largest rollout file the hub reads back (a rollout of 10,000 sites with its steps is far below it).
MAX_RECORD_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RolloutRecord:
    """A rollout with the version it brings: its source, file name, app attribute and plan.

    Attributes:
        rollout: the rollout's state and steps.
        source: the new version's source.
        filename: its file name.
        app_name: which App of the source (None: the only one).
        plan: the new version's plan; it keeps every replica the previous plan has where it is.
    """

    rollout: Rollout
    source: str
    filename: str
    app_name: str | None
    plan: Plan

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "rollout": self.rollout.to_dict(),
            "candidate": {
                "source": self.source,
                "filename": self.filename,
                "app_name": self.app_name,
                "plan": self.plan.to_dict(),
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RolloutRecord:
        """Rebuild a record from :meth:`to_dict` output.

        Raises:
            InvalidRollout: the data is not a rollout record; the message says what is wrong.
        """
        try:
            candidate = data["candidate"]
            app_name = candidate.get("app_name")
            return cls(
                rollout=Rollout.from_dict(data["rollout"]),
                source=str(candidate["source"]),
                filename=str(candidate["filename"]),
                app_name=None if app_name is None else str(app_name),
                plan=Plan.from_dict(candidate["plan"]),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            msg = f"not a rollout record: {type(exc).__name__}: {exc}"
            raise InvalidRollout(msg) from None


class RolloutStore:
    """Reads and writes the rollout records under ``<root>/rollouts``, or as one document of ``documents``."""

    DOCUMENT = "rollouts"
    """The name of the document that holds every app's record, by app, when ``documents`` keeps them."""

    def __init__(self, root: Path, documents: Documents | None = None) -> None:
        """Keep the records in ``root / "rollouts"`` (created on the first write), or in ``documents``."""
        self.dir = Path(root) / "rollouts"
        self.documents = documents
        self._kept: dict[str, Any] | None = None  # the document's records, by app, once read

    def _path(self, app: str) -> Path:
        return self.dir / f"{file_stem(app)}.json"

    def save(self, record: RolloutRecord) -> None:
        """Persist ``record``, replacing the app's earlier one."""
        if self.documents is None:
            write_json_atomic(self._path(record.rollout.app), record.to_dict())
            return
        kept = {**self._document(), record.rollout.app: record.to_dict()}
        self.documents.save_document(self.DOCUMENT, kept)
        self._kept = kept

    def delete(self, app: str) -> None:
        """Forget app ``app``'s rollout (no error if none is stored)."""
        if self.documents is None:
            self._path(app).unlink(missing_ok=True)
            return
        kept = self._document()
        if app in kept:
            kept = {k: v for k, v in kept.items() if k != app}
            self.documents.save_document(self.DOCUMENT, kept)
            self._kept = kept

    def _document(self) -> dict[str, Any]:
        if self._kept is None:
            assert self.documents is not None
            stored = self.documents.load_document(self.DOCUMENT)
            self._kept = dict(stored) if isinstance(stored, Mapping) else {}
        return self._kept

    def load(self) -> list[RolloutRecord]:
        """Every stored record, by app; with ``documents`` holding none, the files', copied in.

        Raises:
            SpanEdgeError: a record cannot be read; the message names the file or document and how to go on.
        """
        if self.documents is None:
            return self._load_files()
        self._kept = None
        kept = self._document()
        if not kept:
            records = self._load_files()
            for record in records:
                self.save(record)
            return records
        records = []
        for app, data in sorted(kept.items()):
            try:
                records.append(RolloutRecord.from_dict(data))
            except ValueError as exc:  # InvalidRollout, or a field of the wrong kind
                msg = (
                    f"cannot read the rollout of app {app!r} in the hub's database (document {self.DOCUMENT!r}): {exc}; "
                    "delete that document to drop the rollouts and restart the hub"
                )
                raise SpanEdgeError(msg) from None
        return records

    def _load_files(self) -> list[RolloutRecord]:
        records = []
        for path in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []:
            try:
                if path.stat().st_size > MAX_RECORD_BYTES:
                    msg = f"it is larger than {MAX_RECORD_BYTES} bytes"
                    raise ValueError(msg)
                records.append(RolloutRecord.from_dict(json.loads(path.read_text())))
            except (OSError, ValueError) as exc:
                msg = (
                    f"cannot read the rollout record {path}: {exc}; delete the file to drop the rollout "
                    "(its sites then get the app's deployed version) and restart the hub"
                )
                raise SpanEdgeError(msg) from None
        return records
