"""How much of one micro-batch an MQTT sink has had acknowledged, kept across a crash of the hub.

MQTT cannot take a message back, so a sink that dies while publishing a batch
republishes it when Spark replays the batch. To repeat only what was in
flight, the sink publishes a batch's messages in one order that a replay
reproduces (sorted by payload: Spark may hand a replayed batch's rows over
in another order), and records after each broker acknowledgement how many
of them the broker holds. A replay of that batch skips those.

The record is one fixed-width line, overwritten in place with ``pwrite``
and not fsynced: it outlives the hub process (the page cache keeps it),
which is the crash it is for; after a crash of the machine an older count
only means more messages published again, never fewer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Fixed width, so that each count overwrites the last one whole.
_LINE = "{batch:020d} {count:012d}\n"


def publish_order(payloads: Sequence[Any]) -> list[Any]:
    """``payloads`` in the order every run of a batch publishes them: by their bytes."""
    return sorted(payloads, key=lambda v: v if isinstance(v, bytes) else str(v).encode())


class PublishProgress:
    """The count of acknowledged messages of the batch a sink is publishing, in the file ``path``."""

    def __init__(self, path: Path) -> None:
        """Keep the count in ``path`` (created on the first acknowledgement)."""
        self.path = path
        self._fd: int | None = None

    def acknowledged(self, batch_id: int) -> int:
        """How many messages of ``batch_id``, in publish order, the broker acknowledged before (0: none known)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return 0
        parts = text.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts) or int(parts[0]) != batch_id:
            return 0
        return int(parts[1])

    def record(self, batch_id: int, count: int) -> None:
        """Record that the broker holds the first ``count`` messages of ``batch_id``."""
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(self._fd, _LINE.format(batch=batch_id, count=count).encode(), 0)

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
