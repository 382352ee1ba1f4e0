"""The coordinator: site registry, latency matrix and (re-)planning of deployed apps.

Heartbeats from the agents feed a :class:`SiteRegistry`: which sites are alive,
their counters, the smoothed one-way latency to their peers (half the probe
round trip, EWMA) and the measured rate of every stream they source. The
:class:`Coordinator` places apps with those measurements (declared
``sites.yaml`` values where nothing fresh was measured), persists them,
distributes their plans and hands them to the Spark engine; it re-plans an app
when a latency or a rate it was planned with drifts beyond a relative
threshold, at most once per minimum interval, and keeps the history of plan
versions with the reason for each.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

from hub.distribution import PlanDistributor, SiteApp, sites_of
from hub.state import AppRecord, HistoryEntry, StateStore
from placement.latency import LatencyMatrix
from spanedge.app import App
from spanedge.errors import InvalidDataflow, SpanEdgeError
from spanedge.loader import load_app_source
from spanedge.operators import Kind
from spanedge.plan import Plan
from spanedge.sites import Sites

log = logging.getLogger(__name__)

#: History entries kept per app.
MAX_HISTORY = 200

#: Baselines every plan is compared with.
BASELINES = ("central", "local-first")


class Engine(Protocol):
    """The part of the Spark engine the coordinator drives."""

    def deploy(self, app: App, plan: Plan) -> Any:
        """Start or replace the hub query of ``app``."""
        ...

    def undeploy(self, name: str) -> Any:
        """Stop the hub query of app ``name``."""
        ...


class Planner(Protocol):
    """Places an app: the signature of :func:`default_planner`."""

    def __call__(
        self,
        app: App,
        sites: Sites,
        *,
        latency_rows: list[dict[str, Any]],
        weights: Mapping[str, float] | None,
        slo_ms: float | None,
        version: int,
    ) -> Plan:
        """Return the plan of ``app``."""
        ...


def default_planner(
    app: App,
    sites: Sites,
    *,
    latency_rows: list[dict[str, Any]],
    weights: Mapping[str, float] | None,
    slo_ms: float | None,
    version: int,
) -> Plan:
    """Solve the placement ILP over the declared links overlaid with the measured ones.

    ``weights`` holds the objective weights by name (``traffic``, ``latency``).
    The plan carries the totals of the central and local-first baselines.
    """
    import placement

    matrix = placement.LatencyMatrix.from_sites(sites).with_measurements(latency_rows, where="heartbeat latencies")
    try:
        w = placement.Weights(**dict(weights)) if weights else placement.Weights()
    except TypeError:
        msg = f"unknown placement weights {sorted(weights or {})}; the weights are 'traffic' and 'latency'"
        raise ValueError(msg) from None
    return placement.solve(app, sites, latency=matrix, weights=w, slo_ms=slo_ms, version=version, baselines=BASELINES)


def load_app(source: str, filename: str, app_name: str | None = None) -> App:
    """Load an app from source; an exception its code raises becomes :class:`InvalidDataflow` naming the line."""
    try:
        return load_app_source(source, filename, app_name)
    except SpanEdgeError:
        raise
    except Exception as exc:
        lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
        where = f"{filename}:{lines[-1]}" if lines else filename
        msg = f"{where}: the app raised {type(exc).__name__} while loading: {exc}"
        raise InvalidDataflow(msg) from None


def _pair(a: str, b: str) -> str:
    return "|".join(sorted((a, b)))


@dataclass
class _Smoothed:
    """An exponentially weighted moving average with the time of its last update."""

    p50_ms: float
    p95_ms: float
    samples: int
    updated_at: float

    def update(self, p50_ms: float, p95_ms: float, samples: int, now: float, alpha: float) -> None:
        self.p50_ms = alpha * p50_ms + (1 - alpha) * self.p50_ms
        self.p95_ms = alpha * p95_ms + (1 - alpha) * self.p95_ms
        self.samples = samples
        self.updated_at = now


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
        self._links: dict[str, _Smoothed] = {}
        self._rates: dict[tuple[str, str], float] = {}
        self._unknown: set[str] = set()
        self._declared = LatencyMatrix.from_sites(sites)

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
                    self._measure(site, str(peer), m, now)
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

    def _measure(self, site: str, peer: str, m: Any, now: float) -> None:
        if peer == site or peer not in self._state or not isinstance(m, dict) or m.get("rtt_ms") is None:
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
        key = _pair(site, peer)
        current = self._links.get(key)
        if current is None or now - current.updated_at > self.stale_after_s:
            self._links[key] = _Smoothed(rtt / 2, p95 / 2, samples, now)
        else:
            current.update(rtt / 2, p95 / 2, samples, now, self.alpha)

    # -- queries -------------------------------------------------------------------------------

    def alive(self, site: str) -> bool:
        """True if ``site`` sent a heartbeat within the last ``down_after_s`` seconds."""
        with self._lock:
            seen = self._state[site].last_seen if site in self._state else None
        return seen is not None and self._clock() - seen <= self.down_after_s

    def declared_link(self, a: str, b: str) -> tuple[float, float, float, str]:
        """``(latency_ms, bandwidth_mbps, cost, origin)`` that sites.yaml gives from ``a`` to ``b``.

        ``origin`` is ``declared`` (a link), ``path`` (shortest path over links)
        or ``default`` (the file's ``default_link``), as the planner sees it.
        """
        info = self._declared.info(a, b)
        return info.latency_ms, info.bandwidth_mbps, info.cost, info.origin

    def link(self, a: str, b: str) -> dict[str, Any]:
        """The current estimate of the link from ``a`` to ``b``: measured if fresh, else declared."""
        latency, bandwidth, cost, origin = self.declared_link(a, b)
        now = self._clock()
        with self._lock:
            m = self._links.get(_pair(a, b))
            m = dataclasses.replace(m) if m is not None else None
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
                    "latency": {
                        peer: {k: row[k] for k in ("latency_ms", "p95_ms", "source", "age_s")}
                        for peer in self.sites.sites
                        if peer != name
                        for row in (self.link(name, peer),)
                    },
                }
            )
        return out


def _drift(old: float, new: float, floor: float) -> float:
    return abs(new - old) / max(abs(old), floor)


def source_streams(app: App) -> set[str]:
    """Names of the streams ``app`` reads."""
    return {op.stream or op.name for op in app.operators.values() if op.kind is Kind.SOURCE}


class Coordinator:
    """Deploys, re-plans and removes apps; the REST API's backend.

    Deploying an app loads its source, places it with the current latency
    matrix and rates, starts its hub part on the engine (which also validates
    it), persists it and publishes the plan to the affected sites. All of that
    happens under one lock, so concurrent deploys and re-plans never interleave.
    """

    def __init__(
        self,
        registry: SiteRegistry,
        *,
        planner: Planner = default_planner,
        distributor: PlanDistributor | None = None,
        engine: Engine | None = None,
        store: StateStore | None = None,
        drift_threshold: float = 0.5,
        min_replan_interval_s: float = 60.0,
        latency_floor_ms: float = 5.0,
        rate_floor: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Wire the coordinator.

        Args:
            registry: live site state.
            planner: places an app (tests pass a fake).
            distributor: publishes plans to the sites (None: not distributed).
            engine: runs hub-placed operators (None: control plane only).
            store: persists deployed apps (None: in memory only).
            drift_threshold: relative change of a latency or rate that triggers a re-plan.
            min_replan_interval_s: an app is re-planned at most this often.
            latency_floor_ms: changes are relative to at least this latency, so 1→2 ms is no drift.
            rate_floor: changes are relative to at least this many records/s.
            clock: the time source (seconds).
        """
        if drift_threshold <= 0:
            msg = f"drift threshold must be positive, got {drift_threshold}"
            raise ValueError(msg)
        self.registry = registry
        self.planner = planner
        self.distributor = distributor
        self.engine = engine
        self.store = store
        self.drift_threshold = drift_threshold
        self.min_replan_interval_s = min_replan_interval_s
        self.latency_floor_ms = latency_floor_ms
        self.rate_floor = rate_floor
        self._clock = clock
        self._lock = threading.RLock()
        self._records: dict[str, AppRecord] = {}
        self._apps: dict[str, App] = {}
        self._attempts: dict[str, float] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    def resume(self) -> list[str]:
        """Load the persisted apps, republish their plans and restart their hub parts.

        Returns:
            The names of the resumed apps. An app whose source no longer loads
            is skipped with a logged reason.
        """
        if self.store is None:
            return []
        with self._lock:
            for record in self.store.load_apps():
                try:
                    app = load_app(record.source, record.filename, record.app_name)
                except SpanEdgeError as exc:
                    log.error("cannot resume app %r: %s", record.name, exc)
                    continue
                self._records[record.name] = record
                self._apps[record.name] = app
            sites = set().union(*(sites_of(r.plan) for r in self._records.values()))
            self._distribute(sites)
            if self.engine is not None:
                for name, record in self._records.items():
                    try:
                        self.engine.deploy(self._apps[name], record.plan)
                    except Exception:
                        log.exception("cannot restart the hub part of app %r; redeploy it", name)
            names = sorted(self._records)
        if names:
            log.info("resumed apps: %s", ", ".join(names))
        return names

    # -- deploy / delete -----------------------------------------------------------------------

    def _basis(self, app: App) -> dict[str, Any]:
        names = list(self.registry.sites.sites)
        latency = {
            _pair(a, b): self.registry.link(a, b)["latency_ms"] for i, a in enumerate(names) for b in names[i + 1 :]
        }
        sites = self.registry.effective_sites(source_streams(app))
        rates = {f"{s}@{site.name}": b.rate for site in sites.sites.values() for s, b in site.streams.items()}
        return {"latency": latency, "rates": rates}

    def _plan(self, app: App, record: AppRecord | None, *, source: str, filename: str, **options: Any) -> Plan:
        version = record.plan.version + 1 if record is not None else 1
        sites = self.registry.effective_sites(source_streams(app))
        # the checks the planner makes, in its order, whatever planner is plugged in
        sites.check_app_streams(source_streams(app), app.name)
        app.graph()
        plan = self.planner(
            app,
            sites,
            latency_rows=self.registry.latency_rows(),
            weights=options.get("weights"),
            slo_ms=options.get("slo_ms"),
            version=version,
        )
        updates: dict[str, Any] = {}
        if plan.version != version:
            updates["version"] = version
        if not plan.app_source:
            updates["app_source"] = source
        if not plan.app_file:
            updates["app_file"] = filename
        return dataclasses.replace(plan, **updates) if updates else plan

    def deploy(
        self,
        source: str,
        filename: str = "app.py",
        *,
        app_name: str | None = None,
        slo_ms: float | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> tuple[AppRecord, dict[str, str]]:
        """Deploy (or redeploy) the app defined by ``source``.

        Returns:
            The app's record and the distribution status per site.

        Raises:
            InvalidDataflow, InvalidSites, InfeasiblePlacement: the app cannot be
                deployed; the message is the one the CLI prints.
        """
        app = load_app(source, filename, app_name)
        with self._lock:
            old = self._records.get(app.name)
            plan = self._plan(app, old, source=source, filename=filename, slo_ms=slo_ms, weights=weights)
            now = self._clock()
            if old is None:
                reason = "deployed"
            elif old.source != source:
                reason = "redeployed with new source"
            else:
                reason = "redeployed"
            history = [*old.history] if old is not None else []
            history.append(HistoryEntry(plan.version, now, reason, dataclasses.asdict(plan.totals)))
            record = AppRecord(
                name=app.name,
                source=source,
                filename=filename,
                plan=plan,
                app_name=app_name,
                slo_ms=slo_ms,
                weights=dict(weights) if weights else None,
                deployed_at=now,
                history=history[-MAX_HISTORY:],
                basis=self._basis(app),
            )
            if self.engine is not None:
                # first, so an app the engine rejects is neither persisted nor sent to the sites
                self.engine.deploy(app, plan)
            self._records[app.name] = record
            self._apps[app.name] = app
            if self.store is not None:
                self.store.save_app(record)
            affected = sites_of(plan) | (sites_of(old.plan) if old is not None else set())
            status = self._distribute(affected)
        log.info("app %r %s: plan v%d", app.name, reason, plan.version)
        return record, status

    def delete(self, name: str) -> dict[str, str]:
        """Remove app ``name`` from the engine, the store and the sites' plans.

        Raises:
            KeyError: no app of that name is deployed.
        """
        with self._lock:
            record = self._records.pop(name)
            self._apps.pop(name, None)
            self._attempts.pop(name, None)
            if self.engine is not None:
                self.engine.undeploy(name)
            if self.store is not None:
                self.store.delete_app(name)
            status = self._distribute(sites_of(record.plan))
        log.info("app %r deleted", name)
        return status

    def _distribute(self, sites: Iterable[str]) -> dict[str, str]:
        if self.distributor is None:
            return {}
        apps = {name: SiteApp(r.plan, r.source) for name, r in self._records.items()}
        return self.distributor.publish(apps, sites)

    # -- queries -------------------------------------------------------------------------------

    @property
    def app_count(self) -> int:
        """How many apps are deployed; never waits for a deploy in progress."""
        return len(self._records)

    def records(self) -> list[AppRecord]:
        """Deployed apps, by name."""
        with self._lock:
            return [self._records[n] for n in sorted(self._records)]

    def record(self, name: str) -> AppRecord:
        """The record of app ``name``; raise ``KeyError`` if it is not deployed."""
        with self._lock:
            return self._records[name]

    # -- drift ---------------------------------------------------------------------------------

    def drift(self, name: str) -> list[str]:
        """What moved beyond the threshold since app ``name`` was last planned, for people."""
        with self._lock:
            record, app = self._records[name], self._apps[name]
        now = self._basis(app)
        reasons = []
        for key, new in now["latency"].items():
            old = record.basis.get("latency", {}).get(key)
            if old is not None and _drift(old, new, self.latency_floor_ms) > self.drift_threshold:
                a, b = key.split("|")
                reasons.append(f"latency {a}–{b} {old:.1f}→{new:.1f} ms ({(new - old) / max(old, 1e-9):+.0%})")
        for key, new in now["rates"].items():
            old = record.basis.get("rates", {}).get(key)
            if old is not None and _drift(old, new, self.rate_floor) > self.drift_threshold:
                reasons.append(f"rate of {key} {old:.1f}→{new:.1f} rec/s ({(new - old) / max(old, 1e-9):+.0%})")
        return reasons

    def check_drift(self) -> list[str]:
        """Re-plan every app whose inputs drifted and whose last plan is old enough.

        Returns:
            The names of the apps re-planned.
        """
        replanned = []
        for record in self.records():
            last = max(
                record.history[-1].at if record.history else record.deployed_at, self._attempts.get(record.name, 0)
            )
            if self._clock() - last < self.min_replan_interval_s:
                continue
            reasons = self.drift(record.name)
            if reasons:
                try:
                    self.replan(record.name, "; ".join(reasons))
                except Exception:
                    log.exception("re-planning app %r failed; it keeps its current plan", record.name)
                    continue
                replanned.append(record.name)
        return replanned

    def replan(self, name: str, reason: str) -> AppRecord:
        """Place app ``name`` again with the current measurements; publish if the placement changed.

        The history records every re-plan with its reason and the new totals;
        only a changed placement becomes a new plan version.
        """
        with self._lock:
            self._attempts[name] = self._clock()
            old, app = self._records[name], self._apps[name]
            plan = self._plan(
                app, old, source=old.source, filename=old.filename, slo_ms=old.slo_ms, weights=old.weights
            )
            changed = {(a.replica, a.site) for a in plan.assignments} != {
                (a.replica, a.site) for a in old.plan.assignments
            }
            totals = dataclasses.asdict(plan.totals)
            if changed:
                if self.engine is not None:
                    self.engine.deploy(app, plan)
            else:
                plan = old.plan
                reason += "; placement unchanged"
            entry = HistoryEntry(plan.version, self._clock(), reason, totals, changed)
            record = dataclasses.replace(
                old, plan=plan, history=[*old.history, entry][-MAX_HISTORY:], basis=self._basis(app)
            )
            self._records[name] = record
            if self.store is not None:
                self.store.save_app(record)
            if changed:
                self._distribute(sites_of(plan) | sites_of(old.plan))
        log.info("app %r re-planned (%s): v%d", name, reason, plan.version)
        return record
