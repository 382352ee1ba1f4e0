"""Latency probes: round trips to the hub broker and to peer brokers, and the hub clock's offset."""

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

from edge_agent.mqtt import codec


class RttStats:
    """The latest round trip, the 95th percentile of recent ones, and a count.

    The latest probe as it is, not smoothed: the hub keeps a window of each
    link's reports (:mod:`hub.control.links`) and smooths them there, and a moving
    average here would turn a lasting change into a climb over many probes,
    which, on a noisy link, the hub cannot tell from noise.
    """

    def __init__(self, window: int = 100) -> None:
        self.latest: float | None = None
        self.samples = 0
        self._recent: collections.deque[float] = collections.deque(maxlen=window)

    def add(self, ms: float) -> None:
        """Record one round trip in milliseconds."""
        self.samples += 1
        self.latest = ms
        self._recent.append(ms)

    @property
    def p95(self) -> float | None:
        """The 95th percentile of the recent samples."""
        if not self._recent:
            return None
        ordered = sorted(self._recent)
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]

    def to_dict(self) -> dict[str, Any]:
        """``{"rtt_ms", "p95_ms", "samples"}`` for the heartbeat: the latest round trip, the recent p95, the count."""
        rtt, p95 = self.latest, self.p95
        return {
            "rtt_ms": None if rtt is None else round(rtt, 3),
            "p95_ms": None if p95 is None else round(p95, 3),
            "samples": self.samples,
        }


class PublishProbe:
    """Times QoS 1 publishes until their PUBACK: the round trip to a broker.

    Publish through :meth:`send` and call :meth:`acked` from the transport's publish callback; ``acked`` returns
    False for ids that are not probes. The lock is never held across ``publish``: paho calls ``acked`` from its
    network thread while holding the lock its ``publish`` takes, so holding ours across it deadlocks the agent.
    A PUBACK handled before ``publish`` returns is kept briefly (among the latest :data:`EARLY_ACKS` unknown ids)
    and matched when :meth:`send` learns the probe's id.
    """

    def __init__(self) -> None:
        self.stats = RttStats()
        self._pending: dict[int, float] = {}
        self._early: dict[int, float] = {}
        self._lock = threading.Lock()

    def send(self, publish: Callable[[], int]) -> None:
        """Call ``publish`` (which returns the message id) and time the probe it sends."""
        start = time.perf_counter()
        mid = publish()
        with self._lock:
            acked_at = self._early.pop(mid, None)
            if acked_at is not None:  # the PUBACK came before publish returned
                self.stats.add((acked_at - start) * 1000.0)
                return
            self._pending[mid] = start
            if len(self._pending) > 100:  # probes lost while disconnected
                for old in sorted(self._pending)[:50]:
                    del self._pending[old]

    def acked(self, mid: int) -> bool:
        """Record the round trip of probe ``mid``; False if ``mid`` is not a probe (or not one yet)."""
        now = time.perf_counter()
        with self._lock:
            start = self._pending.pop(mid, None)
            if start is None:
                self._early[mid] = now
                if len(self._early) > EARLY_ACKS:
                    del self._early[next(iter(self._early))]  # the oldest: ids are reused only after 65,535
                return False
            self.stats.add((now - start) * 1000.0)
        return True

    def forget(self) -> None:
        """Drop pending probes (after a disconnect their acks would measure the outage)."""
        with self._lock:
            self._pending.clear()
            self._early.clear()


#: Unknown PUBACK ids a :class:`PublishProbe` keeps, in case a probe's ``publish`` has not returned its id yet.
EARLY_ACKS = 256


#: PINGREQ → PINGRESP round trips a peer probe adds once the broker has accepted its connection.
PROBE_PINGS = 2


async def mqtt_roundtrip_ms(
    host: str,
    port: int,
    timeout: float = 3.0,
    tls: ssl.SSLContext | None = None,
    *,
    username: str | None = None,
    password: str | None = None,
    pings: int = PROBE_PINGS,
) -> float | None:
    """Time a round trip to a broker in milliseconds (over TLS with ``tls``): the fastest of a few.

    The first is CONNECT → CONNACK; if the broker accepts the connection
    (with ``username`` and ``password``, where it wants them), ``pings``
    PINGREQ → PINGRESP round trips follow on it. Unlike a TCP connect, each
    answer comes from the broker itself, so the figure crosses every proxy or
    tunnel on the way; with TLS it is timed after the handshake. The fastest,
    because a busy machine on either end only ever adds delay: it takes most
    of that noise out of the probe without a second handshake. A broker that
    refuses the connection still answers the CONNECT, which is one round
    trip. ``None`` if the broker cannot be reached.
    """
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls is not None else None), timeout
        )
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    try:
        client_id = f"spanedge-probe-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
        hello = codec.connect(client_id, 10, clean=True, username=username, password=password)
        reply = await _roundtrip(reader, writer, hello, 4, timeout)
        if reply is None or reply[1][0] != 0x20:
            return None
        fastest = reply[0]
        if reply[1][3] == 0:  # accepted
            for _ in range(pings):
                pong = await _roundtrip(reader, writer, codec.PINGREQ, 2, timeout)
                if pong is None or pong[1][0] != 0xD0:
                    break
                fastest = min(fastest, pong[0])
            writer.write(codec.DISCONNECT)
        return fastest
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


async def _roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, packet: bytes, answer: int, timeout: float
) -> tuple[float, bytes] | None:
    """Send ``packet`` and read ``answer`` bytes back: (milliseconds, the bytes), or ``None`` if none came."""
    try:
        start = time.perf_counter()
        writer.write(packet)
        await writer.drain()
        reply = await asyncio.wait_for(reader.readexactly(answer), timeout)
        return (time.perf_counter() - start) * 1000.0, reply
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return None


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
