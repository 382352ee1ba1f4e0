"""Link latencies between sites: declared in ``sites.yaml``, measured by the agents' probes.

An agent reports the round trip to each peer; a link's one-way estimate is
half of it, smoothed (EWMA) and kept per unordered site pair. A
measurement older than ``stale_after_s`` gives way to the declared value.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from placement.latency import LatencyMatrix
from spanedge.sites import Sites

log = logging.getLogger(__name__)


def pair(a: str, b: str) -> str:
    """The key of the link between ``a`` and ``b`` in either direction."""
    return "|".join(sorted((a, b)))


@dataclass
class Smoothed:
    """An exponentially weighted moving average with the time of its last update."""

    p50_ms: float
    p95_ms: float
    samples: int
    updated_at: float

    def update(self, p50_ms: float, p95_ms: float, samples: int, now: float, alpha: float) -> None:
        """Blend in a new measurement with weight ``alpha``."""
        self.p50_ms = alpha * p50_ms + (1 - alpha) * self.p50_ms
        self.p95_ms = alpha * p95_ms + (1 - alpha) * self.p95_ms
        self.samples = samples
        self.updated_at = now


class Links:
    """The declared links of ``sites`` and the smoothed measurements (not thread-safe: the registry locks)."""

    def __init__(self, sites: Sites, alpha: float, stale_after_s: float) -> None:
        """Smooth with weight ``alpha``; forget a measurement after ``stale_after_s`` seconds."""
        self.alpha = alpha
        self.stale_after_s = stale_after_s
        self._declared = LatencyMatrix.from_sites(sites)
        self._peers: dict[str, set[str]] = {}
        for link in sites.links:
            a, b = link.between
            self._peers.setdefault(a, set()).add(b)
            self._peers.setdefault(b, set()).add(a)
        self._measured: dict[str, Smoothed] = {}

    def peers(self, site: str) -> set[str]:
        """The sites ``site`` has a declared link to or a measurement of (fresh or not)."""
        return set(self._peers.get(site, ()))

    def measure(self, site: str, peer: str, m: Mapping[str, Any], now: float) -> None:
        """Take ``site``'s report ``{"rtt_ms", "p95_ms", "samples"}`` of its probes to ``peer``."""
        if m.get("rtt_ms") is None:
            return  # no probe answered yet
        try:
            rtt = float(m["rtt_ms"])
            p95 = float(m["p95_ms"]) if m.get("p95_ms") is not None else rtt
            samples = int(m.get("samples", 1))
        except (KeyError, TypeError, ValueError):
            log.warning("site %r reported a malformed latency to %r: %r", site, peer, m)
            return
        if samples <= 0 or rtt < 0:
            return
        key = pair(site, peer)
        self._peers.setdefault(site, set()).add(peer)
        self._peers.setdefault(peer, set()).add(site)
        current = self._measured.get(key)
        if current is None or now - current.updated_at > self.stale_after_s:
            self._measured[key] = Smoothed(rtt / 2, p95 / 2, samples, now)
        else:
            current.update(rtt / 2, p95 / 2, samples, now, self.alpha)

    def measured(self, a: str, b: str) -> Smoothed | None:
        """A copy of the measurement of the link between ``a`` and ``b``, fresh or not."""
        m = self._measured.get(pair(a, b))
        return dataclasses.replace(m) if m is not None else None

    def declared(self, a: str, b: str) -> tuple[float, float, float, str]:
        """``(latency_ms, bandwidth_mbps, cost, origin)`` that sites.yaml gives from ``a`` to ``b``."""
        info = self._declared.info(a, b)
        return info.latency_ms, info.bandwidth_mbps, info.cost, info.origin

    def row(self, a: str, b: str, m: Smoothed | None, now: float) -> dict[str, Any]:
        """The estimate of the link from ``a`` to ``b``: the measurement ``m`` if fresh, else declared."""
        latency, bandwidth, cost, origin = self.declared(a, b)
        row: dict[str, Any] = {
            "src": a,
            "dst": b,
            "latency_ms": latency,
            "p95_ms": latency,
            "declared_ms": latency,
            "bandwidth_mbps": bandwidth,
            "cost": cost,
            "source": origin,
            "age_s": None,
            "samples": 0,
        }
        if m is not None and now - m.updated_at <= self.stale_after_s:
            row.update(
                latency_ms=round(m.p50_ms, 3),
                p95_ms=round(m.p95_ms, 3),
                source="measured",
                age_s=round(now - m.updated_at, 3),
                samples=m.samples,
                measured_at=datetime.fromtimestamp(m.updated_at, UTC).isoformat(),
            )
        return row
