"""Link latencies between sites: declared in ``sites.yaml``, measured by the agents' probes.

An agent reports its latest round trip to each peer in every heartbeat; a
link's one-way estimate is half of it, kept per unordered site pair as the
trimmed mean of the reports of the last ``window_s`` seconds
(:class:`LinkWindow`), so a jittering link moves its estimate far less than
one report does. A level shift, :data:`SHIFT_REPORTS` reports in a row from
:data:`SHIFT_PROBES` probes, all far outside what the window saw before,
restarts the window from them, so a lasting change shows in full within a
few probes. A measurement older than ``stale_after_s`` gives way to the
declared value.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from placement.latency import LatencyMatrix
from spanedge.logsafe import escaped
from spanedge.sites import Sites

log = logging.getLogger(__name__)

#: Seconds of reports a link's estimate is made of.
WINDOW_S = 60.0
#: A link's estimate leaves out this fraction of its window's reports at each end (slow probes, lucky ones).
TRIM = 0.1
#: At most this many reports are kept per link, however often sites report.
MAX_REPORTS = 256
#: A level shift takes this many reports in a row, all above or all below what the window saw before...
SHIFT_REPORTS = 3
#: ...made by at least this many probes (an agent repeats its latest probe in each heartbeat until the
#: next, and the two ends of a link probe it apart), so one slow probe, or both ends' at once, is no shift...
SHIFT_PROBES = 3
#: ...by a factor of more than 1 + this, where what it saw spans this many relative
#: interquartile ranges (the link's noise) either side of its median...
SHIFT_RELATIVE = 0.5
SHIFT_SPREADS = 3.0
#: ...and by more than this many milliseconds.
SHIFT_FLOOR_MS = 1.0


def pair(a: str, b: str) -> str:
    """The key of the link between ``a`` and ``b`` in either direction."""
    return "|".join(sorted((a, b)))


def measured_at(ts: float) -> str:
    """When a report came (unix seconds), as the rows of measured links give it (ISO 8601, UTC)."""
    return datetime.fromtimestamp(ts, UTC).isoformat()


@dataclass(frozen=True)
class Estimate:
    """A link's estimate from its window's one-way reports, their spread and the time of the last one.

    Attributes:
        p50_ms: trimmed mean of the reported one-way p50s.
        p95_ms: trimmed mean of the reported one-way p95s.
        spread_ms: the link's noise: the interquartile range of the reported p50s, or, if larger,
            the relative one the window had when it last spanned half its length, times ``p50_ms``.
        reports: how many reports the window holds.
        samples: the probe count of the last report.
        updated_at: when the last report came (seconds).
    """

    p50_ms: float
    p95_ms: float
    spread_ms: float
    reports: int
    samples: int
    updated_at: float

    @cached_property
    def shown(self) -> tuple[float, float, float, str]:
        """``(p50_ms, p95_ms, spread_ms)`` rounded to the microsecond and the time of the last report (ISO 8601, UTC).

        Worked out once: every re-plan lists each fresh link in both directions (:meth:`SiteRegistry.latency_rows`).
        """
        return round(self.p50_ms, 3), round(self.p95_ms, 3), round(self.spread_ms, 3), measured_at(self.updated_at)


@dataclass(frozen=True, slots=True)
class _Report:
    """One report of a link: when, its one-way p50 and p95, and the probe it repeats (end, count, value)."""

    at: float
    p50: float
    p95: float
    probe: tuple[str, int, float]


def _spread(values: list[float]) -> float:
    """The interquartile range of ``values``; 0 for fewer than two."""
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q3 - q1


def _trimmed_mean(values: list[float]) -> float:
    """The mean of ``values`` without the lowest and the highest :data:`TRIM` of them."""
    ordered = sorted(values)
    cut = int(len(ordered) * TRIM)
    return statistics.fmean(ordered[cut : len(ordered) - cut])


class LinkWindow:
    """The one-way reports of one link over the last ``window_s`` seconds, and the estimate they give."""

    def __init__(self, window_s: float) -> None:
        """Keep the reports of the last ``window_s`` seconds."""
        self.window_s = window_s
        self._reports: deque[_Report] = deque(maxlen=MAX_REPORTS)
        self._noise: float | None = None  # the window's relative spread when it last spanned half its length
        self.estimate: Estimate | None = None

    def add(self, p50_ms: float, p95_ms: float, samples: int, now: float, end: str = "") -> bool:
        """Take a report made at ``now`` by ``end``; True if it completed a level shift (the window restarted).

        ``samples`` is the reporting end's probe count: a report with the count and value of the
        end's previous one repeats the same probe.
        """
        self._reports.append(_Report(now, p50_ms, p95_ms, (end, samples, p50_ms)))
        while self._reports[0].at < now - self.window_s:
            self._reports.popleft()
        shifted = self._shift()
        p50s = [r.p50 for r in self._reports]
        mean = _trimmed_mean(p50s)
        self.estimate = Estimate(
            p50_ms=mean,
            p95_ms=_trimmed_mean([r.p95 for r in self._reports]),
            spread_ms=max(_spread(p50s), (self._noise or 0.0) * mean),
            reports=len(p50s),
            samples=samples,
            updated_at=now,
        )
        return shifted

    def _shift(self) -> bool:
        """Drop the reports before the last ones if those all lie far outside them and come from enough probes.

        The last ones are the newest :data:`SHIFT_REPORTS` or more reports, as
        many as it takes to hold :data:`SHIFT_PROBES` probes, all far from
        what came before them. Far is beyond :data:`SHIFT_SPREADS` times the
        link's noise on each side of the median of the reports before them,
        by a factor of 1 + :data:`SHIFT_RELATIVE`, up or down. The median, not
        the range: the two ends of a link report a change one after the
        other, and the first of them would otherwise widen the range the
        next ones are measured against. The noise is the relative
        interquartile range the window had when it last spanned half its
        length, so a window restarted by a shift does not take the next swing
        of the noise for another shift; until a window first spans half its
        length the link's noise is unknown and nothing counts as a shift.
        """
        reports = self._reports
        if reports[-1].at - reports[0].at >= self.window_s / 2:
            p50s = [r.p50 for r in reports]
            median = statistics.median(p50s)
            self._noise = _spread(p50s) / median if median > 0 else 0.0
        if self._noise is None:
            return False
        ordered = list(reports)
        for size in range(SHIFT_REPORTS, len(ordered)):
            before = [r.p50 for r in ordered[:-size]]
            recent = ordered[-size:]
            median = statistics.median(before)
            usual = 1 + SHIFT_SPREADS * max(self._noise, _spread(before) / median if median > 0 else 0.0)
            high = median * usual * (1 + SHIFT_RELATIVE) + SHIFT_FLOOR_MS
            low = median / usual / (1 + SHIFT_RELATIVE) - SHIFT_FLOOR_MS
            if not (all(r.p50 > high for r in recent) or all(r.p50 < low for r in recent)):
                return False
            if len({r.probe for r in recent}) >= SHIFT_PROBES:
                for _ in before:
                    reports.popleft()
                return True
        return False


class Links:
    """The declared links of ``sites`` and the measured estimates (not thread-safe: the registry locks)."""

    def __init__(self, sites: Sites, stale_after_s: float, window_s: float = WINDOW_S) -> None:
        """Estimate each link over ``window_s`` seconds of reports; forget one after ``stale_after_s`` seconds."""
        self.window_s = window_s
        self.stale_after_s = stale_after_s
        self._declared = LatencyMatrix.from_sites(sites)
        self._peers: dict[str, set[str]] = {}
        for link in sites.links:
            a, b = link.between
            self._peers.setdefault(a, set()).add(b)
            self._peers.setdefault(b, set()).add(a)
        self._measured: dict[str, LinkWindow] = {}

    def redeclare(self, sites: Sites) -> None:
        """Take the declared links of ``sites`` (a fleet that gained sites), keeping every measurement."""
        self._declared = LatencyMatrix.from_sites(sites)
        for link in sites.links:
            a, b = link.between
            self._peers.setdefault(a, set()).add(b)
            self._peers.setdefault(b, set()).add(a)

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
            log.warning(
                "site '%s' reported a malformed latency to '%s': %s", escaped(site), escaped(peer), escaped(repr(m))
            )
            return
        if samples <= 0 or rtt < 0:
            return
        key = pair(site, peer)
        self._peers.setdefault(site, set()).add(peer)
        self._peers.setdefault(peer, set()).add(site)
        window = self._measured.get(key)
        if window is None or window.estimate is None or now - window.estimate.updated_at > self.stale_after_s:
            window = self._measured[key] = LinkWindow(self.window_s)
        if window.add(rtt / 2, p95 / 2, samples, now, end=site):
            log.info("link %s: a level shift to %.1f ms; its estimate restarts from it", key.replace("|", "–"), rtt / 2)

    def measured(self, a: str, b: str) -> Estimate | None:
        """The estimate of the link between ``a`` and ``b``, fresh or not."""
        window = self._measured.get(pair(a, b))
        return window.estimate if window is not None else None

    def estimates(self) -> Iterator[tuple[str, Estimate]]:
        """Every link's estimate, fresh or not, by its key (:func:`pair`)."""
        for key, window in self._measured.items():
            if window.estimate is not None:
                yield key, window.estimate

    def declared(self, a: str, b: str) -> tuple[float, float, float, str]:
        """``(latency_ms, bandwidth_mbps, cost, origin)`` that sites.yaml gives from ``a`` to ``b``."""
        info = self._declared.info(a, b)
        return info.latency_ms, info.bandwidth_mbps, info.cost, info.origin

    def row(self, a: str, b: str, m: Estimate | None, now: float) -> dict[str, Any]:
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
            "spread_ms": None,
            "reports": 0,
        }
        if m is not None and now - m.updated_at <= self.stale_after_s:
            row.update(
                latency_ms=round(m.p50_ms, 3),
                p95_ms=round(m.p95_ms, 3),
                source="measured",
                age_s=round(now - m.updated_at, 3),
                samples=m.samples,
                spread_ms=round(m.spread_ms, 3),
                reports=m.reports,
                measured_at=measured_at(m.updated_at),
            )
        return row
