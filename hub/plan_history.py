"""The plan history of a deployed app: one entry per deploy and re-plan, with its reason and what moved."""

from __future__ import annotations

import dataclasses
from typing import Any

from hub.state import AppRecord, HistoryEntry
from spanedge.app import App
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

    ``request`` holds the deploy request's fields of :class:`hub.state.AppRecord`.
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


def replanned(old: AppRecord, plan: Plan, at: float, reason: str, basis: dict[str, Any]) -> tuple[AppRecord, bool]:
    """The record of an app re-planned at ``at``, and whether its placement changed.

    Only a changed placement becomes the plan in force; otherwise the new totals and
    baselines are recorded under the version that stays.
    """
    if placement(plan) != placement(old.plan):
        entry, changed = history_entry(plan, at, reason, old.plan), True
    else:
        entry = dataclasses.replace(
            history_entry(plan, at, f"{reason}; placement unchanged", None), version=old.plan.version, changed=False
        )
        plan, changed = old.plan, False
    return dataclasses.replace(old, plan=plan, history=[*old.history, entry][-MAX_HISTORY:], basis=basis), changed


def last_planned(record: AppRecord) -> float:
    """When the app's plan was last made (deployed or re-planned)."""
    return record.history[-1].at if record.history else record.deployed_at


def history_entry(plan: Plan, at: float, reason: str, previous: Plan | None) -> HistoryEntry:
    """The history entry of ``plan``: its totals and baselines, and what moved since ``previous``."""
    return HistoryEntry(
        plan.version,
        at,
        reason,
        dataclasses.asdict(plan.totals),
        moved=moves(previous, plan) if previous is not None else [],
        baselines={name: dataclasses.asdict(t) for name, t in plan.baselines.items()},
    )


def moves(old: Plan, new: Plan) -> list[dict[str, str]]:
    """The replicas of both plans whose site differs, as ``{"replica", "from", "to"}`` in ``new``'s order."""
    before = {a.replica: a.site for a in old.assignments}
    return [
        {"replica": a.replica, "from": before[a.replica], "to": a.site}
        for a in new.assignments
        if a.replica in before and before[a.replica] != a.site
    ]


def placement(plan: Plan) -> set[tuple[str, str]]:
    """Where each replica of ``plan`` runs."""
    return {(a.replica, a.site) for a in plan.assignments}
