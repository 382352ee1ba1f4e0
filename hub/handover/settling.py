"""When a handover is over: an app's re-plans wait until no replica is still half-way through a move.

A re-plan that moves a replica again drops the plan's earlier handover of
it (:func:`hub.handover.switches.stamp_handovers`), and with it the old side's part:
a spoke that was still finishing its windows before the earlier switch, or
the hub's query of the old placement that had not written its share yet
(its first micro-batches can take many seconds on a busy hub). So the
coordinator holds back an app's drift and capacity re-plan whose plan
would drop a handover of the plan in force that is not over yet:

* by event time: the coordinator's clock is past the switch by the longest
  window the move concerns (size or gap, plus allowed lateness; with the
  hub at one end, the windows downstream of the moved replicas too; between
  spokes, a session window's part may run until the cut), plus a margin for
  the old side's last results to travel;
* at the hub: every query that writes a share ending at a switch, and that
  the new plan would stop, has reported a watermark past that end and the
  longest window it computes (:meth:`hub.engine.lifecycle.Lifecycle.unsettled`); a
  query the new plan keeps goes on with its share.

A site that joined (:class:`spanedge.plan.Join`) has no old side at the
spokes; at the hub, the query of the placement without it writes the results
before its switch, and holds a re-plan back the same way.

A site that is gone for good is re-planned around at once: its handovers
could never settle. A handover (or join) older than a plan keeps listing one
(:data:`hub.handover.switches.DEFAULT_KEEP_S`) holds nothing back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from hub.handover.switches import DEFAULT_KEEP_S, concerned_windows
from spanedge.app import App
from spanedge.plan import Handover, Join, Plan, split_replica
from spanedge.runtime.windows import SESSION_CUT_S

log = logging.getLogger(__name__)


def window_span(app: App, operators: set[str], *, downstream: bool, session_hold: float = 0.0) -> float:
    """The longest window among ``operators`` (and, with ``downstream``, the windows downstream).

    A window's span is its size (a session window's: its gap plus
    ``session_hold``) plus its allowed lateness.
    """
    spans = [
        (spec.size or (spec.gap or 0.0) + session_hold) + spec.allowed_lateness
        for spec in concerned_windows(app, operators, downstream=downstream)
    ]
    return max(spans, default=0.0)


def settles_at(plan: Plan, app: App, handover: Handover, margin: float) -> float:
    """The event time after which ``handover``'s old side has emitted everything before its switch.

    Between spokes, a session that began before the switch stays with the
    old owner until it pauses, at the latest until the cut
    (:data:`spanedge.runtime.windows.SESSION_CUT_S` after the switch).
    """
    via_hub = plan.hub in (handover.source, handover.target)
    operator = split_replica(handover.replica)[0]
    hold = 0.0 if via_hub else SESSION_CUT_S
    return handover.switch_at + window_span(app, {operator}, downstream=via_hub, session_hold=hold) + margin


def live(plan: Plan, now: float, keep: float = DEFAULT_KEEP_S) -> list[Handover]:
    """The handovers of ``plan`` a re-plan at ``now`` would still list (a later one drops them anyway)."""
    return [h for h in plan.handovers if now < h.switch_at + keep]


def live_joins(plan: Plan, now: float, keep: float = DEFAULT_KEEP_S) -> list[Join]:
    """The joins of ``plan`` a re-plan at ``now`` would still list."""
    return [j for j in plan.joins if now < j.switch_at + keep]


def unsettled(plan: Plan, app: App, now: float, margin: float) -> list[Handover]:
    """The live handovers of ``plan`` not yet over by event time at ``now`` (empty: all over)."""
    return [h for h in live(plan, now) if now < settles_at(plan, app, h, margin)]


@dataclass
class SettleWatch:
    """Holds back a re-plan that would drop a handover of the plan in force before it is over; logs each change.

    Attributes:
        clock: the event-time clock (the coordinator's).
        margin: seconds past a handover's last window for its old side's results to arrive.
        hub_unsettled: per app and proposed plan, the hub queries still writing a share that the plan
            would stop (``hub.engine.engine.Engine.unsettled``).
    """

    clock: Callable[[], float]
    margin: float
    hub_unsettled: Callable[[str, Plan], list[str]] = lambda _app, _plan: []
    _waiting: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def blocks(self, name: str, current: Plan, proposed: Plan, app: App) -> bool:
        """True if ``proposed`` drops a handover of ``current`` that is not over, by event time or at the hub.

        A handover ``proposed`` keeps listing (its replica did not move again)
        goes on, as does a hub query it keeps running, with its share.
        """
        now = self.clock()
        pending = tuple(
            f"{h.replica} {h.source}→{h.target} (switch {h.switch_at:.0f}, "
            f"over at {settles_at(current, app, h, self.margin):.0f})"
            for h in unsettled(current, app, now, self.margin)
            if h not in proposed.handovers
        )
        if not pending and (live(current, now) or live_joins(current, now)):
            pending = tuple(self.hub_unsettled(name, proposed))
        if pending != self._waiting.get(name, ()):
            self._waiting[name] = pending
            if pending:
                log.info("app %r: re-plans wait until its handovers are over: %s", name, "; ".join(pending))
            else:
                log.info("app %r: its handovers are over; re-plans may move its replicas again", name)
        return bool(pending)
