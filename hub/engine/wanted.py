"""What a plan runs at the hub: one query per sink replica, and during a handover the old placement's too.

Each query sits in a *slot* of :attr:`hub.engine.queries.Deployed.queries`:
its sink replica, or :func:`before_slot` for the query of a sink under the
old placement of a handover. A query is known by its sink and fingerprint
(:mod:`hub.engine.fingerprint`), which name its checkpoint, and, while a
plan hands replicas over to or from the hub, by its *side*: the share of
the results it writes (:mod:`hub.handover.cutoffs`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from hub.engine.checkpoints import check_distinct, checkpoint_name
from hub.engine.compile import Compiler
from hub.engine.replicas import Replicas
from hub.handover.switches import before_placement
from spanedge.errors import InvalidPlan
from spanedge.operators import Kind
from spanedge.plan import Assignment, Plan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from hub.engine.queries import Query
    from spanedge.app import App
    from spanedge.dag import OperatorGraph

log = logging.getLogger(__name__)

Wanted = tuple[Assignment, Compiler, str]
"""A query a plan runs: its sink's assignment, the compiler of its placement and its fingerprint."""

Side = tuple[str, float]
"""``("before" | "after", switch time)``: which share of a handover's results a query writes."""


def before_slot(sink: str) -> str:
    """The key, in :attr:`hub.engine.queries.Deployed.queries`, of the query of ``sink`` under the old placement of a handover."""
    return f"{sink} (before handover)"


def wanted_queries(
    spark: SparkSession, app: App, plan: Plan, root: Path, close_windows: bool
) -> tuple[OperatorGraph, dict[str, Wanted], dict[str, Side]]:
    """The queries ``plan`` runs at the hub by slot (the sink, its compiler and fingerprint), and each one's side.

    ``root`` is the directory of the app's checkpoints: a query keeps the
    window-close mode its checkpoint was started in (:func:`keep_checkpoint_modes`).

    Raises:
        InvalidPlan: the plan does not fit the app; InvalidDataflow: two sinks' checkpoints would collide.
    """
    graph = checked_graph(app, plan)
    replicas = Replicas(app, plan, graph)
    compiler = Compiler(spark, replicas, close_windows=close_windows)
    sinks = [a for a in plan.at(plan.hub) if replicas.op(a).kind is Kind.SINK]
    check_distinct((a.replica for a in sinks), app.name)
    fps = keep_checkpoint_modes(compiler, [a.replica for a in sinks], root)
    wanted = {a.replica: (a, compiler, fps[a.replica]) for a in sinks}
    return graph, wanted, split(spark, app, plan, graph, wanted, root, close_windows)


def split(
    spark: SparkSession,
    app: App,
    plan: Plan,
    graph: OperatorGraph,
    wanted: dict[str, Wanted],
    root: Path,
    close_windows: bool = False,
) -> dict[str, Side]:
    """Add to ``wanted`` the queries of the old placement of ``plan``'s moves to or from the hub; return each side.

    Only sinks whose query the move changes get a second query; a sink's own
    query is then the ``after`` side, the added one the ``before`` side. A
    sink that moves with the replicas has one query at the hub: the ``after``
    side when it comes from a spoke (the old owner writes the results before
    the switch), the ``before`` side when it leaves for one.
    """
    before = before_placement(plan)
    if before is None:
        return {}
    old_plan, at = before
    compiler = Compiler(spark, Replicas(app, old_plan, graph), close_windows=close_windows)
    old_sinks = [a.replica for a in old_plan.at(old_plan.hub) if graph.op(a.operator).kind is Kind.SINK]
    old_fps = keep_checkpoint_modes(compiler, sorted({*old_sinks, *(a.replica for a, _, _ in wanted.values())}), root)
    sides: dict[str, Side] = {}
    for slot, (a, _, fp) in list(wanted.items()):
        old_fp = old_fps[a.replica]
        if old_fp != fp:
            sides[slot] = ("after", at)
            if old_plan.site_of(a.replica) == old_plan.hub:
                wanted[before_slot(slot)] = (a, compiler, old_fp)
                sides[before_slot(slot)] = ("before", at)
    for a in old_plan.at(old_plan.hub):
        if graph.op(a.operator).kind is Kind.SINK and a.replica not in wanted:
            wanted[before_slot(a.replica)] = (a, compiler, old_fps[a.replica])
            sides[before_slot(a.replica)] = ("before", at)
    return sides


def keep_checkpoint_modes(compiler: Compiler, sinks: list[str], root: Path) -> dict[str, str]:
    """Let the query of each of ``sinks`` keep the window-close mode its checkpoint under ``root`` was written in.

    Returns each sink's fingerprint in the mode it keeps.

    The two modes keep different window state, so a query switched to the
    other would start afresh and lose the records of its open windows. So
    ``--window-close`` applies to queries that start anew, and a running
    query keeps its mode across hub restarts.
    """
    fps: dict[str, str] = {}
    for sink in sinks:
        mode = compiler.closes(sink)
        current = fps[sink] = compiler.fingerprint(sink)
        if (root / checkpoint_name(sink, current)).is_dir():
            continue
        compiler.modes[sink] = not mode
        other = compiler.fingerprint(sink)
        if other == current or not (root / checkpoint_name(sink, other)).is_dir():
            compiler.modes.pop(sink)
            continue
        fps[sink] = other
        log.info(
            "query %s keeps writing its windows %s, as its checkpoint was started so",
            sink,
            "once the watermark passes them" if not mode else "in the micro-batch after the watermark passed them",
        )
    return fps


def unchanged(
    queries: dict[str, Query], wanted: dict[str, str], sides: dict[str, Side], deployed_sides: dict[str, Side] | None
) -> bool:
    """Whether a deployment changes nothing at the hub, so it need neither build, stop nor start a query.

    Args:
        queries: the app's queries by slot (:attr:`hub.engine.queries.Deployed.queries`).
        wanted: the checkpoint name (sink and fingerprint) of each query the new plan needs, by slot.
        sides: the handover share of each query the new plan gives (:func:`split`).
        deployed_sides: the shares the app's last deployment gave (None: not known, as after a restart).

    True when the new plan wants exactly the queries that run, each with the
    fingerprint it runs with, and the same shares of a handover (a share
    that changes is written to the query's checkpoint); a plan version,
    totals or replica owners that differ elsewhere are no change here.
    """
    if deployed_sides is None or sides != deployed_sides or set(queries) != set(wanted):
        return False
    return all(q.checkpoint.name == wanted[slot] and q.running for slot, q in queries.items())


def name_letter_filers(wanted: dict[str, Wanted], queries: dict[str, Query]) -> None:
    """Tell each query's sink whose dead letters it files: each hub operator's, by one sink only.

    An operator upstream of several sinks runs in each of their queries; the
    first of those sinks by name files its letters (both queries of that sink
    during a handover, each its share).
    """
    runs = {slot: compiler.python_operators(a.replica) for slot, (a, compiler, _) in wanted.items()}
    filer: dict[str, str] = {}
    for slot, ops in runs.items():
        sink = wanted[slot][0].replica
        for op in ops:
            filer[op] = min(filer.get(op, sink), sink)
    for slot, q in queries.items():
        sink = wanted[slot][0].replica
        q.sink.letters_of = frozenset(op for op in runs.get(slot, ()) if filer[op] == sink)


def checked_graph(app: App, plan: Plan) -> OperatorGraph:
    """``app``'s DAG, once ``plan`` is known to place this app's operators.

    Raises:
        InvalidPlan: the plan is for another app or names unknown operators.
    """
    if plan.app != app.name:
        msg = f"plan is for app '{plan.app}' but the app is '{app.name}'"
        raise InvalidPlan(msg)
    graph = app.graph()
    for a in plan.assignments:
        if a.operator not in graph:
            msg = f"plan of app '{app.name}' places unknown operator '{a.operator}' (replica '{a.replica}')"
            raise InvalidPlan(msg)
    return graph


def warn_flows_leaving_hub(app: str, plan: Plan) -> None:
    """Log the flows from the hub to an edge site: the hub does not forward results to edge sites."""
    site_of = {a.replica: a.site for a in plan.assignments}
    for f in plan.flows:
        if site_of.get(f.src) == plan.hub and site_of.get(f.dst, plan.hub) != plan.hub:
            log.warning(
                "app %s: flow %s -> %s leaves the hub; the hub does not forward results to edge sites",
                app,
                f.src,
                f.dst,
            )
