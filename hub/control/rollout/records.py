"""A rollout as the hub keeps it: the rollout and the candidate version, in ``<state-dir>/rollouts/<app>.json``.

Each file is written atomically (write, fsync, rename) after every step that
changed the rollout, before any plan message of the step leaves, so a hub
killed at any moment restarts with the step before or after it. The last
record of an app stays when its rollout is over, until the next one replaces it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hub.control.rollout.model import Rollout
from hub.control.state import write_json_atomic
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
    """Reads and writes the rollout records under ``<root>/rollouts``."""

    def __init__(self, root: Path) -> None:
        """Keep the records in ``root / "rollouts"`` (created on the first write)."""
        self.dir = Path(root) / "rollouts"

    def _path(self, app: str) -> Path:
        return self.dir / f"{file_stem(app)}.json"

    def save(self, record: RolloutRecord) -> None:
        """Persist ``record``, replacing the app's earlier one."""
        write_json_atomic(self._path(record.rollout.app), record.to_dict())

    def delete(self, app: str) -> None:
        """Forget app ``app``'s rollout (no error if none is stored)."""
        self._path(app).unlink(missing_ok=True)

    def load(self) -> list[RolloutRecord]:
        """Every stored record, by app.

        Raises:
            SpanEdgeError: a record cannot be read; the message names the file and how to go on.
        """
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
