"""The site registry: which sites are alive, what they report, and the links between them.

Heartbeats from the agents feed a :class:`SiteRegistry`: their counters,
the smoothed one-way latency to their peers (:mod:`hub.links`) and the
measured rate of every stream they source. The coordinator places apps with
those measurements (declared ``sites.yaml`` values where nothing fresh was
measured); ``GET /sites`` and ``GET /latency`` show them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from hub.links import Links
from spanedge.sites import Sites

log = logging.getLogger(__name__)


@dataclass
class _SiteState:
    last_seen: float | None = None
    heartbeat: dict[str, Any] = field(default_factory=dict)
    rejected: int = 0


class SiteRegistry:
    """Live state of the sites, built from their heartbeats.

    Thread-safe: heartbeats arrive on the MQTT thread, reads come from the API.
    """

    def __init__(
        self,
        sites: Sites,
        *,
        down_after_s: float = 15.0,
        alpha: float = 0.3,
        stale_after_s: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Track ``sites``.

        Args:
            sites: the declared sites.
            down_after_s: a site is down after this many seconds without a heartbeat.
            alpha: EWMA weight of a new latency or rate measurement (0 < alpha <= 1).
            stale_after_s: measurements older than this fall back to declared values.
            clock: the time source (seconds).
        """
        if not 0 < alpha <= 1:
            msg = f"latency smoothing alpha must be in (0, 1], got {alpha}"
            raise ValueError(msg)
        self.sites = sites
        self.down_after_s = down_after_s
        self.alpha = alpha
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, _SiteState] = {name: _SiteState() for name in sites.sites}
        self._links = Links(sites, alpha, stale_after_s)
        self._rates: dict[tuple[str, str], float] = {}
        self._unknown: set[str] = set()

    # -- input ---------------------------------------------------------------------------------

    def heartbeat(self, site: str, payload: bytes | Mapping[str, Any]) -> bool:
        """Record a heartbeat that arrived on ``site``'s heartbeat topic.

        Returns:
            True if it was recorded; malformed or misaddressed heartbeats are
            logged with the reason and ignored.
        """
        if isinstance(payload, bytes | bytearray):
            try:
                data = orjson.loads(payload)
            except orjson.JSONDecodeError as exc:
                return self._reject(site, f"not JSON ({exc})")
        else:
            data = dict(payload)
        if not isinstance(data, dict):
            return self._reject(site, "not a JSON object")
        if data.get("site", site) != site:
            return self._reject(site, f"its 'site' field says {data.get('site')!r}")
        if site not in self._state:
            if site not in self._unknown:
                self._unknown.add(site)
                log.warning("heartbeat from site %r, which sites.yaml does not define; ignoring it", site)
            return False
        now = self._clock()
        with self._lock:
            state = self._state[site]
            state.last_seen = now
            state.heartbeat = data
            latency = data.get("latency") or {}
            if isinstance(latency, dict):
                for peer, m in latency.items():
                    if str(peer) != site and str(peer) in self._state and isinstance(m, dict):
                        self._links.measure(site, str(peer), m, now)
            operators = data.get("operators") or {}
            if isinstance(operators, dict):
                for replica, stats in operators.items():
                    self._rate(site, str(replica), stats)
        return True

    def _rate(self, site: str, replica: str, stats: Any) -> None:
        """Smooth a replica's records/s; a zero is only believed after a non-zero rate.

        An agent reports 0 records/s in its first heartbeat after a start (it
        has no previous count yet), which says nothing about the stream.
        """
        if not isinstance(stats, dict):
            return
        value = stats.get("rate_out", stats.get("rate_in"))
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            return
        key = (site, replica)
        current = self._rates.get(key)
        if current is None:
            if value > 0:
                self._rates[key] = float(value)
        else:
            self._rates[key] = self.alpha * float(value) + (1 - self.alpha) * current

    def _reject(self, site: str, reason: str) -> bool:
        with self._lock:
            if site in self._state:
                self._state[site].rejected += 1
        log.warning("ignoring a heartbeat on site %r's topic: %s", site, reason)
        return False

    # -- queries -------------------------------------------------------------------------------

    def alive(self, site: str) -> bool:
        """True if ``site`` sent a heartbeat within the last ``down_after_s`` seconds."""
        with self._lock:
            seen = self._state[site].last_seen if site in self._state else None
        return seen is not None and self._clock() - seen <= self.down_after_s

    def silent(self, site: str) -> bool:
        """True if ``site`` sent heartbeats once but none within the last ``down_after_s`` seconds (cut off or down)."""
        with self._lock:
            seen = self._state[site].last_seen if site in self._state else None
        return seen is not None and self._clock() - seen > self.down_after_s

    def declared_link(self, a: str, b: str) -> tuple[float, float, float, str]:
        """``(latency_ms, bandwidth_mbps, cost, origin)`` that sites.yaml gives from ``a`` to ``b``.

        ``origin`` is ``declared`` (a link), ``path`` (shortest path over links)
        or ``default`` (the file's ``default_link``), as the planner sees it.
        """
        return self._links.declared(a, b)

    def link(self, a: str, b: str) -> dict[str, Any]:
        """The current estimate of the link from ``a`` to ``b``: measured if fresh, else declared."""
        now = self._clock()
        with self._lock:
            m = self._links.measured(a, b)
        return self._links.row(a, b, m, now)

    def matrix(self) -> list[dict[str, Any]]:
        """Every ordered pair of distinct sites with its current estimate and the age of the value."""
        names = list(self.sites.sites)
        return [self.link(a, b) for a in names for b in names if a != b]

    def latency_rows(self) -> list[dict[str, Any]]:
        """The fresh measurements, in the row format of ``LatencyMatrix.with_measurements``."""
        return [
            {
                "src": r["src"],
                "dst": r["dst"],
                "latency_p50_ms": r["latency_ms"],
                "latency_p95_ms": r["p95_ms"],
                "measured_at": r["measured_at"],
            }
            for r in self.matrix()
            if r["source"] == "measured"
        ]

    def stream_rate(self, stream: str, site: str) -> float | None:
        """The smoothed measured rate of ``stream`` at ``site`` while the site is alive, or None."""
        if not self.alive(site):
            return None
        with self._lock:
            return self._rates.get((site, f"{stream}@{site}"))

    def effective_sites(self, streams: Iterable[str] | None = None) -> Sites:
        """The declared sites with each stream's rate replaced by its measured rate where known."""
        wanted = None if streams is None else set(streams)
        updated = {}
        for name, site in self.sites.sites.items():
            bindings = {}
            for stream, binding in site.streams.items():
                rate = self.stream_rate(stream, name) if wanted is None or stream in wanted else None
                bindings[stream] = binding.model_copy(update={"rate": max(rate, 1e-3)}) if rate is not None else binding
            updated[name] = site.model_copy(update={"streams": bindings})
        return self.sites.model_copy(update={"sites": updated})

    def _own_links(self, name: str) -> dict[str, dict[str, Any]]:
        """The links of ``name`` that were measured or that sites.yaml declares.

        Pairs covered only by a path over other links or by ``default_link`` are left
        out: they grow with the square of the fleet, and ``GET /latency`` has them all.
        """
        with self._lock:
            peers = self._links.peers(name)
        rows = (self.link(name, peer) for peer in sorted(peers))
        return {
            row["dst"]: {k: row[k] for k in ("latency_ms", "p95_ms", "source", "age_s")}
            for row in rows
            if row["source"] in ("measured", "declared")
        }

    def status(self) -> list[dict[str, Any]]:
        """Every site's declared facts and live state, for ``GET /sites``."""
        now = self._clock()
        out = []
        for name, site in self.sites.sites.items():
            with self._lock:
                state = self._state[name]
                hb = dict(state.heartbeat)
                seen = state.last_seen
                rejected = state.rejected
            out.append(
                {
                    "site": name,
                    "tier": str(site.tier),
                    "broker": site.mqtt().url,
                    "streams": {s: b.rate for s, b in site.streams.items()},
                    "alive": seen is not None and now - seen <= self.down_after_s,
                    "last_heartbeat_age_s": None if seen is None else round(now - seen, 3),
                    "apps": hb.get("apps", []),
                    "operators": hb.get("operators", {}),
                    "watermark_lag_s": hb.get("watermark_lag_s"),
                    "outbox": hb.get("outbox", {}),
                    "dlq": hb.get("dlq"),
                    "late": hb.get("late"),
                    "overload_dropped": hb.get("overload_dropped"),
                    "cpu_percent": hb.get("cpu_percent"),
                    "rss_bytes": hb.get("rss_bytes"),
                    "clock_offset_ms": hb.get("clock_offset_ms"),
                    "rejected_heartbeats": rejected,
                    "latency": self._own_links(name),
                }
            )
        return out
