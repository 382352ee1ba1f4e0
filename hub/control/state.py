"""The hub's persisted control state: deployed apps, their plans and history.

Layout under the state directory::

    apps/<app>.json        one record per deployed app (source, options, plan, the plan it
                           replaced, history)
    distribution.json      the last plan-message version published per site

Every file is replaced atomically (write, fsync, rename), so a hub killed at
any moment restarts with either the old or the new record, never a torn one.

A record's ``basis`` holds the latency of every pair of sites (20,100 at 200
sites), nearly all of them the same declared value; the file keeps them as
that value plus the pairs that differ (:func:`pack_latency`), about a
twentieth of the size.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spanedge.errors import SpanEdgeError
from spanedge.names import file_stem
from spanedge.plan import Plan


class Documents(Protocol):
    """Named JSON documents kept elsewhere than in the state directory (:class:`hub.ha.pg_state.PgStateStore`)."""

    def load_document(self, name: str) -> Any:
        """The document ``name``, or None if none is kept."""
        ...

    def save_document(self, name: str, body: Any) -> None:
        """Keep ``body`` as the document ``name``."""
        ...


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically and durably."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # json.dumps without indent runs the C encoder (json.dump and an indent run the Python one, 10x slower);
    # like json.dump, it writes non-finite floats as Infinity and NaN, which json.loads reads back
    text = json.dumps(data, separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def unpack_latency(packed: dict[str, Any]) -> dict[str, float]:
    """The latency of every pair from a basis stored packed (``{"sites", "common_ms", "other_ms"}``).

    Earlier hubs stored every pair's latency in a record's basis, packed so;
    a basis holds the measured pairs only now (:func:`hub.control.planning.basis`), stored as they are.
    """
    sites, common = packed["sites"], float(packed["common_ms"])
    latency = {f"{a}|{b}": common for i, a in enumerate(sites) for b in sites[i + 1 :]}
    latency.update({str(k): float(v) for k, v in packed["other_ms"].items()})
    return latency


def _loaded_basis(stored: dict[str, Any]) -> dict[str, Any]:
    if "latency_packed" not in stored:
        return dict(stored)
    basis = {k: v for k, v in stored.items() if k != "latency_packed"}
    return {"latency": unpack_latency(stored["latency_packed"]), **basis}


@dataclass
class HistoryEntry:
    """One plan version of an app: why it was made, what moved, and its cost against the baselines.

    ``moved`` lists the replicas whose site changed from the previous version, each as
    ``{"replica", "from", "to"}`` and, when the move is handed over, ``"switch_at"`` (the
    event time of the split) (empty for a first deploy or an unchanged placement);
    ``baselines`` maps a baseline's name (``central``, ``local-first``) to its totals for
    this version's inputs.
    """

    version: int
    at: float
    reason: str
    totals: dict[str, Any]
    changed: bool = True
    moved: list[dict[str, Any]] = field(default_factory=list)
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class AppRecord:
    """A deployed app as the hub keeps it."""

    name: str
    source: str
    filename: str
    plan: Plan
    app_name: str | None = None
    slo_ms: float | None = None
    weights: dict[str, float] | None = None
    deployed_at: float = 0.0
    history: list[HistoryEntry] = field(default_factory=list)
    basis: dict[str, Any] = field(default_factory=dict)
    """The measured latencies and the rates the current plan was computed from (for drift detection)."""
    replaced: Plan | None = None
    """The plan the current plan replaced, if this hub replaced one: its owners may still publish (:mod:`hub.ingest.publishers`)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "name": self.name,
            "source": self.source,
            "filename": self.filename,
            "app_name": self.app_name,
            "slo_ms": self.slo_ms,
            "weights": self.weights,
            "deployed_at": self.deployed_at,
            "plan": self.plan.to_dict(),
            "history": [asdict(h) for h in self.history],
            "basis": self.basis,
            **({"replaced": self.replaced.to_dict()} if self.replaced is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AppRecord:
        """Rebuild a record from :meth:`to_dict` output."""
        return cls(
            name=str(data["name"]),
            source=str(data["source"]),
            filename=str(data["filename"]),
            plan=Plan.from_dict(data["plan"]),
            app_name=data.get("app_name"),
            slo_ms=data.get("slo_ms"),
            weights=data.get("weights"),
            deployed_at=float(data.get("deployed_at", 0.0)),
            history=[HistoryEntry(**h) for h in data.get("history", [])],
            basis=_loaded_basis(data.get("basis", {})),
            replaced=Plan.from_dict(data["replaced"]) if data.get("replaced") else None,
        )


class StateStore:
    """Reads and writes the hub's control state under ``root``."""

    def __init__(self, root: Path) -> None:
        """Use ``root`` (created if missing) as the state directory.

        Raises:
            SpanEdgeError: the directory cannot be created; the message names it and the reason.
        """
        self.root = Path(root)
        self.apps_dir = self.root / "apps"
        try:
            self.apps_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = (
                f"cannot create the hub's state directory {self.root}: {exc.strerror or exc}; "
                "pass --state-dir in a writable place"
            )
            raise SpanEdgeError(msg) from None

    def _app_path(self, name: str) -> Path:
        return self.apps_dir / f"{file_stem(name)}.json"

    def save_app(self, record: AppRecord) -> None:
        """Persist ``record``, replacing any earlier one of the same app."""
        write_json_atomic(self._app_path(record.name), record.to_dict())

    def delete_app(self, name: str) -> None:
        """Forget app ``name`` (no error if it is not stored)."""
        self._app_path(name).unlink(missing_ok=True)

    def load_apps(self) -> list[AppRecord]:
        """Every stored app, by name.

        Raises:
            SpanEdgeError: a record cannot be parsed; the message names the file.
        """
        records = []
        for path in sorted(self.apps_dir.glob("*.json")):
            try:
                records.append(AppRecord.from_dict(json.loads(path.read_text())))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                msg = f"cannot read the deployed app record {path}: {exc}; fix or delete the file and restart the hub"
                raise SpanEdgeError(msg) from None
        return records

    def load_versions(self) -> dict[str, int]:
        """The last plan-message version published per site."""
        path = self.root / "distribution.json"
        if not path.exists():
            return {}
        try:
            return {str(k): int(v) for k, v in json.loads(path.read_text()).items()}
        except (OSError, ValueError, AttributeError) as exc:
            msg = f"cannot read {path}: {exc}; delete it and restart the hub (versions restart from the clock)"
            raise SpanEdgeError(msg) from None

    def save_versions(self, versions: dict[str, int]) -> None:
        """Persist the last plan-message version published per site."""
        write_json_atomic(self.root / "distribution.json", versions)
