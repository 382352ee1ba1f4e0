"""Latency probes: round trips to the hub broker and TCP connect times to peer brokers."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import os
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any


class RttStats:
    """Smoothed round-trip time (EWMA), 95th percentile of recent samples and a sample count."""

    def __init__(self, alpha: float = 0.2, window: int = 100) -> None:
        self.alpha = alpha
        self.smoothed: float | None = None
        self.samples = 0
        self._recent: collections.deque[float] = collections.deque(maxlen=window)

    def add(self, ms: float) -> None:
        """Record one round trip in milliseconds."""
        self.samples += 1
        self._recent.append(ms)
        self.smoothed = ms if self.smoothed is None else (1 - self.alpha) * self.smoothed + self.alpha * ms

    @property
    def p95(self) -> float | None:
        """The 95th percentile of the recent samples."""
        if not self._recent:
            return None
        ordered = sorted(self._recent)
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]

    def to_dict(self) -> dict[str, Any]:
        """``{"rtt_ms", "p95_ms", "samples"}`` for the heartbeat."""
        rtt = None if self.smoothed is None else round(self.smoothed, 3)
        p95 = self.p95
        return {"rtt_ms": rtt, "p95_ms": None if p95 is None else round(p95, 3), "samples": self.samples}


class PublishProbe:
    """Times QoS 1 publishes until their PUBACK: the round trip to a broker.

    Publish through :meth:`send` and call :meth:`acked` from the transport's publish callback; ``acked`` returns
    False for ids that are not probes.
    """

    def __init__(self) -> None:
        self.stats = RttStats()
        self._pending: dict[int, float] = {}
        self._lock = threading.Lock()

    def send(self, publish: Callable[[], int]) -> None:
        """Call ``publish`` (which returns the message id) and time the probe it sends."""
        with self._lock:  # held so a fast PUBACK waits until the probe is registered
            start = time.perf_counter()
            mid = publish()
            self._pending[mid] = start
            if len(self._pending) > 100:  # probes lost while disconnected
                for old in sorted(self._pending)[:50]:
                    del self._pending[old]

    def acked(self, mid: int) -> bool:
        """Record the round trip of probe ``mid``; False if ``mid`` is not a probe."""
        now = time.perf_counter()
        with self._lock:
            start = self._pending.pop(mid, None)
        if start is None:
            return False
        self.stats.add((now - start) * 1000.0)
        return True

    def forget(self) -> None:
        """Drop pending probes (after a disconnect their acks would measure the outage)."""
        with self._lock:
            self._pending.clear()


def _connect_packet(client_id: str) -> bytes:
    """A minimal MQTT 3.1.1 CONNECT packet (clean session, no credentials)."""
    ident = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x0a" + len(ident).to_bytes(2, "big") + ident
    return b"\x10" + bytes([len(body)]) + body


async def mqtt_roundtrip_ms(
    host: str, port: int, timeout: float = 3.0, tls: ssl.SSLContext | None = None
) -> float | None:
    """Time an MQTT CONNECT → CONNACK round trip to a broker in milliseconds (over TLS with ``tls``).

    Unlike a TCP connect, the CONNACK comes from the broker itself, so the
    figure crosses every proxy or tunnel on the way; with TLS it is timed
    after the handshake. A broker that refuses anonymous clients still
    answers with a CONNACK, which is enough. ``None`` if the broker cannot be
    reached.
    """
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls is not None else None), timeout
        )
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    try:
        start = time.perf_counter()
        writer.write(_connect_packet(f"spanedge-probe-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"))
        await writer.drain()
        reply = await asyncio.wait_for(reader.readexactly(4), timeout)
        elapsed = (time.perf_counter() - start) * 1000.0
        if reply[0] != 0x20:
            return None
        writer.write(b"\xe0\x00")  # DISCONNECT
        return elapsed
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


class ClockOffset:
    """Offset of the hub clock from the agent clock, from echoed probes (NTP-style).

    When the hub answers a probe with its own time, the offset is
    ``hub_ts - (sent + received) / 2``; the estimate with the smallest round
    trip among recent ones is kept.
    """

    def __init__(self, window: int = 20) -> None:
        self._recent: collections.deque[tuple[float, float]] = collections.deque(maxlen=window)

    def observe(self, sent: float, hub_ts: float, received: float) -> None:
        """Add one echo: agent send time, hub time, agent receive time (epoch seconds)."""
        rtt = received - sent
        if rtt < 0:
            return
        self._recent.append((rtt, hub_ts - (sent + received) / 2))

    @property
    def offset_ms(self) -> float | None:
        """The best current estimate in milliseconds (``None`` without echoes)."""
        if not self._recent:
            return None
        return round(min(self._recent)[1] * 1000.0, 3)
