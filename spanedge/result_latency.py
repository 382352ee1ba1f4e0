"""End-to-end result latency per sink: p50 and p95 over the last minute.

A result's latency is the time from its event time (a window's end, or the
record's own event time) to when its sink wrote it, on the writer's clock: the
figure the simulator's report gives too. The hub's sinks and the agents' local
sinks each keep one :class:`ResultLatency`; agents report theirs in their
heartbeat (``result_latency``), the hub in ``Engine.metrics()``, and the
dashboard shows both.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

WINDOW_S = 60.0
"""How far back the percentiles look, in seconds."""

MAX_SAMPLES = 4096
"""The most results kept per sink: past that, the oldest go first (the window is then shorter than a minute)."""

Summary = dict[str, float]
"""``{"p50_ms", "p95_ms", "results"}``: the percentiles in milliseconds and how many results they cover."""


def percentile(ordered: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of a sorted, non-empty list, by the nearest rank."""
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def summarise(latencies_s: Iterable[float]) -> Summary | None:
    """p50, p95 (ms) and the count of ``latencies_s`` (seconds); None if there are none."""
    ordered = sorted(latencies_s)
    if not ordered:
        return None
    return {
        "p50_ms": round(percentile(ordered, 0.5) * 1000.0, 1),
        "p95_ms": round(percentile(ordered, 0.95) * 1000.0, 1),
        "results": len(ordered),
    }


class ResultLatency:
    """Recent result latencies by sink name (thread-safe)."""

    def __init__(
        self,
        window_s: float = WINDOW_S,
        max_samples: int = MAX_SAMPLES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Keep the latencies of the last ``window_s`` seconds, at most ``max_samples`` per sink."""
        self.window_s = window_s
        self.max_samples = max_samples
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: dict[str, deque[tuple[float, float]]] = {}

    def written(self, sink: str, event_times: Iterable[float | None], at: float | None = None) -> None:
        """Note results of ``sink`` with these event times (epoch seconds) written at ``at`` (now by default).

        An event time that is not a finite number is skipped; one ahead of the
        clock counts as no latency.
        """
        now = self._clock() if at is None else at
        fresh = [max(0.0, now - t) for t in event_times if isinstance(t, int | float) and math.isfinite(t)]
        if not fresh:
            return
        with self._lock:
            samples = self._samples.setdefault(sink, deque(maxlen=self.max_samples))
            samples.extend((now, lat) for lat in fresh)

    def latencies(self, sink: str, now: float | None = None) -> list[float]:
        """The latencies (seconds) of ``sink``'s results written in the last :attr:`window_s`."""
        since = (self._clock() if now is None else now) - self.window_s
        with self._lock:
            samples = self._samples.get(sink)
            if samples is None:
                return []
            while samples and samples[0][0] < since:
                samples.popleft()
            return [lat for _, lat in samples]

    def summary(self, now: float | None = None) -> dict[str, Summary]:
        """Per sink that wrote a result in the window, its :func:`summarise`."""
        with self._lock:
            sinks = list(self._samples)
        out = {}
        for sink in sinks:
            found = summarise(self.latencies(sink, now))
            if found is not None:
                out[sink] = found
        return out


__all__ = ["MAX_SAMPLES", "WINDOW_S", "ResultLatency", "Summary", "percentile", "summarise"]
