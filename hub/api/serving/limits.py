"""The bounds on the REST API's clients, and the bookkeeping of who holds which connections."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("hub.api.serving")


@dataclass(frozen=True)
class ClientLimits:
    """How long a client may take to send a request, and how many connections it and all clients may hold."""

    #: seconds from a connection's opening (or the first byte of its next request) to the end of the headers
    header_s: float = 10.0
    #: seconds from the end of the headers to the end of the body (bodies are at most 4 MiB)
    body_s: float = 30.0
    #: connections one address may hold at once (behind a proxy or a NAT, its clients count as one)
    per_client: int = 32
    #: connections open at once, all clients together
    total: int = 512

    def __post_init__(self) -> None:
        """Refuse a bound that would refuse everything."""
        if not (self.header_s > 0 and self.body_s > 0 and self.per_client >= 1 and self.total >= 1):
            msg = f"client limits must be positive, got {self}"
            raise ValueError(msg)


class Admission:
    """Counts the open connections per address and in total; :meth:`admit` says whether one more may open."""

    def __init__(self, limits: ClientLimits) -> None:
        """No connection open yet."""
        self.limits = limits
        self.open: Counter[str] = Counter()
        self.total = 0

    def admit(self, address: str) -> int | None:
        """Count a new connection from ``address``; or the status to refuse it with (503: all full, 429: its own)."""
        if self.total >= self.limits.total:
            return 503
        if self.open[address] >= self.limits.per_client:
            return 429
        self.open[address] += 1
        self.total += 1
        return None

    def release(self, address: str) -> None:
        """A connection :meth:`admit` counted has closed."""
        self.total -= 1
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]


class Notices:
    """Warnings about dropped clients: the first of a kind at once, then at most one every ``every_s``.

    A held-back warning is counted and the count said by the next one of its kind.
    """

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        """Nothing said yet."""
        self.every_s = every_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: Counter[str] = Counter()

    def warn(self, kind: str, message: str, *args: object) -> None:
        """Log ``message % args`` unless a warning of ``kind`` went out less than ``every_s`` ago."""
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.every_s:
            self._held[kind] += 1
            return
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        if held and last is not None:
            message += f" (and {held} more like it in the {now - last:.0f} s before)"
        log.warning(message, *args)
