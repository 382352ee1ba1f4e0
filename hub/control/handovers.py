"""The handovers of the deployed apps: their switch times, what holds the hub's windows and when a move is over.

A plan version that moves replicas gets their handovers stamped
(:mod:`hub.handover.switches`), postponed if deploying the hub's part took
too long; the hub's windows wait for an old owner's last records
(:mod:`hub.handover.holds`) and for the slowest live site
(:mod:`hub.handover.frontiers`); a re-plan waits until the moves in progress
are over (:mod:`hub.handover.settling`); moves from sites gone for good are
recovered where they can be (:mod:`hub.control.recovery`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from hub.control import plan_history
from hub.control.recovery import Recovery
from hub.control.site_returns import SiteReturns
from hub.control.state import AppRecord
from hub.handover.frontiers import SiteFrontiers
from hub.handover.holds import DEFAULT_LIMIT_S, HandoverHolds, Mark
from hub.handover.scope import reader_starts
from hub.handover.settling import SettleWatch
from hub.handover.switches import DEFAULT_DELAY_S, postpone, stamp_handovers
from spanedge.app import App
from spanedge.plan import Plan

HOLD_GONE_S = 60.0
"""Seconds past the grace period a gone site's frontier holds the hub's windows at most, awaiting the re-plan."""

log = logging.getLogger(__name__)


class HandoverControl:
    """Stamps the handovers of new plan versions and tracks them until they are over.

    Attributes:
        delay_s: event-time seconds from a re-plan to the switch of the replicas it moves.
        holds: hub windows waiting for an old owner's last records.
        frontiers: hub windows waiting for the slowest live site.
        returns: sites gone for good whose return would finish their results.
        recovery: what moves from gone sites lose and who recomputes it.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        gone: Callable[[str], bool],
        overdue: Callable[[str, float], bool],
        hub_unsettled: Callable[[str, Plan], list[str]],
        delay_s: float = DEFAULT_DELAY_S,
        wait_s: float = DEFAULT_LIMIT_S,
    ) -> None:
        """Track handovers.

        Args:
            clock: the event-time clock of handovers (seconds).
            gone: whether a site counts as gone (silent past the grace period).
            overdue: whether a site has been silent for longer than the grace period plus the given seconds.
            hub_unsettled: per app and proposed plan, the hub's queries still writing a share it would stop.
            delay_s: event-time seconds from a re-plan to the switch (see :mod:`hub.handover.switches`).
            wait_s: how long after a switch the hub's windows wait at most for a live old owner's last records.
        """
        self._clock = clock
        self._gone = gone
        self._overdue = overdue
        self.delay_s = delay_s
        # a replica moved again before its last handover is over would lose the old side's part
        self._settle = SettleWatch(clock, delay_s, hub_unsettled)
        self.holds = HandoverHolds(wait_s, clock=clock)
        self.frontiers = SiteFrontiers()
        self.returns = SiteReturns()
        self.recovery = Recovery(gone, self.holds, self.frontiers, self.returns)

    def stamp(self, plan: Plan, owners: Plan | None, app: App) -> Plan:
        """``plan`` with a handover for each replica it moves away from its owner in ``owners`` (None: none)."""
        return stamp_handovers(plan, owners, app, self._clock(), delay=self.delay_s)

    def blocks(self, name: str, current: Plan, proposed: Plan, app: App) -> bool:
        """True if ``proposed`` drops a handover of ``current`` that is not over (see :mod:`hub.handover.settling`)."""
        return self._settle.blocks(name, current, proposed, app)

    def postponed(self, app: App, record: AppRecord, replaced: Plan | None) -> AppRecord:
        """``record`` with its switch postponed if deploying it on the engine took it too close (see ``postpone``).

        The caller deploys the returned record's plan on the engine again if it is not ``record``.
        """
        plan = postpone(record.plan, replaced, app, self._clock(), delay=self.delay_s)
        if plan is record.plan or replaced is None:
            return record
        was, now = min(_switches(record.plan, plan)), min(_switches(plan, record.plan))
        log.warning(
            "app %r: deploying plan v%d on the engine took until %.1f s before its switch; the switch moves %.0f s "
            "later, so the sites get the plan in time",
            app.name,
            plan.version,
            was - self._clock(),
            now - was,
        )
        entry = dataclasses.replace(record.history[-1], moved=plan_history.moves(replaced, plan))
        return dataclasses.replace(record, plan=plan, history=[*record.history[:-1], entry])

    def observe(self, site: str, beat: Mapping[str, Any], now: float) -> None:
        """Read the handover reports and frontiers of a heartbeat ``site`` sent, received at ``now``."""
        self.returns.heard(site, now)
        self.holds.observe(site, beat)
        self.frontiers.observe(site, beat)

    def window_hold(self, name: str, plan: Plan, mark: Mark) -> float | None:
        """The event time from which the hub's windows of app ``name``'s ``plan`` wait, or None.

        They wait for an old owner's last records (``mark`` gives the last
        ``seq`` the app's log holds of a (site, stream, epoch)) and for the
        slowest live site, whichever is earlier.
        """
        starts = (
            self.holds.hold_from(plan, mark, partial(self._let_go, plan)),
            self.frontiers.hold_from(name, partial(self._let_go, plan)),
        )
        return min((s for s in starts if s is not None), default=None)

    def reader_holds(self, name: str, plan: Plan, mark: Mark, sinks: Mapping[str, str]) -> dict[str, float]:
        """Per window query's log reader of app ``name``, the event time from which it waits (infinite: not held).

        ``sinks`` gives each reader's sink replica: a query waits only for the
        sites and handovers that can reach it (:mod:`hub.handover.scope`).
        """
        gone = partial(self._let_go, plan)
        return reader_starts(plan, sinks, self.holds.owed(plan, mark, gone), self.frontiers.live(name, gone))

    def _let_go(self, plan: Plan, site: str) -> bool:
        """Whether the hub's windows of ``plan`` stop waiting for gone ``site``'s frontier.

        A gone site that still runs another site's replicas in the plan in force,
        or owes its part of a handover, holds them until the re-plan around it
        hands those to their source site to recompute, which the handover holds
        then wait for; at most :data:`HOLD_GONE_S` past the grace period.
        """
        if not self._gone(site):
            return False
        guests = any(a.site == site and a.group not in (None, site) for a in plan.assignments)
        owes = any(
            h.source == site and h.recoverer is None and not self.holds.delivered(plan.app, h) for h in plan.handovers
        )
        if not guests and not owes:
            return True
        return self._overdue(site, HOLD_GONE_S)

    def take_delivered(self) -> list[tuple[str, str, str, float]]:
        """The moves whose old owner delivered its part since the last call: ``(app, replica, site, at)``."""
        return self.holds.take_delivered()


def _switches(plan: Plan, other: Plan) -> list[float]:
    """The switch times of the handovers and joins of ``plan`` that ``other`` does not list."""
    return [h.switch_at for h in plan.handovers if h not in other.handovers] + [
        j.switch_at for j in plan.joins if j not in other.joins
    ]
