"""What a move away from a site gone for good may lose, and which site recomputes it.

A gone old owner cannot finish its windows before a switch. Where the
replica's source site spooled its input it recomputes them
(:mod:`edge_agent.recovery`, named by :attr:`spanedge.plan.Handover.recoverer`);
otherwise the results are lost unless the site comes back in time
(:func:`hub.control.plan_history.at_risk`, :mod:`hub.control.site_returns`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from hub.control import plan_history
from hub.control.site_returns import SiteReturns
from hub.control.state import AppRecord
from hub.handover.frontiers import SiteFrontiers
from hub.handover.holds import HandoverHolds
from hub.handover.switches import DEFAULT_KEEP_S
from spanedge.plan import Plan

log = logging.getLogger(__name__)

_Key = tuple[str, str, float]
"""A whole-replica handover: ``(replica, old owner, switch)``."""


class Recovery:
    """Marks the moves from sites gone for good with what is at risk, and names who recomputes it.

    Attributes:
        gone: whether a site counts as gone (silent past the grace period).
        holds: the handover holds (which old owners delivered their part).
        frontiers: the sites' frontiers (up to when each site delivered everything).
        returns: the gone sites whose return would finish their results.
    """

    def __init__(
        self, gone: Callable[[str], bool], holds: HandoverHolds, frontiers: SiteFrontiers, returns: SiteReturns
    ) -> None:
        """Recover with these parts."""
        self.gone = gone
        self.holds = holds
        self.frontiers = frontiers
        self.returns = returns

    def at_risk(self, record: AppRecord) -> AppRecord:
        """``record`` with the results its latest moves from sites gone for good may have lost, each logged.

        Where the replica's source site can recompute them from its spool, the
        plan's handover names it (``recoverer``).
        """
        entry = record.history[-1]
        plan = record.plan
        moved = plan_history.at_risk(
            entry.moved,
            self.gone,
            lambda site: self.frontiers.delivered(record.name, site),
            DEFAULT_KEEP_S,
            lambda move: self.recoverer(plan, move),
        )
        if moved == entry.moved:
            return record
        _log_at_risk(record.name, moved)
        self.returns.expect(m["from"] for m in moved if "recover_by" in m)
        fixed = {
            (m["replica"], m["from"], m["switch_at"]): (m["at_risk_from"], m["recovered_by"])
            for m in moved
            if "recovered_by" in m
        }
        plan = with_recoveries(plan, fixed)
        return dataclasses.replace(
            record, plan=plan, history=[*record.history[:-1], dataclasses.replace(entry, moved=moved)]
        )

    def recover_carried(self, record: AppRecord, before: Plan, *, new_version: bool) -> AppRecord:
        """``record`` with the handovers already under way from a site gone for good recovered where they can be.

        An old owner that died finishing its part of an earlier handover owes
        that part: unless the hub has it all, the replica's source site
        recomputes it like the part of a move the re-plan makes
        (:meth:`at_risk`). Only handovers ``before`` (the plan replaced) listed
        count. The move in the history entry that made the handover gains
        ``at_risk_from`` and ``recovered_by``. With ``new_version`` (the
        placement did not change), the recovery alone makes a new plan version.
        """
        fixed = self._carried(record, before)
        if not fixed:
            return record
        history = [
            dataclasses.replace(
                e,
                moved=[
                    {**m, "at_risk_from": fix[0], "recovered_by": fix[1]}
                    if (fix := fixed.get((m["replica"], m["from"], m.get("switch_at", math.nan)))) is not None
                    else m
                    for m in e.moved
                ],
            )
            for e in record.history
        ]
        parts: dict[tuple[str, str, float], list[str]] = {}
        for (replica, source, _switch), (since, by) in fixed.items():
            parts.setdefault((source, by, since), []).append(replica)
        for (source, by, since), replicas in parts.items():
            log.warning(
                "app %r: %s is gone before it had delivered its part of a handover: %s recomputes its results of %s "
                "from %s (all before were delivered) from the sensor messages it spooled; the hub's windows wait for them",
                record.name,
                source,
                by,
                ", ".join(sorted(replicas)),
                utc(since),
            )
        plan = with_recoveries(record.plan, fixed)
        if new_version:
            plan = dataclasses.replace(plan, version=plan.version + 1)
            summary = "; ".join(
                f"{by} recomputes {source}'s part of {len(r)} replicas" for (source, by, _), r in parts.items()
            )
            last = history[-1]
            reason = last.reason.removesuffix("; placement unchanged")
            history[-1] = dataclasses.replace(last, version=plan.version, changed=True, reason=f"{reason}; {summary}")
        return dataclasses.replace(record, plan=plan, history=history)

    def _carried(self, record: AppRecord, before: Plan) -> dict[_Key, tuple[float, str]]:
        """The handovers ``before`` listed whose gone old owner still owes its part, with who recomputes it since when."""
        plan = record.plan
        fixed: dict[_Key, tuple[float, str]] = {}
        carried = {(h.replica, h.source, h.switch_at) for h in before.handovers}
        for h in plan.handovers:
            if h.recoverer is not None or h.keyed or h.source == plan.hub or not self.gone(h.source):
                continue
            if (h.replica, h.source, h.switch_at) not in carried:
                continue
            if self.holds.delivered(plan.app, h):
                continue
            since = self.frontiers.delivered(record.name, h.source)
            by = self.recoverer(plan, {"replica": h.replica, "from": h.source})
            if since is not None and by is not None:
                fixed[(h.replica, h.source, h.switch_at)] = (since, by)
        return fixed

    def recoverer(self, plan: Plan, move: Mapping[str, Any]) -> str | None:
        """The site that recomputes ``move``'s part from a gone site: the replica's source site, if a live spoke."""
        if "keys" in move:
            return None  # a key range: its old owner keeps the other keys' windows; not recovered
        a = next((a for a in plan.assignments if a.replica == move["replica"]), None)
        group = a.group if a is not None else None
        if group is None or group in (move["from"], plan.hub) or self.gone(group):
            return None
        return group


def _log_at_risk(name: str, moved: list[dict[str, Any]]) -> None:
    """Log, per gone site, which results of app ``name``'s moves are lost unless it comes back, and which recomputed."""
    lost: dict[tuple[str, float | None, float, float], list[str]] = {}
    recovered: dict[tuple[str, float, float, str], list[str]] = {}
    for m in moved:
        if "recover_by" in m:
            lost.setdefault((m["from"], m.get("at_risk_from"), m["switch_at"], m["recover_by"]), []).append(
                m["replica"]
            )
        elif "recovered_by" in m:
            recovered.setdefault((m["from"], m["at_risk_from"], m["switch_at"], m["recovered_by"]), []).append(
                m["replica"]
            )
    for (site, since, switch, recover_by), replicas in lost.items():
        log.warning(
            "app %r: %s is gone: the results of %s %s up to the switch at %s are lost unless %s's agent comes "
            "back with its state directory by %s (its checkpoint and persistent session then finish them; the hub's "
            "windows that closed before it is back stay without them)",
            name,
            site,
            ", ".join(replicas),
            f"from {utc(since)} (all before were delivered)" if since is not None else "not yet received",
            utc(switch),
            site,
            utc(recover_by),
        )
    for (site, since, switch, by), replicas in recovered.items():
        log.warning(
            "app %r: %s is gone: %s recomputes its results of %s from %s (all before were delivered) up to the "
            "switch at %s from the sensor messages it spooled; the hub's windows wait for them",
            name,
            site,
            by,
            ", ".join(replicas),
            utc(since),
            utc(switch),
        )


def log_back(name: str, site: str, at: float, marked: list[dict[str, Any]]) -> None:
    """Log, for app ``name``, what ``site``'s return at ``at`` means for each of its ``marked`` moves."""
    for recover_by in sorted({m["recover_by"] for m in marked}):
        replicas = ", ".join(m["replica"] for m in marked if m["recover_by"] == recover_by)
        outcome = (
            "by %s: its checkpoint and persistent session finish the results of %s up to their switch; the "
            "hub's windows that closed while it was gone stay without them"
            if at <= recover_by
            else "after %s: the results of %s up to their switch stay lost"
        )
        log.warning("app %r: %s is back at %s, " + outcome, name, site, utc(at), utc(recover_by), replicas)


def with_recoveries(plan: Plan, fixed: Mapping[_Key, tuple[float, str]]) -> Plan:
    """``plan`` with each whole-replica handover keyed ``(replica, old owner, switch)`` in ``fixed`` recovered.

    ``fixed`` gives ``(recover_from, recoverer)`` (see :attr:`spanedge.plan.Handover.recoverer`).
    """
    handovers = tuple(
        dataclasses.replace(h, recover_from=fix[0], recoverer=fix[1])
        if (fix := fixed.get((h.replica, h.source, h.switch_at))) is not None and not h.keyed
        else h
        for h in plan.handovers
    )
    return plan if handovers == plan.handovers else dataclasses.replace(plan, handovers=handovers)


def utc(t: float) -> str:
    """Event time ``t`` (epoch seconds) as UTC, to the millisecond."""
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds")
