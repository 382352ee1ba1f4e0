"""How much of one micro-batch an MQTT sink has had acknowledged, kept across a crash of the hub.

MQTT cannot take a message back, so a sink that dies while publishing a batch
republishes it when Spark replays the batch. To repeat only what was in
flight, the sink publishes a batch's messages in one order that a replay
reproduces (sorted by payload: Spark may hand a replayed batch's rows over
in another order), and records after each broker acknowledgement how many
of them the broker holds, with a digest of the topic and every message. A
replay skips that many only when it is about to publish the same messages
(the same batch id and digest); anything else is published whole again.

The record is one fixed-width line, overwritten in place with ``pwrite``
and not fsynced: it outlives the hub process (the page cache keeps it),
which is the crash it is for; after a crash of the machine an older count
only means more messages published again, never fewer.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Fixed width, so that each record overwrites the last one whole.
_LINE = "{batch:020d} {digest} {count:012d}\n"


def publish_order(payloads: Sequence[Any]) -> list[bytes]:
    """``payloads`` as bytes, in the order every run of a batch publishes them: sorted."""
    return sorted(v if isinstance(v, bytes) else b"" if v is None else str(v).encode() for v in payloads)


def digest(topic: str, ordered: Sequence[bytes]) -> str:
    """16 hex digits naming ``topic`` and the messages ``ordered`` (each length-prefixed)."""
    h = hashlib.blake2b(topic.encode(), digest_size=8)
    for payload in ordered:
        h.update(len(payload).to_bytes(8, "big"))
        h.update(payload)
    return h.hexdigest()


class PublishProgress:
    """The count of acknowledged messages of the publish a sink is making, in the file ``path``."""

    def __init__(self, path: Path) -> None:
        """Keep the count in ``path`` (created on the first acknowledgement)."""
        self.path = path
        self._fd: int | None = None

    def latest(self) -> tuple[int, str, int] | None:
        """The batch id, publish digest and count last recorded (None: no record yet, or not a record)."""
        try:
            parts = self.path.read_text().split()
        except FileNotFoundError:
            return None
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit():
            return None
        return int(parts[0]), parts[1], int(parts[2])

    def acknowledged(self, batch_id: int, of: str) -> int:
        """How many messages of the publish ``of`` (a :func:`digest`) in ``batch_id`` the broker acknowledged before."""
        latest = self.latest()
        return latest[2] if latest is not None and latest[:2] == (batch_id, of) else 0

    def record(self, batch_id: int, of: str, count: int) -> None:
        """Record that the broker holds the first ``count`` messages of the publish ``of`` in ``batch_id``."""
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(self._fd, _LINE.format(batch=batch_id, digest=of, count=count).encode(), 0)

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
