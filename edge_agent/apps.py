"""The apps a site runs: one pipeline per app, (re)built from plans and restored from checkpoints."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from edge_agent import checkpoint
from edge_agent.config import AgentConfig
from edge_agent.outbox import Outbox
from edge_agent.plans import app_of
from edge_agent.rollback import Rollbacks
from spanedge.errors import SpanEdgeError
from spanedge.plan import Handover, Plan
from spanedge.runtime import Pipeline, from_plan

log = logging.getLogger(__name__)


class Apps:
    """The pipelines of the apps one site runs, kept in step with the plans it is given.

    ``pipelines`` is one dict for the agent's lifetime (the checkpointer holds it too); :meth:`apply`
    changes it in place.

    Args:
        config: the agent settings (the site and the pipelines' event-time options).
        outbox: where the pipelines' checkpoints are; a (re)built pipeline is restored from them.
    """

    def __init__(self, config: AgentConfig, outbox: Outbox) -> None:
        self.config = config
        self.outbox = outbox
        self.pipelines: dict[str, Pipeline] = {}
        self.plans: dict[str, Plan] = {}
        # handovers whose part here is done: (app, replica, switch time)
        self.retired: set[tuple[str, str, float]] = set()
        # what their parts sent the hub last, per stream: [site, stream, epoch, seq] (see handed_over)
        self.sent: dict[tuple[str, str, float], list[list[Any]]] = {}
        #: the previous versions' state of changed windows, kept for a rollback
        self.rollbacks = Rollbacks(outbox, self.pipelines, config.rollback_spool_bytes)

    def retire_drained(self) -> list[str]:
        """Drop the replicas this site handed over and has finished; return the apps rebuilt.

        The caller commits pending outputs first and rewires the intake after.
        """
        rebuilt = []
        for name, pipeline in list(self.pipelines.items()):
            done = pipeline.drained()
            if not done:
                continue
            plan = self.plans[name]
            moves = self._moves(name)
            self.retired.update((name, replica, moves[replica].switch_at) for replica in done if replica in moves)
            self.record_sent([(name, replica) for replica in done])
            log.info("app %s: handed over %s; the new owner has the later windows", name, ", ".join(done))
            self.apply_one(plan)
            rebuilt.append(name)
        return rebuilt

    def _moves(self, name: str) -> dict[str, Handover]:
        """The handovers of app ``name``'s plan that this site is the old owner of, by replica."""
        plan = self.plans.get(name)
        return {h.replica: h for h in plan.handovers if h.source == self.config.site} if plan is not None else {}

    def newly_delivered(self) -> list[tuple[str, str]]:
        """``(app, replica)`` of the handover parts here that have emitted everything and are not reported yet.

        The caller commits pending outputs, then calls :meth:`record_sent`.
        """
        out = []
        for name, pipeline in self.pipelines.items():
            done = pipeline.delivered()
            moves = self._moves(name) if done else {}
            out += [(name, r) for r in done if r in moves and (name, r, moves[r].switch_at) not in self.sent]
        return out

    def record_sent(self, parts: Iterable[tuple[str, str]]) -> None:
        """Note the last sequence number of each stream the handover parts ``(app, replica)`` sent the hub."""
        for name, replica in parts:
            h = self._moves(name).get(replica)
            if h is None:
                continue
            group = self.plans[name].assignment(replica).group or self.config.site
            last = self.outbox.last_seqs(name, group, h.epoch)
            self.sent[(name, replica, h.switch_at)] = [[group, stream, h.epoch, seq] for stream, seq in last]

    def handed_over(self) -> list[dict[str, Any]]:
        """The handovers whose part here is done and that the plans still list, with what the part sent last.

        A part counts once it has emitted everything (:meth:`newly_delivered`),
        or at the latest once it is dropped. The hub holds its windows' later
        records back until its log holds those records
        (:mod:`hub.handover.holds`); the heartbeat carries this list.
        """
        out = []
        for (name, replica, switch), sent in sorted(self.sent.items()):
            h = self._moves(name).get(replica)
            if h is not None and h.switch_at == switch:
                out.append({"app": name, "replica": replica, "switch_at": switch, "sent": sent})
        return out

    def apply(self, plans: Iterable[Plan]) -> None:
        """(Re)build the pipelines of ``plans`` from their last checkpoints; stop apps no longer listed.

        An app whose plan cannot be run is logged and keeps its current pipeline, if any.
        """
        wanted = {plan.app: plan for plan in plans}
        for name in list(self.pipelines):
            if name not in wanted:
                log.info("stopping app %s (no longer in the plan)", name)
                del self.pipelines[name]
                self.plans.pop(name, None)
        for plan in wanted.values():
            self.apply_one(plan)

    def apply_one(self, plan: Plan) -> None:
        """(Re)build the pipeline of one app's plan from its last checkpoint.

        The replicas it keeps keep their counts of records in and out: a plan
        sent again (by a restarted hub, say) does not reset them.
        """
        name = plan.app
        pipeline = self._build(plan)
        if pipeline is None:
            return
        self._drop_recovered(plan)
        old = self.pipelines.get(name)
        kept = self.rollbacks.on_plan(plan, self.plans.get(name), old, pipeline)
        if checkpoint.restore(self.outbox, name, pipeline, skip=kept.windows if kept is not None else ()):
            log.info("app %s: restored window state from the checkpoint", name)
        if kept is not None:
            self.rollbacks.resume(kept, plan, pipeline, **self._options())
        if old is not None:
            counts = {n.replica: (n.n_in, n.n_out) for n in old.nodes}
            for node in pipeline.nodes:
                node.n_in, node.n_out = counts.get(node.replica, (0, 0))
        self.pipelines[name] = pipeline
        self.plans[name] = plan
        if not pipeline.nodes:
            log.info("app %s: the plan runs nothing at site %s", name, self.config.site)

    def _drop_recovered(self, plan: Plan) -> None:
        """Drop from the outbox what this site's parts that another site recomputed still had to send.

        A site back after the hub counted it gone finds its part of a handover
        recomputed by the replica's source site (``Handover.recoverer``): its
        results not yet sent would repeat those.
        """
        for h in plan.handovers:
            if h.source != self.config.site or h.recoverer is None:
                continue
            group = plan.assignment(h.replica).group or self.config.site
            dropped = self.outbox.discard(plan.app, group, h.epoch)
            if dropped:
                log.warning(
                    "app %s: %s recomputed this site's part of %s while it was gone; dropped the %d results "
                    "of it not yet sent to the hub",
                    plan.app,
                    h.recoverer,
                    h.replica,
                    dropped,
                )

    def _options(self) -> dict[str, Any]:
        """The pipelines' event-time options."""
        config = self.config
        return {
            "out_of_orderness": config.out_of_orderness,
            "max_future_skew": config.max_future_skew,
            "idle_timeout": config.idle_timeout,
        }

    def _build(self, plan: Plan) -> Pipeline | None:
        retired = {h.replica for h in plan.handovers if (plan.app, h.replica, h.switch_at) in self.retired}
        try:
            return from_plan(app_of(plan), plan, self.config.site, retired=retired, **self._options())
        except SpanEdgeError as exc:
            log.error("cannot run app %s: %s", plan.app, exc)
            return None
