"""The plan history of a deployed app: one entry per deploy and re-plan, with its reason and what moved."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from hub.control.state import AppRecord, HistoryEntry
from hub.handover.switches import key_moves
from spanedge.app import App
from spanedge.keyrange import KEY_SPACE, describe
from spanedge.plan import Plan

#: History entries kept per app.
MAX_HISTORY = 200


def deploy_reason(old: AppRecord | None, source: str) -> str:
    """Why a deploy makes a new plan version: a first deploy, or a redeploy with or without new source."""
    if old is None:
        return "deployed"
    return "redeployed with new source" if old.source != source else "redeployed"


def deployed_record(
    app: App, plan: Plan, old: AppRecord | None, entry: HistoryEntry, basis: dict[str, Any], **request: Any
) -> AppRecord:
    """The record of ``app`` deployed with ``plan``, its history extended by ``entry``.

    ``request`` holds the deploy request's fields of :class:`hub.control.state.AppRecord`.
    """
    history = [*old.history, entry] if old is not None else [entry]
    return AppRecord(
        name=app.name,
        plan=plan,
        deployed_at=entry.at,
        history=history[-MAX_HISTORY:],
        basis=basis,
        **request,
    )


def replanned(
    old: AppRecord,
    plan: Plan,
    at: float,
    reason: str,
    basis: dict[str, Any],
    state_bytes: Mapping[str, float] | None = None,
) -> tuple[AppRecord, bool]:
    """The record of an app re-planned at ``at``, and whether its placement changed.

    Only a changed placement becomes the plan in force; otherwise the new totals and
    baselines are recorded under the version that stays. ``state_bytes``: see :func:`history_entry`.
    """
    if placement(plan) != placement(old.plan):
        entry, changed = history_entry(plan, at, reason, old.plan, state_bytes), True
    else:
        entry = dataclasses.replace(
            history_entry(plan, at, f"{reason}; placement unchanged", None), version=old.plan.version, changed=False
        )
        plan, changed = old.plan, False
    return dataclasses.replace(old, plan=plan, history=[*old.history, entry][-MAX_HISTORY:], basis=basis), changed


def last_planned(record: AppRecord) -> float:
    """When the app's plan was last made (deployed or re-planned)."""
    return record.history[-1].at if record.history else record.deployed_at


def history_entry(
    plan: Plan, at: float, reason: str, previous: Plan | None, state_bytes: Mapping[str, float] | None = None
) -> HistoryEntry:
    """The history entry of ``plan``: its totals and baselines, and what moved since ``previous``.

    A replica split by key or merged back adds why to the reason. A moved
    replica whose old site reported the bytes of state it held (``state_bytes``,
    by replica) carries them in its move.
    """
    return HistoryEntry(
        plan.version,
        at,
        reason + (_key_changes(previous, plan) if previous is not None else ""),
        dataclasses.asdict(plan.totals),
        moved=_with_state(moves(previous, plan), state_bytes or {}) if previous is not None else [],
        baselines={name: dataclasses.asdict(t) for name, t in plan.baselines.items()},
    )


def moves(old: Plan, new: Plan) -> list[dict[str, Any]]:
    """The replicas of both plans whose site differs, as ``{"replica", "from", "to"}`` in ``new``'s order.

    For a replica split by key in either plan, each key range that changes
    site is one move, with ``"keys"`` (the range) and ``"change"`` (``split``,
    ``merge`` or ``keys``). A move ``new`` hands over also has ``"switch_at"``:
    the event time from which its windows are the new owner's.
    """
    before = {a.replica: a.site for a in old.assignments}
    divided = {p.replica for p in (*old.parts, *new.parts)}
    switches = {(h.replica, h.source, h.target, h.keys_from, h.keys_before): h.switch_at for h in new.handovers}
    out: list[dict[str, Any]] = []
    for a in new.assignments:
        if a.replica not in before:
            continue
        if a.replica in divided:
            out += _key_moves(old, new, a.replica, switches)
        elif before[a.replica] != a.site:
            move: dict[str, Any] = {"replica": a.replica, "from": before[a.replica], "to": a.site}
            switch_at = switches.get((a.replica, before[a.replica], a.site, 0, KEY_SPACE))
            out.append(move if switch_at is None else {**move, "switch_at": switch_at})
    return out


def _with_state(moved: list[dict[str, Any]], state_bytes: Mapping[str, float]) -> list[dict[str, Any]]:
    """``moved`` with ``"state_bytes"`` on each whole-replica move whose replica's state size is known."""
    return [
        {**m, "state_bytes": round(state_bytes[m["replica"]])} if m["replica"] in state_bytes and "keys" not in m else m
        for m in moved
    ]


def at_risk(
    moved: list[dict[str, Any]],
    gone: Callable[[str], bool],
    sent_before: Callable[[str], float | None],
    keep_s: float,
    recoverer: Callable[[Mapping[str, Any]], str | None] = lambda move: None,
) -> list[dict[str, Any]]:
    """``moved`` with what each handover from a site gone for good may have lost, and who recovers it.

    A gone old owner cannot finish its windows before the switch: its results
    from the event time it last announced (``sent_before``: it had delivered
    every result before it, to the hub and to its local sinks) to
    ``switch_at`` are at risk. Such a move gains ``"at_risk_from"`` (absent
    when the site announced no frontier). If ``recoverer`` names a site for
    it (the replica's source site, which spooled its input; see
    :mod:`edge_agent.recovery`) and the frontier is known, that site
    recomputes them: the move gains ``"recovered_by"``. Otherwise they are
    lost unless the agent comes back, with its state directory, while plans
    still list the handover (``keep_s`` after the switch): then its checkpoint
    and persistent session finish them; the move gains ``"recover_by"``.
    """
    out = []
    for m in moved:
        if "switch_at" in m and gone(m["from"]):
            since = sent_before(m["from"])
            by = recoverer(m) if since is not None else None
            if by is not None:
                m = {**m, "at_risk_from": since, "recovered_by": by}
            else:
                m = {**m, "recover_by": m["switch_at"] + keep_s} | (
                    {"at_risk_from": since} if since is not None else {}
                )
        out.append(m)
    return out


def back(record: AppRecord, site: str, at: float) -> tuple[AppRecord, list[dict[str, Any]]]:
    """``record`` with its moves from ``site`` gone for good marked as back at ``at``, and those moves.

    Each move with ``"recover_by"`` from ``site`` not yet marked gains
    ``"back_at"``: by ``recover_by``, the site's checkpoint and persistent
    session finish its results before the switch; later, they stay lost.
    """
    marked: list[dict[str, Any]] = []
    history = list(record.history)
    for i, entry in enumerate(history):
        moved = [
            {**m, "back_at": at} if m.get("from") == site and "recover_by" in m and "back_at" not in m else m
            for m in entry.moved
        ]
        if moved != entry.moved:
            marked += [m for m, was in zip(moved, entry.moved, strict=True) if m is not was]
            history[i] = dataclasses.replace(entry, moved=moved)
    return (dataclasses.replace(record, history=history) if marked else record), marked


def handed_over(record: AppRecord, replica: str, source: str, at: float) -> AppRecord | None:
    """``record`` with the latest move of ``replica`` away from ``source`` marked as handed over at ``at``.

    The move gains ``"handed_over_at"`` and ``"handover_s"`` (from the re-plan
    that made it); None if no such move waits for it.
    """
    for i in range(len(record.history) - 1, -1, -1):
        entry = record.history[i]
        for j, m in enumerate(entry.moved):
            if m.get("replica") != replica or m.get("from") != source:
                continue
            if "handed_over_at" in m:
                return None
            moved = list(entry.moved)
            moved[j] = {**m, "handed_over_at": at, "handover_s": round(at - entry.at, 3)}
            history = list(record.history)
            history[i] = dataclasses.replace(entry, moved=moved)
            return dataclasses.replace(record, history=history)
    return None


def _key_moves(
    old: Plan, new: Plan, replica: str, switches: dict[tuple[str, str, str, int, int], float]
) -> list[dict[str, Any]]:
    was = any(p.replica == replica for p in old.parts)
    now = any(p.replica == replica for p in new.parts)
    change = "split" if now and not was else "merge" if was and not now else "keys"
    out: list[dict[str, Any]] = []
    for _, source, target, _, lo, hi in key_moves(old, new, replica):
        move: dict[str, Any] = {"replica": replica, "from": source, "to": target, "keys": describe(lo, hi)}
        move["change"] = change
        switch_at = switches.get((replica, source, target, lo, hi))
        out.append(move if switch_at is None else {**move, "switch_at": switch_at})
    return out


def _key_changes(old: Plan, new: Plan) -> str:
    """Why replicas were split or merged back with ``new``, as a suffix of a history reason."""
    parts_before = {p.replica: p for p in old.parts}
    notes = [
        f"; {p.replica} {p.reason}" if p.reason else f"; {p.replica} split by key"
        for p in new.parts
        if p.replica not in parts_before or parts_before[p.replica].site != p.site
    ]
    now = {p.replica for p in new.parts}
    notes += [
        f"; {r} merged back into {new.site_of_or_none(r)}: one site carries it again"
        for r in sorted(parts_before)
        if r not in now and new.site_of_or_none(r) is not None
    ]
    return "".join(notes)


def placement(plan: Plan) -> set[tuple[str, ...]]:
    """Where each replica of ``plan`` runs, and which keys of a split replica each part owns."""
    where: set[tuple[str, ...]] = {(a.replica, a.site) for a in plan.assignments}
    return where | {(p.replica, p.site, str(p.keys_from), str(p.keys_before)) for p in plan.parts}
