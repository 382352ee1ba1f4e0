"""The site registry: which sites are alive, what they report, and the links between them.

Heartbeats from the agents feed a :class:`SiteRegistry`: their counters,
the one-way latency to their peers (a trimmed mean over a window of
reports, :mod:`hub.control.links`) and the smoothed rate of every stream they
source. The coordinator places apps with those measurements (declared
``sites.yaml`` values where nothing fresh was measured); ``GET /sites`` and
``GET /latency`` show them. A site added with ``spanedge site add`` whose agent
has not been heard yet is ``joining``: the placement leaves it out
(:func:`hub.control.planning.planned_sites`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from hub.control.links import WINDOW_S, Links
from placement.latency import LatencyMatrix
from spanedge.keyrange import KEY_BUCKETS
from spanedge.logsafe import escaped
from spanedge.plan import Plan
from spanedge.sites import Site, Sites
from spanedge.wire.heartbeat import Heartbeat
from spanedge.wire.heartbeat import decode as decode_heartbeat

log = logging.getLogger(__name__)


@dataclass
class _SiteState:
    last_seen: float | None = None
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    rejected: int = 0
    revision: int = 0  # counts the changes of what ``status`` shows from the heartbeat


def _listed(problems: list[str]) -> str:
    """``problems`` on one line, escaped: they name the fields a heartbeat sent."""
    return escaped("; ".join(problems))


def _with_rates(site: Site, rates: Mapping[str, float | None]) -> Site:
    """``site`` with the measured ``rates`` of its streams (None: not measured); a copy only if one changes.

    A copy runs the checks of ``sites.yaml`` again, so a fleet whose rates are as declared is not copied site by site.
    """
    bindings = dict(site.streams)
    for stream, rate in rates.items():
        if rate is not None and max(rate, 1e-3) != bindings[stream].rate:
            bindings[stream] = bindings[stream].replace(rate=max(rate, 1e-3))
    return site if bindings == site.streams else site.replace(streams=bindings)


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
        latency_window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Track ``sites``.

        Args:
            sites: the declared sites.
            down_after_s: a site is down after this many seconds without a heartbeat.
            alpha: EWMA weight of a new stream rate measurement (0 < alpha <= 1).
            stale_after_s: measurements older than this fall back to declared values.
            latency_window_s: a link's latency is a trimmed mean of the reports of this many seconds
                (:class:`hub.control.links.LinkWindow`).
            clock: the time source (seconds).
        """
        _check_options(alpha, latency_window_s)
        self.sites = sites
        self.down_after_s = down_after_s
        self.alpha = alpha
        self.stale_after_s = stale_after_s
        self.latency_window_s = latency_window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, _SiteState] = {name: _SiteState() for name in sites.sites}
        self._links = Links(sites, stale_after_s, latency_window_s)
        self._rates: dict[tuple[str, str], float] = {}
        self._unknown: set[str] = set()
        self.revoked: set[str] = set()  # sites revoked (spanedge site revoke): the coordinator refuses their heartbeats
        self.joining: set[str] = set()  # sites added (spanedge site add) and not heard yet: planned nowhere
        self._rows: dict[str, tuple[int, dict[str, Any]]] = {}  # per site: revision, status row without live fields
        self._declared_links: dict[tuple[str, str], tuple[float, float, float, str]] = {}
        self._declared = _Declared(sites)

    # -- the fleet -----------------------------------------------------------------------------

    def grow(self, sites: Sites) -> None:
        """Track ``sites``, the fleet with sites added (``spanedge site add``); what is known of the others stays."""
        declared = _Declared(sites)
        with self._lock:
            self._state.update({name: _SiteState() for name in sites.sites if name not in self._state})
            self._links.redeclare(sites)
            self.sites, self._declared = sites, declared

    # -- input ---------------------------------------------------------------------------------

    def heartbeat(self, site: str, payload: bytes | Mapping[str, Any]) -> bool:
        """Record a heartbeat (:mod:`spanedge.wire.heartbeat`) that arrived on ``site``'s heartbeat topic.

        Returns:
            True if it was recorded; malformed or misaddressed heartbeats are
            logged with the reason and ignored, and a report field of the wrong
            type is logged and left out.
        """
        try:
            beat, dropped = decode_heartbeat(payload)
        except ValueError as exc:
            return self._reject(site, str(exc))
        if beat.site not in (None, site):
            return self._reject(site, f"its 'site' field says {beat.site!r}")
        if site not in self._state:
            if site not in self._unknown:
                self._unknown.add(site)
                log.warning("heartbeat from site '%s', which sites.yaml does not define; ignoring it", escaped(site))
            return False
        if dropped:
            log.warning("heartbeat of site %r: ignoring fields of the wrong type: %s", site, _listed(dropped))
        now = self._clock()
        with self._lock:
            state = self._state[site]
            state.last_seen = now
            state.heartbeat = beat
            state.revision += 1
            for peer, m in beat.latency.items():
                if peer != site and peer in self._state:
                    self._links.measure(site, peer, m, now)
            for replica, stats in beat.operators.items():
                rate = _smoothed(
                    self._rates.get((site, replica)), stats.get("rate_out", stats.get("rate_in")), self.alpha
                )
                if rate is not None:
                    self._rates[site, replica] = rate
        return True

    def last_heartbeat(self, site: str) -> Heartbeat | None:
        """The last heartbeat recorded from ``site`` (None: none yet, or an unknown site)."""
        with self._lock:
            state = self._state.get(site)
            return None if state is None or state.last_seen is None else state.heartbeat

    def _reject(self, site: str, reason: str) -> bool:
        with self._lock:
            if site in self._state:
                self._state[site].rejected += 1
                self._state[site].revision += 1
        log.warning("ignoring a heartbeat on site '%s''s topic: %s", escaped(site), escaped(reason))
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
        """The fresh measurements, in the row format of ``LatencyMatrix.with_measurements``.

        Only the pairs a site measured are visited, not the whole matrix. Each
        row also has ``latency_spread_ms``, the interquartile range of the
        link's reports (:func:`hub.control.planning.noise_hysteresis` reads it).
        """
        order = {name: i for i, name in enumerate(self.sites.sites)}
        now = self._clock()
        rows = []
        for a in self.sites.sites:
            with self._lock:
                peers = sorted(self._links.peers(a), key=lambda p: order.get(p, len(order)))
                measured = [(b, self._links.measured(a, b)) for b in peers if b != a]
            for b, m in measured:
                if m is None or now - m.updated_at > self.stale_after_s:
                    continue
                p50, p95, spread, at = m.shown
                rows.append(
                    {
                        "src": a,
                        "dst": b,
                        "latency_p50_ms": p50,
                        "latency_p95_ms": p95,
                        "latency_spread_ms": spread,
                        "measured_at": at,
                    }
                )
        return rows

    def measured_latencies(self) -> dict[str, float]:
        """The fresh one-way latency of each pair agents measure (key ``hub.control.links.pair``), a few of n(n-1)/2."""
        now = self._clock()
        known = self.sites.sites
        with self._lock:
            estimates = list(self._links.estimates())
        latencies: dict[str, float] = {}
        for key, m in estimates:
            # a known site's name has no "|" (spanedge.names), so a key of two known sites splits at its first
            a, _, b = key.partition("|")
            if a in known and b in known and now - m.updated_at <= self.stale_after_s:
                latencies[key] = m.shown[0]
        return latencies

    def declared_latency(self, key: str) -> float | None:
        """The declared one-way latency of pair ``key`` (``hub.control.links.pair``); None for an unknown site."""
        return self._declared.latency(key)

    def state_bytes(self, app: str, plan: Plan) -> dict[str, float]:
        """The bytes of state each replica of ``plan`` holds where the plan runs it, as that site last reported.

        Agents report the size of each window replica's snapshot in their
        heartbeats (``state_bytes``, per app); replicas without a report are left out.
        """
        with self._lock:
            reports = {name: s.heartbeat.state_bytes.get(app, {}) for name, s in self._state.items()}
        out: dict[str, float] = {}
        for a in plan.assignments:
            n = reports.get(a.site, {}).get(a.replica)
            if n is not None:
                out[a.replica] = float(n)
        return out

    def key_spread(self, app: str, plan: Plan) -> dict[str, dict[int, float]]:
        """How the records of each window replica of ``plan`` spread over its keys, as the sites last reported.

        Agents report each window replica's recent records by bucket of the
        key hash space (``key_spread``, per app:
        :class:`edge_agent.heartbeat.KeySpread`); the reports of every site
        running a share of a replica are summed. Malformed entries are skipped.
        """
        replicas = {a.replica for a in plan.assignments}
        with self._lock:
            reports = [s.heartbeat.key_spread.get(app, {}) for s in self._state.values()]
        out: dict[str, dict[int, float]] = {}
        for report in reports:
            for replica, spread in report.items():
                if replica not in replicas:
                    continue
                summed = out.setdefault(replica, {})
                for bucket, n in spread.items():
                    b = int(bucket) if bucket.isdigit() else -1
                    if 0 <= b < KEY_BUCKETS:
                        summed[b] = summed.get(b, 0.0) + n
        return {replica: spread for replica, spread in out.items() if spread}

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
            rates = {s: self.stream_rate(s, name) for s in site.streams if wanted is None or s in wanted}
            updated[name] = _with_rates(site, rates)
        return self.sites.replace(sites=updated)

    def _own_links(self, name: str, now: float) -> dict[str, dict[str, Any]]:
        """The links of ``name`` that were measured or that sites.yaml declares, as :meth:`link` gives them.

        Pairs covered only by a path over other links or by ``default_link`` are left
        out: they grow with the square of the fleet, and ``GET /latency`` has them all.
        """
        with self._lock:
            measured = [(peer, self._links.measured(name, peer)) for peer in sorted(self._links.peers(name))]
        out: dict[str, dict[str, Any]] = {}
        for peer, m in measured:
            if m is not None and now - m.updated_at <= self.stale_after_s:
                p50, p95, age = round(m.p50_ms, 3), round(m.p95_ms, 3), round(now - m.updated_at, 3)
                out[peer] = {"latency_ms": p50, "p95_ms": p95, "source": "measured", "age_s": age}
                continue
            declared = self._declared_links.get((name, peer))
            if declared is None:
                declared = self._declared_links[name, peer] = self._links.declared(name, peer)
            latency, _, _, origin = declared
            if origin == "declared":
                out[peer] = {"latency_ms": latency, "p95_ms": latency, "source": origin, "age_s": None}
        return out

    def status(self) -> list[dict[str, Any]]:
        """Every site's declared facts and live state, for ``GET /sites``."""
        return [row for _, row in self.status_revisions()]

    def status_revisions(self) -> list[tuple[int, dict[str, Any]]]:
        """The rows of :meth:`status`, each with its site's revision.

        The revision changes whenever a row's fields other than ``alive``,
        ``last_heartbeat_age_s`` and ``latency`` (which follow the clock) may
        have changed, so a reader can keep what it derives from the rest.
        """
        now = self._clock()
        out = []
        for name in self.sites.sites:
            with self._lock:
                state = self._state[name]
                seen, revision = state.last_seen, state.revision
                cached = self._rows.get(name)
                if cached is None or cached[0] != revision:
                    cached = (revision, _row(self.sites.sites[name], state))
                    self._rows[name] = cached
            row = dict(cached[1])
            row["alive"] = seen is not None and now - seen <= self.down_after_s
            row["revoked"] = name in self.revoked
            row["joining"] = name in self.joining and name not in self.revoked
            row["last_heartbeat_age_s"] = None if seen is None else round(now - seen, 3)
            row["latency"] = self._own_links(name, now)
            out.append((revision, row))
        return out


def _check_options(alpha: float, latency_window_s: float) -> None:
    """Refuse a rate smoothing ``alpha`` outside (0, 1] and a latency window that is not a positive duration."""
    if not 0 < alpha <= 1:
        msg = f"rate smoothing alpha must be in (0, 1], got {alpha}"
        raise ValueError(msg)
    if not latency_window_s > 0:
        msg = f"latency window must be a positive number of seconds, got {latency_window_s!r}"
        raise ValueError(msg)


class _Declared:
    """The declared one-way latency of a pair of sites, looked up when asked (a fleet has too many pairs to list)."""

    def __init__(self, sites: Sites) -> None:
        self._order = {name: i for i, name in enumerate(sites.sites)}
        self._matrix = LatencyMatrix.from_sites(sites)

    def latency(self, key: str) -> float | None:
        """The latency of pair ``key`` from the site declared first to the other, as the planner reads it."""
        a, _, b = key.partition("|")
        if a not in self._order or b not in self._order:
            return None
        first, second = (a, b) if self._order[a] < self._order[b] else (b, a)
        return self._matrix.latency(first, second)


def _smoothed(current: float | None, value: float | None, alpha: float) -> float | None:
    """A replica's smoothed records/s after a report of ``value``; a zero is only believed after a non-zero rate.

    An agent reports 0 records/s in its first heartbeat after a start (it
    has no previous count yet), which says nothing about the stream.
    """
    if value is None or value < 0:
        return current
    if current is None:
        return float(value) if value > 0 else None
    return alpha * float(value) + (1 - alpha) * current


def _row(site: Site, state: _SiteState) -> dict[str, Any]:
    """``site``'s status row from its declaration and last heartbeat, the live fields left ``None``."""
    hb = state.heartbeat
    return {
        "site": site.name,
        "tier": str(site.tier),
        "broker": site.mqtt().url,
        "labels": dict(site.labels),
        "revoked": None,
        "joining": None,
        "streams": {s: b.rate for s, b in site.streams.items()},
        "alive": None,
        "last_heartbeat_age_s": None,
        "apps": hb.apps,
        "operators": hb.operators,
        "watermark_lag_s": hb.watermark_lag_s,
        "outbox": hb.outbox,
        "dlq": hb.dlq,
        "late": hb.late,
        "overload_dropped": hb.overload_dropped,
        "cpu_percent": hb.cpu_percent,
        "rss_bytes": hb.rss_bytes,
        "clock_offset_ms": hb.clock_offset_ms,
        "plan_expired": hb.plan_expired,
        "result_latency": hb.result_latency,
        "connectors": hb.connectors,
        "counters": hb.counters,
        "rejected_heartbeats": state.rejected,
        "latency": None,
    }


def shared_entry(sites: Sites, name: str) -> dict[str, Any] | None:
    """The ``sites.yaml`` entry of site ``name`` without the hub's own credentials and files (None: unknown)."""
    site = sites.sites.get(name)
    if site is None:
        return None
    data: dict[str, Any] = msgspec.to_builtins(site)
    for private in ("name", "tls", "username", "password_env", "devices"):
        data.pop(private, None)
    return data


def measured_links(registry: SiteRegistry) -> list[dict[str, Any]]:
    """The pairs a site measured, as :meth:`SiteRegistry.matrix` gives them (a stale one shows its declared value).

    Only the measured pairs are visited: a fleet of 1,000 sites has about a million pairs, a few thousand measured.
    """
    now = registry._clock()
    rows: list[dict[str, Any]] = []
    for a in registry.sites.sites:
        with registry._lock:
            measured = [(b, registry._links.measured(a, b)) for b in sorted(registry._links.peers(a)) if b != a]
        rows.extend(registry._links.row(a, b, m, now) for b, m in measured if m is not None)
    return rows
