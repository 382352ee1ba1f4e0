"""One versioned, serialisable snapshot per operator instance.

A snapshot is what an operator replica needs to continue elsewhere: the
definition it was taken under (so a changed operator is never fed stale
state), the watermark it had reached, and its state as JSON values. It
travels as bytes: to a checkpoint file, or to another site.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from spanedge.errors import InvalidSnapshot

#: Bumped whenever the layout of a snapshot changes; older layouts are refused with a clear error.
SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class OperatorSnapshot:
    """The state of one operator replica.

    Attributes:
        replica: the replica the state belongs to (``operator@group``).
        spec: the fingerprint of the operator's definition when the snapshot was taken.
        state: the operator's state as JSON-ready data.
        watermark: the event-time watermark the replica had reached (``-inf`` before any record).
    """

    replica: str
    spec: str
    state: dict[str, Any]
    watermark: float = -math.inf

    def to_data(self) -> dict[str, Any]:
        """The snapshot as JSON-ready data, with its version."""
        wm = self.watermark if math.isfinite(self.watermark) else None
        return {"v": SNAPSHOT_VERSION, "replica": self.replica, "spec": self.spec, "state": self.state, "wm": wm}

    def to_bytes(self) -> bytes:
        """The snapshot as bytes another machine can read with :meth:`from_bytes`."""
        return orjson.dumps(self.to_data())

    @classmethod
    def from_data(cls, data: Any, replica: str | None = None) -> OperatorSnapshot:
        """Read :meth:`to_data` output; ``replica`` fills in the name for layouts that keyed it outside.

        Raises:
            InvalidSnapshot: if ``data`` is not a snapshot of this version.
        """
        if not isinstance(data, dict):
            msg = f"an operator snapshot must be a JSON object, got {type(data).__name__}"
            raise InvalidSnapshot(msg)
        version = data.get("v", SNAPSHOT_VERSION)
        if version != SNAPSHOT_VERSION:
            msg = f"operator snapshot has version {version!r}; this runtime reads version {SNAPSHOT_VERSION}"
            raise InvalidSnapshot(msg)
        name = data.get("replica", replica)
        spec, state, wm = data.get("spec"), data.get("state"), data.get("wm")
        if not isinstance(name, str) or not isinstance(spec, str) or not isinstance(state, dict):
            msg = "operator snapshot needs a string 'replica', a string 'spec' and an object 'state'"
            raise InvalidSnapshot(msg)
        if wm is not None and not isinstance(wm, int | float):
            msg = f"operator snapshot of {name}: 'wm' must be a number or null, got {wm!r}"
            raise InvalidSnapshot(msg)
        return cls(name, spec, state, -math.inf if wm is None else float(wm))

    @classmethod
    def from_bytes(cls, data: bytes) -> OperatorSnapshot:
        """Read :meth:`to_bytes` output.

        Raises:
            InvalidSnapshot: if ``data`` is not JSON or not a snapshot of this version.
        """
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            msg = f"operator snapshot is not valid JSON: {exc}"
            raise InvalidSnapshot(msg) from None
        return cls.from_data(parsed)
