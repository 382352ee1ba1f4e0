"""The outgoing side of an MQTT session: message ids, the in-flight window of QoS 1 publishes and the queue behind it."""

from __future__ import annotations

import collections
from collections.abc import Callable

from edge_agent.mqtt import codec

#: Sends bytes on the connection; ``None`` while there is no connection to send on.
Writer = Callable[[bytes], None] | None


class InflightWindow:
    """Outgoing QoS 1 publishes: at most ``max_inflight`` unacknowledged, then up to ``max_queued`` waiting.

    Message ids are shared with subscriptions awaiting their SUBACK (:attr:`subscribing`), so no id is
    used twice while either is pending.

    Args:
        max_inflight: publishes sent and not yet acknowledged, at most.
        max_queued: publishes held back behind a full window (0: no bound).
    """

    def __init__(self, max_inflight: int, max_queued: int) -> None:
        self.max_inflight = max_inflight
        self.max_queued = max_queued
        self.inflight: dict[int, bytes] = {}  # sent, awaiting their PUBACK
        self.queued: collections.deque[tuple[int, bytes]] = collections.deque()
        self.subscribing: set[int] = set()
        self._mid = 0

    def next_mid(self) -> int:
        """A message id (1–65535) that no pending publish or subscription uses."""
        while True:
            self._mid = self._mid % 65535 + 1
            if self._mid not in self.inflight and self._mid not in self.subscribing:
                return self._mid

    def send(self, mid: int, packet: bytes, write: Writer) -> bool:
        """Send a QoS 1 PUBLISH now if the window has room, or queue it.

        Returns:
            False if it was dropped: not sent and the queue is full.
        """
        if write is not None and len(self.inflight) < self.max_inflight:
            self.inflight[mid] = packet
            write(packet)
        elif self.max_queued and len(self.queued) >= self.max_queued:
            return False
        else:
            self.queued.append((mid, packet))
        return True

    def acknowledged(self, mid: int) -> bool:
        """Take message ``mid`` out of the window; False if it was not in flight."""
        return self.inflight.pop(mid, None) is not None

    def send_queued(self, write: Writer) -> None:
        """Send queued publishes while the window has room."""
        while self.queued and write is not None and len(self.inflight) < self.max_inflight:
            mid, packet = self.queued.popleft()
            self.inflight[mid] = packet
            write(packet)

    def resend(self, write: Writer) -> None:
        """On a new connection: send the unacknowledged publishes again, marked DUP, then queued ones."""
        if write is None:
            return
        for packet in self.inflight.values():
            write(codec.duplicate(packet))
        self.send_queued(write)
