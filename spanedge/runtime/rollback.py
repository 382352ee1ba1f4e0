"""Rolling a site back to the previous version of an app with its changed windows' state kept.

When a plan changes an app's code at a site, the windows whose state the new
version cannot carry over are *affected* (:func:`affected_windows`). The agent
keeps their snapshots and the records their sources took from then on; on a
plan that returns the site to the previous version, :func:`resume_windows`
restores the snapshots and replays those records through the previous
version's path to the affected windows only (:func:`rollback_part`), leaving
out the results the new version already emitted. The design note
``docs/design/rollouts.md`` says why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from spanedge.app import App
from spanedge.operators import Kind, Operator
from spanedge.plan import Plan
from spanedge.runtime.build import from_plan
from spanedge.runtime.pipeline import Node, Pipeline
from spanedge.runtime.snapshot import OperatorSnapshot

_CODE = type(compile("", "<code>", "exec"))  # types.CodeType, without importing a module the runtime needs not
Emitted = tuple[str, str, float, float]
"""One window result: ``(replica, key as text, window start, window end)``."""


def _code_key(code: Any) -> tuple[Any, ...]:
    """What a function's code does, without where it sits in its file (its line numbers)."""
    consts = tuple(_code_key(c) if isinstance(c, _CODE) else c for c in code.co_consts)
    return (code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)


def same_function(f: Any, g: Any) -> bool:
    """Whether two user functions have the same code (a callable without code counts as changed)."""
    if f is None or g is None:
        return f is g
    cf, cg = getattr(f, "__code__", None), getattr(g, "__code__", None)
    if not isinstance(cf, _CODE) or not isinstance(cg, _CODE):
        return False
    return _code_key(cf) == _code_key(cg) and getattr(f, "__defaults__", None) == getattr(g, "__defaults__", None)


def same_operator(a: Operator, b: Operator) -> bool:
    """Whether two versions of an operator do the same: definition, inputs and code alike (not its line)."""
    return dataclasses.replace(a, location="") == dataclasses.replace(b, location="") and same_function(a.func, b.func)


def _parents(pipeline: Pipeline) -> dict[str, list[Node]]:
    parents: dict[str, list[Node]] = {n.replica: [] for n in pipeline.nodes}
    for node in pipeline.nodes:
        for child in node.children:
            parents.setdefault(child.replica, []).append(node)
    return parents


def upstream(pipeline: Pipeline, replicas: Iterable[str]) -> list[Node]:
    """The nodes of ``pipeline`` that feed ``replicas`` here, directly or not, in topological order."""
    parents = _parents(pipeline)
    seen: set[str] = set()
    todo = list(replicas)
    while todo:
        for parent in parents.get(todo.pop(), []):
            if parent.replica not in seen:
                seen.add(parent.replica)
                todo.append(parent.replica)
    return [n for n in pipeline.nodes if n.replica in seen]


def affected_windows(pipeline: Pipeline, new: App) -> list[str]:
    """The window replicas of ``pipeline`` (the version running) whose state version ``new`` does not carry.

    A window is affected if it changed (another definition, or gone), or if
    any operator upstream of it at this site changed (another function,
    definition or inputs, or gone): a changed map that feeds an unchanged
    window changes what the window holds. An operator that looks changed but
    is not only costs the replay; none that changed is missed.
    """

    def changed(op: Operator) -> bool:
        other = new.operators.get(op.name)
        return other is None or not same_operator(op, other)

    out = []
    for node in pipeline.windows:
        if changed(node.op) or any(changed(n.op) for n in upstream(pipeline, [node.replica])):
            out.append(node.replica)
    return out


def feeding_sources(pipeline: Pipeline, windows: Iterable[str]) -> list[str]:
    """The source replicas of ``pipeline`` that feed ``windows``, in order."""
    return [n.replica for n in upstream(pipeline, windows) if n.op.kind is Kind.SOURCE]


def rollback_part(app: App, plan: Plan, site: str, windows: Iterable[str], **options: Any) -> Pipeline:
    """The part of ``site``'s pipeline of ``plan`` that replays records into ``windows`` only.

    It holds the sources feeding the windows, the replicas between them (their
    records go nowhere else: no other branch and not the hub), the windows and
    everything downstream of them, wired as in the whole pipeline.
    """
    whole = from_plan(app, plan, site, **options)
    targets = [w for w in windows if any(n.replica == w for n in whole.windows)]
    path = {n.replica for n in upstream(whole, targets)}
    below: set[str] = set(targets)
    for node in whole.nodes:
        if node.replica in below:
            below.update(c.replica for c in node.children)
    for node in whole.nodes:
        if node.replica in path:
            node.children = [c for c in node.children if c.replica in path or c.replica in targets]
            node.to_hub = False
    nodes = [n for n in whole.nodes if n.replica in path or n.replica in below]
    return Pipeline(app, site, nodes, **options)


def resume_windows(
    live: Pipeline,
    part: Pipeline,
    kept: Mapping[str, OperatorSnapshot],
    progress: Mapping[str, float],
    records: Iterable[tuple[str, bytes, float]],
    emitted: Iterable[Emitted],
    resumed: Collection[str] | None = None,
) -> int:
    """Resume ``live``'s windows ``resumed`` (default: all in ``kept``) from their snapshots and the ``records`` since.

    ``part`` (:func:`rollback_part` of the same plan) is restored from ``kept``
    (the resumed windows and those feeding them) and ``progress`` (the
    sources' newest event times when the snapshots were taken), takes
    ``records`` (``(source replica, payload, arrival)`` in the order they
    came) and leaves out the window results in ``emitted``. Its outputs join
    ``live``'s pending ones, the resumed windows' state replaces ``live``'s,
    and ``live`` fires what its own watermark has passed and leaves out the
    rest of ``emitted`` later too. Returns the records replayed.
    """
    part.max_event_time = dict(progress)  # every source's: the others hold the watermark back as they did
    marks = [s.watermark for s in kept.values()]
    part.watermark = min(marks) if marks else -math.inf
    for snapshot in kept.values():
        part.restore_operator(snapshot)
    done: dict[str, set[tuple[str, float, float]]] = {}
    for replica, key, start, end in emitted:
        done.setdefault(replica, set()).add((key, start, end))
    for replica, results in done.items():
        part.suppress(replica, results)
    replayed = 0
    for source, payload, arrival in records:
        if source in part.sources:
            part.process(source, payload, arrival)
            replayed += 1
    out = part.take()
    pending = live.out
    pending.to_hub.extend(out.to_hub)
    pending.sinks.extend(out.sinks)
    pending.dlq.extend(out.dlq)
    pending.late.extend(out.late)
    for replica in kept if resumed is None else resumed:
        if any(n.replica == replica for n in part.windows):
            live.restore_operator(part.snapshot_operator(replica))
    for replica, results in done.items():
        live.suppress(replica, results)
    live.fire_due()
    return replayed
