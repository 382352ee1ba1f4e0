"""Reaching an external server again and again, with a growing wait, while the sink's query waits for it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from spanedge.errors import SpanEdgeError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Waits after consecutive failures to reach a server; the last one repeats."""


class SinkStopped(SpanEdgeError):
    """The sink's query is stopping while its server is unreachable: the batch is left for the replay."""


class Reconnects:
    """Tries an action until its server answers, waiting longer after each failure; its state is for ``/metrics``.

    ``up`` is None before the first attempt, then whether the last attempt
    reached the server; ``failures`` counts the failed attempts and
    ``error`` is the last failure's message while the server is unreachable.
    """

    def __init__(self, what: str, delays: tuple[float, ...] = RETRY_DELAYS_S) -> None:
        """Retry attempts to reach ``what`` (named in the log) after ``delays``."""
        self.what = what
        self.delays = delays
        self.up: bool | None = None
        self.failures = 0
        self.error: str | None = None
        self._stop = threading.Event()

    def call(self, attempt: Callable[[], T], retryable: tuple[type[BaseException], ...]) -> T:
        """Run ``attempt`` until it raises none of ``retryable``; other errors propagate.

        Raises:
            SinkStopped: :meth:`stop` was called while waiting for the server.
        """
        consecutive = 0
        while True:
            if self._stop.is_set():
                msg = f"{self.what}: the query stopped before the server answered ({self.error or 'not tried'})"
                raise SinkStopped(msg)
            try:
                result = attempt()
            except retryable as exc:
                consecutive += 1
                self.failures += 1
                self.up = False
                self.error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                delay = self.delays[min(consecutive, len(self.delays)) - 1]
                log.warning(
                    "%s: unreachable (%s), %d failures in a row; next try in %.1f s",
                    self.what,
                    self.error,
                    consecutive,
                    delay,
                )
                self._stop.wait(delay)
                continue
            if consecutive:
                log.info("%s: reached again after %d failed attempts", self.what, consecutive)
            self.up = True
            self.error = None
            return result

    def stop(self) -> None:
        """Make a waiting :meth:`call` give up (now, or at its next failure)."""
        self._stop.set()
