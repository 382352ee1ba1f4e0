"""Placing an app at the hub: loading its source and solving its placement with live measurements."""

from __future__ import annotations

import dataclasses
import statistics
import traceback
from collections.abc import Mapping
from typing import Any, Protocol

from hub.control.registry import SiteRegistry
from placement.problem import HYSTERESIS
from spanedge.app import App
from spanedge.errors import InvalidDataflow, SpanEdgeError
from spanedge.loader import load_app_source
from spanedge.plan import Plan
from spanedge.sites import Sites

#: Baselines every plan is compared with.
BASELINES = ("central", "local-first")


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
        previous: Plan | None = None,
        state_bytes: Mapping[str, float] | None = None,
        key_spread: Mapping[str, Mapping[int, float]] | None = None,
    ) -> Plan:
        """Return the plan of ``app`` (a re-plan of ``previous``, whose replicas hold ``state_bytes``, if given).

        ``key_spread``: how each window replica's records spread over its keys (see :class:`placement.Previous`).
        """
        ...


#: A re-plan moves replicas only if it gains more than this many times the measured links' relative spread.
NOISE_MARGIN = 0.5


def noise_hysteresis(latency_rows: list[dict[str, Any]], hysteresis: float, margin: float) -> float:
    """The least relative gain a re-plan must bring to move anything: ``hysteresis``, or more on noisy links.

    The noise is the median, over the measured links in ``latency_rows``, of
    each one's interquartile range over its estimate (``latency_spread_ms``
    over ``latency_p50_ms``, :mod:`hub.control.links`); a re-plan must gain ``margin``
    times it, so a placement that only looks better because the noise swung
    the estimates does not replace the plan in force.
    """
    spreads = [
        float(r["latency_spread_ms"]) / float(r["latency_p50_ms"])
        for r in latency_rows
        if r.get("latency_spread_ms") is not None and float(r["latency_p50_ms"]) > 0
    ]
    return max(hysteresis, margin * statistics.median(spreads)) if spreads else hysteresis


def default_planner(
    app: App,
    sites: Sites,
    *,
    latency_rows: list[dict[str, Any]],
    weights: Mapping[str, float] | None,
    slo_ms: float | None,
    version: int,
    previous: Plan | None = None,
    state_bytes: Mapping[str, float] | None = None,
    key_spread: Mapping[str, Mapping[int, float]] | None = None,
    hysteresis: float = HYSTERESIS,
    noise_margin: float = NOISE_MARGIN,
    migration_weight: float | None = None,
) -> Plan:
    """Solve the placement ILP over the declared links overlaid with the measured ones.

    ``weights`` holds the objective weights by name (``traffic``, ``latency``,
    ``migration``); ``migration_weight``, if given, replaces the last. The
    plan carries the totals of the central and local-first baselines. A
    re-plan of ``previous`` keeps its placement unless the new one is better
    by more than the hysteresis: ``hysteresis``, or ``noise_margin`` times
    the measured links' relative spread if that is more
    (:func:`noise_hysteresis`); ties go to the sites it used (see
    :func:`placement.solve`), and moving a replica costs its ``state_bytes``
    (by replica, as the sites report them) times the link's cost; a keyed window split
    in two is cut where ``key_spread`` says its records divide evenly. The hub plans with the defaults; a planner
    without hysteresis or migration cost is
    ``functools.partial(default_planner, hysteresis=0, noise_margin=0, migration_weight=0)``.
    """
    import placement

    matrix = placement.LatencyMatrix.from_sites(sites).with_measurements(latency_rows, where="heartbeat latencies")
    named = dict(weights or {})
    if migration_weight is not None:
        named["migration"] = migration_weight
    w = placement.Weights.of(named)
    before = None
    if previous is not None:
        spread = noise_hysteresis(latency_rows, hysteresis, noise_margin)
        before = placement.Previous.of(previous, state_bytes, hysteresis=spread, key_spread=key_spread)
    return placement.solve(
        app, sites, latency=matrix, weights=w, slo_ms=slo_ms, version=version, baselines=BASELINES, previous=before
    )


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


def planned_sites(registry: SiteRegistry, app: App) -> Sites:
    """The sites ``app`` is placed on: measured rates where known, and none that is ``joining``.

    A site added with ``spanedge site add`` and not heard yet (:attr:`SiteRegistry.joining`) is left
    out, and so are the latency rows that name it: nothing runs there, and nothing waits for its data.
    """
    sites = registry.effective_sites(app.source_streams())
    joining = registry.joining & sites.sites.keys()
    return sites.replace(sites={n: s for n, s in sites.sites.items() if n not in joining}) if joining else sites


def planned_latency_rows(registry: SiteRegistry) -> list[dict[str, Any]]:
    """The fresh latency measurements (:meth:`SiteRegistry.latency_rows`) between sites that are not ``joining``."""
    joining = set(registry.joining)
    return [r for r in registry.latency_rows() if r["src"] not in joining and r["dst"] not in joining]


def basis(registry: SiteRegistry, app: App) -> dict[str, Any]:
    """The measured latencies and the stream rates an app is planned with, kept to detect drift.

    Only measured pairs are kept: every other pair has its declared latency
    (:meth:`~hub.control.registry.SiteRegistry.declared_latency`), which the drift check reads.
    """
    latency = registry.measured_latencies()
    sites = planned_sites(registry, app)
    rates = {f"{s}@{site.name}": b.rate for site in sites.sites.values() for s, b in site.streams.items()}
    return {"latency": latency, "rates": rates}


def plan_app(
    planner: Planner,
    registry: SiteRegistry,
    app: App,
    version: int,
    *,
    source: str,
    filename: str,
    weights: Mapping[str, float] | None,
    slo_ms: float | None,
    previous: Plan | None = None,
    state_bytes: Mapping[str, float] | None = None,
    key_spread: Mapping[str, Mapping[int, float]] | None = None,
) -> Plan:
    """Plan version ``version`` of ``app`` with the measured rates and latencies.

    The plan carries the app's source and file name, whatever planner made it.
    ``previous`` (the plan in force, for a re-plan) goes to the planner only
    when given, with ``state_bytes`` (the bytes of state its replicas hold, as
    their sites last reported: :meth:`SiteRegistry.state_bytes`) and
    ``key_spread`` (:meth:`SiteRegistry.key_spread`), so planners
    without those parameters still plan first versions.
    """
    sites = planned_sites(registry, app)
    # the checks the planner makes, in its order, whatever planner is plugged in
    sites.check_app_streams(app.source_streams(), app.name)
    app.graph()
    replan: dict[str, Any] = {}
    if previous is not None:
        replan = {"previous": previous, "state_bytes": state_bytes, "key_spread": key_spread}
    plan = planner(
        app,
        sites,
        latency_rows=planned_latency_rows(registry),
        weights=weights,
        slo_ms=slo_ms,
        version=version,
        **replan,
    )
    updates: dict[str, Any] = {}
    if plan.version != version:
        updates["version"] = version
    if not plan.app_source:
        updates["app_source"] = source
    if not plan.app_file:
        updates["app_file"] = filename
    return dataclasses.replace(plan, **updates) if updates else plan


def carry_ownership(plan: Plan, previous: Plan | None) -> Plan:
    """Stamp each assignment of ``plan`` with the version at which its site took the replica over.

    A replica that stays where ``previous`` ran it keeps its ``since``; one that
    moves, or is new in a later version, gets ``plan.version``: its new owner
    numbers the records it sends to the hub in an epoch of its own. Without
    ``previous`` (a first deploy) the plan is returned as is.
    """
    if previous is None:
        return plan
    before = {a.replica: a for a in previous.assignments}
    stamped = []
    for a in plan.assignments:
        old = before.get(a.replica)
        since = old.since if old is not None and old.site == a.site else plan.version
        stamped.append(a if a.since == since else dataclasses.replace(a, since=since))
    return dataclasses.replace(plan, assignments=tuple(stamped))
