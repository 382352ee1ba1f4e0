"""What the dashboard shows: one JSON-ready snapshot of the running system.

:func:`build_snapshot` reads it from the coordinator (deployed apps, their
plans and history), its site registry (heartbeats, latency matrix) and the
ingest and engine counters when those run. Every part is optional: a field
nobody reports is ``None``, a part whose reader fails is left empty and its
error listed under ``hub.errors``, so the page keeps updating the rest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from hub.api.dashboard.models_panel import ModelPanel, model_panels
from hub.api.rollout_routes import rollout_view
from hub.control.registry import measured_links
from spanedge.history import fold, quiet, summary
from spanedge.numbers import number

if TYPE_CHECKING:
    from hub.api.previews.store import PreviewStore
    from hub.models.service import ModelService

log = logging.getLogger(__name__)

MATRIX_SITES = 20
"""Up to this many sites the snapshot carries every pair's latency (the page's matrix); above, the measured pairs."""
PREVIEWS_SHOWN = 5
"""The most previews of an app the snapshot carries (the newest); ``GET /apps/{name}/previews`` lists every one kept."""

StatsSource = Callable[[], Mapping[str, Any]]
"""A callable that reports numbers: ``Engine.metrics`` or ``Ingest.stats``."""


class ReplicaView(TypedDict):
    """One replica of an operator and the site it runs at."""

    replica: str
    site: str


class OperatorView(TypedDict):
    """One operator of an app's DAG.

    ``kind`` is the operator's kind (``source``, ``map``, ``window``, ...) when the
    coordinator can tell, else ``source``, ``sink`` or ``operator`` from the plan's
    flows. ``in_rate`` and ``out_rate`` are records/s summed over the replicas whose
    site reported them in its last heartbeat, plus, for replicas at the hub, what
    the Spark queries counted in their last micro-batch (``Engine.metrics()``
    ``operators``); ``None`` when nothing reported them.
    """

    name: str
    kind: str
    replicas: list[ReplicaView]
    in_rate: float | None
    out_rate: float | None


MoveView = TypedDict(
    "MoveView",
    {
        "replica": str,
        "from": str,
        "to": str,
        "keys": str | None,
        "switch_at": float | None,
        "state_bytes": float | None,
        "handover_s": float | None,
        "at_risk_from": float | None,
        "recover_by": float | None,
        "back_at": float | None,
        "recovered_by": str | None,
    },
)
"""A replica (or a key range of one) whose site changed with a plan version: the handover's switch time,
the state the replica held at its old site, how long after the re-plan the old site had handed it over, and,
from a site gone for good, what it may have lost (:func:`hub.control.plan_history.at_risk`) and when it came back,
or which site recomputed it."""


class BaselineView(TypedDict):
    """A baseline's scores; an infeasible one (``feasible`` false) breaks the ``violations`` and is no comparison."""

    objective: float | None
    wan_bytes_per_s: float | None
    worst_latency_ms: float | None
    feasible: bool
    violations: list[str]


class HistoryView(TypedDict):
    """One plan version of an app: why it was made, what moved, its objective against the baselines.

    ``moved`` lists the replicas whose site changed from the previous version.
    ``baselines`` maps a baseline's name (``central``, ``local-first``) to its
    scores, as the entry recorded them; for an entry stored without them, the
    current plan's for the current version, else empty. A run of re-plans
    that left the placement unchanged is one row: ``count`` of them, from
    ``at`` to ``until``, with the last one's scores (``count`` is 1 and
    ``until`` ``None`` for any other row).
    """

    version: int
    at: float | None
    until: float | None
    count: int
    reason: str
    changed: bool
    moved: list[MoveView]
    objective: float | None
    baselines: dict[str, BaselineView]


class ResultLatencyView(TypedDict):
    """One sink's end-to-end result latency at one site over the last minute (:mod:`spanedge.result_latency`).

    From event time to written, in ms: the hub's sinks as its Spark queries
    report them, a spoke's local sinks from its last heartbeat. ``results``
    is how many results the percentiles cover; ``stale_s`` is ``None`` while
    the figures are live, else their age (the site is down and this is what
    its last heartbeat said).
    """

    sink: str
    site: str
    p50_ms: float | None
    p95_ms: float | None
    results: int | None
    stale_s: float | None


class AppView(TypedDict):
    """A deployed app: its current plan as an operator DAG, its sinks' result latency and its plan history (oldest first)."""

    app: str
    version: int
    operators: list[OperatorView]
    edges: list[list[str]]
    results: list[ResultLatencyView]
    history: list[HistoryView]
    rollout: dict[str, Any] | None
    """The app's staged rollout, in progress or its last one, as ``GET /apps/{name}/rollout`` answers (None: never one)."""
    models: list[ModelPanel]
    """Each model the app declares: its newest versions and what each site scores with (:mod:`.models_panel`)."""
    previews: list[dict[str, Any]]
    """The app's newest live previews (:data:`PREVIEWS_SHOWN`), as ``GET /apps/{name}/previews`` lists them."""


class SiteView(TypedDict):
    """A site's live state from its last heartbeat.

    ``alive`` is ``None`` for a hub-tier site that never sent a heartbeat (no
    agent runs there; the hub itself is up). ``cpu`` is the agent's CPU in
    percent of one core; ``dead_lettered`` and ``late`` are counts since the
    agent started. ``plan_expired`` says the site runs a plan past its expiry. ``connectors_down`` names
    each connector stream or sink of the site's agent whose server does not answer, with its last error.
    ``stale_s`` is ``None`` while the site is up; for a site that is down, the
    age of its figures, which are then its last heartbeat's, not live ones.
    """

    site: str
    tier: str
    labels: dict[str, str]
    alive: bool | None
    last_heartbeat_age_s: float | None
    stale_s: float | None
    cpu: float | None
    rss_bytes: int | None
    outbox_records: int | None
    watermark_lag_s: float | None
    dead_lettered: int | None
    late: int | None
    plan_expired: bool
    connectors_down: list[dict[str, str]]


class LinkView(TypedDict):
    """The one-way latency of an ordered site pair: measured (if fresh) and declared, and the measurement's age."""

    src: str
    dst: str
    measured_ms: float | None
    declared_ms: float | None
    age_s: float | None


class QueryView(TypedDict):
    """One Spark Structured Streaming query of the hub (``<app>/<sink replica>``)."""

    name: str
    active: bool
    batch_duration_ms: float | None
    restarts: int
    input_rows_per_s: float | None
    error: str | None


class HubView(TypedDict):
    """The hub's own parts: its Spark queries, the ingest and the readers that failed."""

    queries: list[QueryView]
    ingest_lag_s: float | None
    ingest_connected: bool | None
    ingest_records: int | None
    errors: list[str]


class Snapshot(TypedDict):
    """Everything the dashboard shows, as pushed on ``/dashboard/events``; ``generated_at`` is epoch seconds.

    ``links`` holds every ordered pair of sites up to :data:`MATRIX_SITES` sites (``links_scope`` ``all``), and
    only the measured pairs above (``measured``): the whole matrix of 1,000 sites would be a million rows a second.
    """

    generated_at: float
    apps: list[AppView]
    sites: list[SiteView]
    links: list[LinkView]
    links_scope: str
    hub: HubView


class CoordinatorLike(Protocol):
    """What the snapshot reads from :class:`hub.control.coordinator.Coordinator`: its records and site registry."""

    registry: Any

    def records(self) -> list[Any]:
        """Deployed app records, by name."""
        ...


def build_snapshot(
    coordinator: CoordinatorLike,
    engine_metrics: StatsSource | None = None,
    ingest_stats: StatsSource | None = None,
    models: ModelService | None = None,
    previews: PreviewStore | None = None,
) -> Snapshot:
    """Read the dashboard's snapshot from the hub.

    Args:
        coordinator: the hub's coordinator (deployed apps and the site registry).
        engine_metrics: ``Engine.metrics`` when the Spark engine runs.
        ingest_stats: ``Ingest.stats`` when the MQTT ingest runs.
        models: the hub's model service (the apps' model versions and drift reports).
        previews: the live previews the hub keeps.

    Returns:
        The snapshot; see :class:`Snapshot` for its shape.
    """
    errors: list[str] = []
    status: list[dict[str, Any]] = _read("site status", coordinator.registry.status, errors) or []
    whole = len(status) <= MATRIX_SITES
    registry = coordinator.registry
    links = registry.matrix if whole else lambda: measured_links(registry)
    matrix: list[dict[str, Any]] = _read("latency matrix", links, errors) or []
    records: list[Any] = _read("deployed apps", coordinator.records, errors) or []
    engine = _read("engine metrics", engine_metrics, errors) if engine_metrics is not None else None
    ingest = _read("ingest stats", ingest_stats, errors) if ingest_stats is not None else None
    apps = []
    for record in records:
        try:
            name = str(_get(record, "name"))
            hub_figures, hub_queries = _hub_figures(engine, name), _hub_queries(engine, name)
            view = app_view(record, status, getattr(coordinator, "app", None), hub_figures, hub_queries)
            view["rollout"] = _rollout(coordinator, name)
            view["models"] = model_panels(models, name)
            view["previews"] = previews.latest(name, PREVIEWS_SHOWN) if previews is not None else []
            apps.append(view)
        except Exception as exc:  # one malformed record must not hide the others
            errors.append(f"app {getattr(record, 'name', '?')}: {exc}")
    return {
        "generated_at": time.time(),
        "apps": apps,
        "sites": [site_view(s) for s in status],
        "links": [link_view(row) for row in matrix],
        "links_scope": "all" if whole else "measured",
        "hub": hub_view(engine, ingest, errors),
    }


def _read(what: str, source: Callable[[], Any] | None, errors: list[str]) -> Any:
    """Call ``source``; on failure note it in ``errors`` and return None."""
    if source is None:
        return None
    try:
        return source()
    except Exception as exc:
        log.debug("dashboard: reading the %s failed", what, exc_info=True)
        errors.append(f"{what}: {type(exc).__name__}: {exc}")
        return None


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Field ``name`` of a dataclass, object or mapping, or ``default``."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _count(value: Any) -> int | None:
    """``value`` as an int if it is a number (:func:`spanedge.numbers.number`), else None."""
    found = number(value)
    return None if found is None else int(found)


# -- apps ----------------------------------------------------------------------------------------


def _operator_edges(assignments: list[Any], flows: list[Any]) -> list[list[str]]:
    """The operator-level edges of a plan's replica flows, each once, in the order the flows give."""
    operator_of = {str(_get(a, "replica")): str(_get(a, "operator")) for a in assignments}
    edges: list[list[str]] = []
    for f in flows:
        src, dst = operator_of.get(str(_get(f, "src"))), operator_of.get(str(_get(f, "dst")))
        if src is not None and dst is not None and src != dst and [src, dst] not in edges:
            edges.append([src, dst])
    return edges


def app_view(
    record: Any,
    status: Iterable[Mapping[str, Any]],
    find_app: Callable[[str], Any] | None = None,
    hub_figures: Mapping[str, Any] | None = None,
    hub_queries: Mapping[str, Any] | None = None,
) -> AppView:
    """The DAG, rates, result latency and plan history of one deployed app.

    Args:
        record: the app's :class:`hub.control.state.AppRecord`.
        status: ``SiteRegistry.status()`` rows (their heartbeats carry per-replica rates).
        find_app: returns the loaded :class:`spanedge.app.App` of a name, if the coordinator offers one;
            it gives the operators' exact kinds.
        hub_figures: the app's ``operators`` in ``Engine.metrics()``: per operator run at the
            hub, its ``{"in_rate", "out_rate"}`` counted by the Spark queries.
        hub_queries: the app's ``queries`` in ``Engine.metrics()`` (their sinks' ``result_latency``).

    Raises:
        ValueError: ``record`` has no name or plan.
    """
    name, plan = _get(record, "name"), _get(record, "plan")
    if name is None or plan is None:
        msg = f"the record {record!r} has no app name or plan"
        raise ValueError(msg)
    name = str(name)
    assignments = list(_get(plan, "assignments", ()) or ())
    flows = list(_get(plan, "flows", ()) or ())
    replicas: dict[str, list[ReplicaView]] = {}
    for a in assignments:
        replicas.setdefault(str(_get(a, "operator")), []).append(
            {"replica": str(_get(a, "replica")), "site": str(_get(a, "site"))}
        )
    edges = _operator_edges(assignments, flows)
    kinds = _kinds(name, find_app)
    rates = _replica_rates(name, status)
    operators: list[OperatorView] = []
    for op, reps in replicas.items():
        measured = [rates[r["replica"]] for r in reps if r["replica"] in rates]
        at_hub = (hub_figures or {}).get(op)
        if isinstance(at_hub, Mapping):
            measured.append((number(at_hub.get("in_rate")), number(at_hub.get("out_rate"))))
        operators.append(
            {
                "name": op,
                "kind": kinds.get(op) or _kind_from_edges(op, edges),
                "replicas": reps,
                "in_rate": _sum(m[0] for m in measured),
                "out_rate": _sum(m[1] for m in measured),
            }
        )
    return {
        "app": name,
        "version": int(_get(plan, "version", 0)),
        "operators": operators,
        "edges": edges,
        "results": _results(name, assignments, status, hub_queries),
        "history": [_history_view(g, plan) for g in fold(list(_get(record, "history", ()) or ()), quiet)],
        "rollout": None,
        "models": [],
        "previews": [],
    }


def _rollout(coordinator: Any, name: str) -> dict[str, Any] | None:
    """App ``name``'s rollout as :func:`hub.api.rollout_routes.rollout_view` shows it, if the coordinator runs rollouts."""
    runner = getattr(coordinator, "rollouts", None)
    record = runner.record(name) if runner is not None else None
    return rollout_view(record) if record is not None else None


def _hub_figures(engine: Mapping[str, Any] | None, app: str) -> Mapping[str, Any] | None:
    """The per-operator figures of ``app``'s hub operators in ``Engine.metrics()``, if any."""
    data = (engine or {}).get(app)
    figures = data.get("operators") if isinstance(data, Mapping) else None
    return figures if isinstance(figures, Mapping) else None


def _hub_queries(engine: Mapping[str, Any] | None, app: str) -> Mapping[str, Any] | None:
    """The per-query figures of ``app`` in ``Engine.metrics()``, if any."""
    data = (engine or {}).get(app)
    queries = data.get("queries") if isinstance(data, Mapping) else None
    return queries if isinstance(queries, Mapping) else None


def _results(
    app: str,
    assignments: list[Any],
    status: Iterable[Mapping[str, Any]],
    hub_queries: Mapping[str, Any] | None,
) -> list[ResultLatencyView]:
    """The result latency of ``app``'s sinks: at the hub from its queries, at the spokes from their heartbeats."""
    placed = {str(_get(a, "replica")): (str(_get(a, "operator")), str(_get(a, "site"))) for a in assignments}
    rows = list(status)
    hub_site = next((str(r.get("site")) for r in rows if r.get("tier") == "hub"), "hub")
    out: list[ResultLatencyView] = []
    for slot, q in (hub_queries or {}).items():
        if isinstance(q, Mapping) and isinstance(q.get("result_latency"), Mapping):
            sink, site = placed.get(str(slot), (str(slot).split("@")[0], hub_site))
            out.append(_result_view(sink, site, q["result_latency"], None))
    for row in rows:
        per_app = row.get("result_latency")
        sinks = per_app.get(app) if isinstance(per_app, Mapping) else None
        if not isinstance(sinks, Mapping):
            continue
        stale = None if row.get("alive") else number(row.get("last_heartbeat_age_s"))
        for sink, figures in sinks.items():
            if isinstance(figures, Mapping):
                out.append(_result_view(str(sink), str(row.get("site")), figures, stale))
    return sorted(out, key=lambda r: (r["sink"], r["site"]))


def _result_view(sink: str, site: str, figures: Mapping[str, Any], stale_s: float | None) -> ResultLatencyView:
    return {
        "sink": sink,
        "site": site,
        "p50_ms": number(figures.get("p50_ms")),
        "p95_ms": number(figures.get("p95_ms")),
        "results": _count(figures.get("results")),
        "stale_s": stale_s,
    }


def _kinds(app: str, find_app: Callable[[str], Any] | None) -> dict[str, str]:
    """Operator name → kind, from the loaded app if ``find_app`` gives it."""
    if find_app is None:
        return {}
    try:
        loaded = find_app(app)
    except Exception:  # e.g. KeyError: the app was removed meanwhile
        return {}
    operators = _get(loaded, "operators", None) or {}
    return {str(n): str(_get(op, "kind", "")) for n, op in operators.items()}


def _kind_from_edges(op: str, edges: list[list[str]]) -> str:
    if not any(dst == op for _, dst in edges):
        return "source"
    if not any(src == op for src, _ in edges):
        return "sink"
    return "operator"


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known), 3) if known else None


def _replica_rates(app: str, status: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float | None, float | None]]:
    """Replica → ``(records/s in, records/s out)`` of ``app`` from the sites' last heartbeats.

    An agent that runs one app names its replicas bare; one that runs several
    prefixes them with ``<app>/``. A site that is down reports nothing.
    """
    out: dict[str, tuple[float | None, float | None]] = {}
    prefix = f"{app}/"
    for site in status:
        if not site.get("alive"):
            continue
        site_apps = site.get("apps") or []
        operators = site.get("operators") or {}
        if not isinstance(operators, Mapping):
            continue
        for key, stats in operators.items():
            if not isinstance(stats, Mapping):
                continue
            if key.startswith(prefix):
                replica = key[len(prefix) :]
            elif "/" not in key and (not site_apps or list(site_apps) == [app]):
                replica = key
            else:
                continue
            out[replica] = (number(stats.get("rate_in")), number(stats.get("rate_out")))
    return out


def _history_view(group: list[Any], plan: Any) -> HistoryView:
    """One row of the plan history: an entry, or a run of unchanged re-plans (:func:`spanedge.history.fold`)."""
    entry = group[-1]
    totals = _get(entry, "totals", None) or {}
    version = int(_get(entry, "version", 0))
    baselines = _get(entry, "baselines", None)
    if not baselines:
        baselines = _get(plan, "baselines", None) if version == _get(plan, "version") else None
    moved = _get(entry, "moved", None)
    return {
        "version": version,
        "at": number(_get(group[0], "at")),
        "until": number(_get(entry, "at")) if len(group) > 1 else None,
        "count": len(group),
        "reason": summary(group),
        "changed": bool(_get(entry, "changed", True)),
        "moved": [_move_view(m) for m in moved if isinstance(m, Mapping)] if isinstance(moved, list | tuple) else [],
        "objective": number(_get(totals, "objective")),
        "baselines": {str(name): _baseline_view(t) for name, t in (baselines or {}).items()},
    }


def _baseline_view(totals: Any) -> BaselineView:
    violations = _get(totals, "violations", None)
    shown = [str(v) for v in violations] if isinstance(violations, list | tuple) else []
    return {
        "objective": number(_get(totals, "objective")),
        "wan_bytes_per_s": number(_get(totals, "wan_bytes_per_s")),
        "worst_latency_ms": number(_get(totals, "worst_latency_ms")),
        "feasible": not shown,
        "violations": shown,
    }


def _move_view(move: Mapping[str, Any]) -> MoveView:
    keys = move.get("keys")
    return {
        "replica": str(move.get("replica", "")),
        "from": str(move.get("from", "")),
        "to": str(move.get("to", "")),
        "keys": str(keys) if keys else None,
        "switch_at": number(move.get("switch_at")),
        "state_bytes": number(move.get("state_bytes")),
        "handover_s": number(move.get("handover_s")),
        "at_risk_from": number(move.get("at_risk_from")),
        "recover_by": number(move.get("recover_by")),
        "back_at": number(move.get("back_at")),
        "recovered_by": str(move["recovered_by"]) if move.get("recovered_by") else None,
    }


# -- sites, links, hub ---------------------------------------------------------------------------


def site_view(row: Mapping[str, Any]) -> SiteView:
    """A ``SiteRegistry.status()`` row as the dashboard shows it."""
    age = number(row.get("last_heartbeat_age_s"))
    tier = str(row.get("tier", ""))
    alive = bool(row.get("alive")) if tier != "hub" or age is not None else None
    outbox = row.get("outbox") or {}
    return {
        "site": str(row.get("site")),
        "tier": tier,
        "labels": {str(k): str(v) for k, v in (row.get("labels") or {}).items()},
        "alive": alive,
        "last_heartbeat_age_s": age,
        "stale_s": age if alive is False else None,
        "cpu": number(row.get("cpu_percent")),
        "rss_bytes": _count(row.get("rss_bytes")),
        "outbox_records": _count(outbox.get("records")) if isinstance(outbox, Mapping) else None,
        "watermark_lag_s": number(row.get("watermark_lag_s")),
        "dead_lettered": _count(row.get("dlq")),
        "late": _count(row.get("late")),
        "plan_expired": row.get("plan_expired") is True,
        "connectors_down": _connectors_down(row.get("connectors")),
    }


def _connectors_down(connectors: Any) -> list[dict[str, str]]:
    """The connectors a heartbeat reports down: ``name`` and ``last_error``."""
    if not isinstance(connectors, Mapping):
        return []
    return [
        {"name": str(name), "last_error": str(state.get("last_error", ""))}
        for name, state in connectors.items()
        if isinstance(state, Mapping) and state.get("up") is False
    ]


def link_view(row: Mapping[str, Any]) -> LinkView:
    """A ``SiteRegistry.matrix()`` row: the measured value only when the registry says it is measured and fresh."""
    measured = row.get("source") == "measured"
    return {
        "src": str(row.get("src")),
        "dst": str(row.get("dst")),
        "measured_ms": number(row.get("latency_ms")) if measured else None,
        "declared_ms": number(row.get("declared_ms")),
        "age_s": number(row.get("age_s")) if measured else None,
    }


def hub_view(engine: Mapping[str, Any] | None, ingest: Mapping[str, Any] | None, errors: list[str]) -> HubView:
    """The Spark queries from ``Engine.metrics()`` and the ingest's worst lag from ``Ingest.stats()``."""
    queries: list[QueryView] = []
    for app, data in sorted((engine or {}).items()):
        if not isinstance(data, Mapping):
            continue
        for replica, q in sorted((data.get("queries") or {}).items()):
            if not isinstance(q, Mapping):
                continue
            queries.append(
                {
                    "name": f"{app}/{replica}",
                    "active": bool(q.get("active")),
                    "batch_duration_ms": number(q.get("batch_ms")),
                    "restarts": _count(q.get("restarts")) or 0,
                    "input_rows_per_s": number(q.get("input_rows_per_s")),
                    "error": str(q["error"]) if q.get("error") else None,
                }
            )
    lags = [
        lag
        for per_site in ((ingest or {}).get("apps") or {}).values()
        for per_stream in per_site.values()
        for counts in per_stream.values()
        if (lag := number(counts.get("lag_s"))) is not None
    ]
    return {
        "queries": queries,
        "ingest_lag_s": round(max(lags), 3) if lags else None,
        "ingest_connected": bool(ingest["connected"]) if ingest and "connected" in ingest else None,
        "ingest_records": _count(ingest.get("records")) if ingest else None,
        "errors": errors,
    }
