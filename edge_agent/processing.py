"""Processing: intake messages through the pipelines, committed before they are acknowledged.

A :class:`Processor` routes each site-broker message to the pipeline sources it
feeds (:class:`~edge_agent.intake.Intake`), skipping a redelivery of a message
already committed (:class:`~edge_agent.intake.Redeliveries`); a message over its
stream's ``max_message_bytes`` is dead-lettered with its size and topic, unread. A commit stores
the pipelines' hub-bound records, their snapshots and the redelivery memory in
one outbox transaction (:class:`~edge_agent.checkpoint.Checkpointer`); only
then are the messages acknowledged and the local sinks served
(:class:`~edge_agent.sinks.LocalSinks`). With an ``idle_timeout``, a tick lets
the watermarks of quiet pipelines move, and what it fires is committed the
same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from edge_agent.checkpoint import Checkpointer
from edge_agent.intake import Intake, Redeliveries
from edge_agent.mqtt.transport import Message
from edge_agent.outbox import Outbox
from edge_agent.rollback import Rollbacks
from edge_agent.sinks import LocalSinks
from spanedge.runtime import Pipeline

#: The outbox state name of the redelivery memory.
INTAKE_STATE = "__intake__"


class Processor:
    """Runs intake messages through the pipelines and makes their effects durable before acknowledging them.

    Args:
        pipelines: the running pipelines by app (the dict may change between calls).
        outbox: where commits go; the redelivery memory of the last run is read from it.
        intake: the site-broker connections and the routes of their messages.
        sinks: serves what a commit made durable.
        checkpoint_interval: seconds between checkpoints when no acknowledgement forces one.
        idle_timeout: the pipelines' idle timeout (``None`` or 0: no ticks).
        on_stored: called after a commit stored records for the hub (e.g. to wake the drain).
        rollbacks: spools the messages of the sources feeding changed windows; its parts go in every commit.
    """

    def __init__(
        self,
        pipelines: dict[str, Pipeline],
        outbox: Outbox,
        intake: Intake,
        sinks: LocalSinks,
        *,
        checkpoint_interval: float = 1.0,
        idle_timeout: float | None = None,
        on_stored: Callable[[], None] = lambda: None,
        rollbacks: Rollbacks | None = None,
    ) -> None:
        self.pipelines = pipelines
        self.rollbacks = rollbacks
        self.intake = intake
        self.sinks = sinks
        self.on_stored = on_stored
        self.checkpointer = Checkpointer(outbox, pipelines, checkpoint_interval)
        self.redeliveries = Redeliveries()
        blob = outbox.load_state(INTAKE_STATE)
        if blob is not None:
            self.redeliveries.load(blob)
        self.tick_interval = min(1.0, idle_timeout / 4) if idle_timeout else None
        self.touched: set[str] = set()
        self._acks: list[Message] = []
        self._next_tick = 0.0

    def handle(self, messages: list[Message]) -> None:
        """Feed site-broker messages to the pipeline sources they are routed to.

        A QoS 1 message is acknowledged by the next :meth:`flush`; a redelivery of one already
        committed is only acknowledged. A message from a connection closed since it arrived is
        skipped: the broker redelivers it.
        """
        pipelines = self.pipelines
        live = self.intake.live()
        route, seen, acks, touched = self.intake.route, self.redeliveries.seen, self._acks, self.touched
        rollbacks = self.rollbacks
        spooling = rollbacks.spooling if rollbacks is not None else None
        for m in messages:
            if m.source not in live:
                continue  # from a connection closed by a new plan; the broker redelivers it
            if m.qos:
                acks.append(m)
                if seen(m):
                    continue  # processed before its acknowledgement was lost: acknowledge it only
            size = m.size
            for app, replica, limit in route(m):
                if m.problem:  # a connector's value that does not fit: dead-lettered with its node or register
                    pipelines[app].reject(replica, m.problem, m.payload, m.topic)
                elif size > limit:  # dead-lettered unread, committed and acknowledged like any message
                    pipelines[app].refuse(replica, size, limit, m.topic)
                else:
                    pipelines[app].process(replica, m.payload, m.arrival)
                    if spooling and replica in spooling.get(app, ()):
                        assert rollbacks is not None
                        rollbacks.spool(app, replica, m.payload, m.arrival)
                touched.add(app)

    def tick(self) -> None:
        """Let pipelines whose input went idle advance their watermark (``idle_timeout``).

        A pipeline that moved is marked touched, so what it fired is collected, committed with its
        snapshot and served by the next :meth:`flush`, exactly like the outputs of :meth:`handle`.
        """
        assert self.tick_interval is not None
        self._next_tick = time.monotonic() + self.tick_interval
        for name, pipeline in self.pipelines.items():
            if pipeline.tick():
                self.touched.add(name)

    def step(self) -> None:
        """Tick if a tick is due, then flush if acknowledgements wait or a checkpoint is due."""
        if self.tick_interval is not None and time.monotonic() >= self._next_tick:
            self.tick()
        checkpointer = self.checkpointer
        interval_passed = time.monotonic() - checkpointer.last_commit >= checkpointer.interval
        kept = self.rollbacks is not None and self.rollbacks.pending
        if self._acks or checkpointer.due or (self.touched and interval_passed) or kept:
            self.flush()

    def flush(self) -> None:
        """Commit pending outputs and snapshots, then acknowledge the intake and serve the sinks."""
        if self.rollbacks is not None and self.rollbacks.resumed:  # with their kept state deleted (commit_parts)
            self.touched |= self.rollbacks.resumed
            self.rollbacks.resumed.clear()
        for app in self.touched:
            if app in self.pipelines:
                self.checkpointer.collect(app)
        self.touched.clear()
        acks, self._acks = self._acks, []
        self.redeliveries.committed(acks)
        extra = {INTAKE_STATE: self.redeliveries.to_blob()} if acks else {}
        drop: list[str] = []
        if self.rollbacks is not None:
            kept, drop = self.rollbacks.commit_parts()
            extra.update(kept)
        done = self.checkpointer.commit(extra, drop)
        for m in acks:
            m.source.ack(m.mid, m.qos)
        self.sinks.serve(done)
        if done.stored:
            self.on_stored()
