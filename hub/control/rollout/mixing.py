"""Whether two versions of an app can run side by side, some sites on each, with the hub's results exact.

Both versions must have the same *hub contract* (``docs/design/rollouts.md``,
"Changes that cannot mix"):

* every stream that crosses to the hub comes from an operator of the same
  name and group, with the same declared schema, event-time field and, for a
  window, the same definition;
* every hub replica's query fingerprint (:func:`hub.engine.fingerprint.fingerprint`) is equal;
* no replica both versions have runs elsewhere in the other one (at the hub
  in one and at a spoke in the other, or at another spoke);
* the app has the same sources.

Everything confined to the spokes mixes. The check is structural: it cannot
see a field whose meaning changed while its name and type stayed.
"""

from __future__ import annotations

from hub.engine.fingerprint import fingerprint, window_digest
from hub.engine.replicas import Replicas
from spanedge.app import App
from spanedge.operators import Kind, Operator
from spanedge.plan import Plan


def mixing_problems(old_app: App, old_plan: Plan, new_app: App, new_plan: Plan) -> list[str]:
    """Why ``new_app`` (planned as ``new_plan``) cannot run beside ``old_app`` at other sites; none if it can.

    Each problem is one line for people, e.g. ``stream unit_peaks crosses to
    the hub with another schema: temp double -> temp int``.
    """
    problems = _moved(old_plan, new_plan)
    problems += _sources(old_app, new_app)
    problems += _crossings(old_app, old_plan, new_app, new_plan)
    problems += _hub_part(old_app, old_plan, new_app, new_plan)
    return problems


def _moved(old: Plan, new: Plan) -> list[str]:
    before = {a.replica: a.site for a in old.assignments}
    out = []
    for a in new.assignments:
        was = before.get(a.replica)
        if was is None or was == a.site:
            continue
        if old.hub in (was, a.site):
            out.append(f"replica {a.replica} runs at {was} in the old version and at {a.site} in the new one")
        else:
            out.append(f"replica {a.replica} moves from {was} to {a.site} in the new version's plan")
    return out


def _sources(old: App, new: App) -> list[str]:
    def names(app: App) -> set[str]:
        return {n for n, op in app.operators.items() if op.kind is Kind.SOURCE}

    added, removed = sorted(names(new) - names(old)), sorted(names(old) - names(new))
    out = [f"source {n} is new: the hub's windows would wait for a stream only some sites send" for n in added]
    return out + [
        f"source {n} is gone: the hub's windows would wait for a stream only some sites send" for n in removed
    ]


def _to_hub(app: App, plan: Plan) -> dict[str, Operator]:
    """The operators (by replica) whose streams cross to a replica the hub runs."""
    site = {a.replica: a.site for a in plan.assignments}
    ops = {a.replica: a.operator for a in plan.assignments}
    graph = app.graph()
    return {
        f.src: graph.op(ops[f.src])
        for f in plan.crossing()
        if site.get(f.dst) == plan.hub and site.get(f.src) != plan.hub
    }


def _crossings(old_app: App, old_plan: Plan, new_app: App, new_plan: Plan) -> list[str]:
    before, after = _to_hub(old_app, old_plan), _to_hub(new_app, new_plan)
    out = [f"stream {r} crosses to the hub in the new version only" for r in sorted(set(after) - set(before))]
    out += [f"stream {r} no longer crosses to the hub in the new version" for r in sorted(set(before) - set(after))]
    for replica in sorted(set(before) & set(after)):
        a, b = before[replica], after[replica]
        for what, x, y in (
            ("operator", a.name, b.name),
            ("schema", a.schema or "none", b.schema or "none"),
            ("event-time field", a.time_field or "none", b.time_field or "none"),
            ("kind", a.kind.value, b.kind.value),
        ):
            if x != y:
                out.append(f"stream {replica} crosses to the hub with another {what}: {x} -> {y}")
        if window_digest(a) != window_digest(b):
            out.append(f"stream {replica} crosses to the hub from a changed window (key, size, kind or aggregations)")
    return out


def _hub_part(old_app: App, old_plan: Plan, new_app: App, new_plan: Plan) -> list[str]:
    def prints(app: App, plan: Plan) -> dict[str, str]:
        replicas = Replicas(app, plan, app.graph())
        return {a.replica: fingerprint(replicas, a.replica) for a in plan.assignments if a.site == plan.hub}

    before, after = prints(old_app, old_plan), prints(new_app, new_plan)
    out = [f"hub replica {r} is new in the new version" for r in sorted(set(after) - set(before))]
    out += [f"hub replica {r} is gone in the new version" for r in sorted(set(before) - set(after))]
    out += [
        f"hub replica {r} computes something else in the new version (its query's fingerprint changed)"
        for r in sorted(set(before) & set(after))
        if before[r] != after[r]
    ]
    return out
