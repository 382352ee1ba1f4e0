"""Heartbeats: what the agent reports to the hub every few seconds."""

from __future__ import annotations

import time
from typing import Any

import psutil


class Rates:
    """Per-replica records/s in and out between two heartbeats."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int, int]] = {}

    def update(self, counts: dict[str, dict[str, int]], now: float | None = None) -> dict[str, dict[str, float]]:
        """Return ``{replica: {"in", "out", "rate_in", "rate_out"}}`` from cumulative counts."""
        now = time.monotonic() if now is None else now
        out: dict[str, dict[str, float]] = {}
        for replica, c in counts.items():
            prev = self._last.get(replica)
            n_in, n_out = c["in"], c["out"]
            if prev is None or now <= prev[0]:
                rate_in = rate_out = 0.0
            else:
                dt = now - prev[0]
                rate_in, rate_out = max(0, n_in - prev[1]) / dt, max(0, n_out - prev[2]) / dt
            self._last[replica] = (now, n_in, n_out)
            out[replica] = {"in": n_in, "out": n_out, "rate_in": round(rate_in, 3), "rate_out": round(rate_out, 3)}
        return out


class ProcessStats:
    """CPU percent (since the previous call) and resident memory of this process."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)

    def sample(self) -> tuple[float, int]:
        """Return ``(cpu_percent, rss_bytes)``."""
        return self._proc.cpu_percent(None), int(self._proc.memory_info().rss)


def heartbeat(
    *,
    site: str,
    apps: list[str],
    operators: dict[str, dict[str, float]],
    watermark_lag_s: float | None,
    outbox: dict[str, int],
    dlq: int,
    late: int,
    overload_dropped: int,
    cpu_percent: float,
    rss_bytes: int,
    latency: dict[str, dict[str, Any]],
    clock_offset_ms: float | None,
) -> dict[str, Any]:
    """Assemble one heartbeat message (JSON-ready)."""
    return {
        "site": site,
        "ts": time.time(),
        "apps": apps,
        "operators": operators,
        "watermark_lag_s": None if watermark_lag_s is None else round(watermark_lag_s, 3),
        "outbox": outbox,
        "dlq": dlq,
        "late": late,
        "overload_dropped": overload_dropped,
        "cpu_percent": cpu_percent,
        "rss_bytes": rss_bytes,
        "latency": latency,
        "clock_offset_ms": clock_offset_ms,
    }
