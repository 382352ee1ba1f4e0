"""Checkpoints: pipeline snapshots committed together with the records they produced.

The agent hands every pipeline's outputs to a :class:`Checkpointer`; a
commit stores the pending hub-bound records and the snapshot of each
pipeline that changed in one outbox transaction. Only then are intake
messages acknowledged and local sinks served, so after a crash the restored
state, the outbox and the redelivered messages line up: no open window is
lost and no window is emitted twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import orjson

from edge_agent.outbox import Outbox
from spanedge.runtime import DeadLetter, HubRecord, Outputs, Pipeline, SinkItem

log = logging.getLogger(__name__)


def encode(pipeline: Pipeline) -> bytes:
    """Serialise a pipeline's snapshot."""
    return orjson.dumps(pipeline.snapshot())


def restore(outbox: Outbox, app: str, pipeline: Pipeline, skip: Iterable[str] = ()) -> bool:
    """Restore ``pipeline`` from the last checkpoint of ``app``, but not the windows in ``skip``; True if there was one."""
    blob = outbox.load_state(app)
    if blob is None:
        return False
    try:
        data = orjson.loads(blob)
        left_out = set(skip)
        if left_out and isinstance(data, dict) and isinstance(data.get("windows"), dict):
            data["windows"] = {r: w for r, w in data["windows"].items() if r not in left_out}
        pipeline.restore(data)
    except (orjson.JSONDecodeError, TypeError, ValueError, KeyError) as exc:
        log.error("checkpoint of app %s is unreadable (%s); starting with empty window state", app, exc)
        return False
    return True


@dataclass
class Committed:
    """What became durable in one commit, to be acted on afterwards."""

    sinks: list[tuple[str, SinkItem]] = field(default_factory=list)
    dlq: list[tuple[str, DeadLetter]] = field(default_factory=list)
    late: list[tuple[str, DeadLetter]] = field(default_factory=list)
    stored: int = 0
    #: per app, the event time every sink value here lies at or past (its sink frontier at the commit before)
    sink_floor: dict[str, float] = field(default_factory=dict)


class Checkpointer:
    """Collects pipeline outputs and commits them with snapshots.

    Args:
        outbox: where records and snapshots go.
        pipelines: the live pipelines by app name (the dict may change between commits).
        interval: seconds between periodic checkpoints when nothing forces one.
    """

    def __init__(self, outbox: Outbox, pipelines: dict[str, Pipeline], interval: float = 1.0) -> None:
        self.outbox = outbox
        self.pipelines = pipelines
        self.interval = interval
        self._records: dict[str, list[HubRecord]] = {}
        self._after = Committed()
        self._dirty: set[str] = set()
        self.last_commit = time.monotonic()
        #: each app's frontier at the last commit: the event time below which it sends the hub nothing after it
        self.frontiers: dict[str, float] = {}
        #: each app's sink frontier at the last commit: below it, its local sinks get nothing after the commit
        self.sink_frontiers: dict[str, float] = {}

    def collect(self, app: str) -> None:
        """Take the outputs of ``app``'s pipeline into the pending commit."""
        out: Outputs = self.pipelines[app].take()
        self._dirty.add(app)
        if not out:
            return
        if out.to_hub:
            self._records.setdefault(app, []).extend(out.to_hub)
        self._after.sinks.extend((app, s) for s in out.sinks)
        self._after.dlq.extend((app, d) for d in out.dlq)
        self._after.late.extend((app, d) for d in out.late)

    @property
    def due(self) -> bool:
        """True when the periodic checkpoint interval has passed."""
        return bool(self._dirty) and time.monotonic() - self.last_commit >= self.interval

    def commit(self, extra: Mapping[str, bytes] | None = None, drop: Iterable[str] = ()) -> Committed:
        """Store pending records and snapshots of changed pipelines atomically; return what to act on.

        ``extra`` holds more named blobs to store in the same transaction, ``drop`` names blobs it deletes.
        """
        states = {app: encode(self.pipelines[app]) for app in self._dirty if app in self.pipelines}
        if extra:
            states.update(extra)
        # every output so far is in this commit, so later ones lie at or past each pipeline's frontier now
        frontiers = {app: f for app, p in self.pipelines.items() if (f := p.frontier()) is not None}
        stored = self.outbox.commit(self._records, states, frontiers, drop)
        self.frontiers = frontiers
        floor = self.sink_frontiers
        self.sink_frontiers = {app: f for app, p in self.pipelines.items() if (f := p.sink_frontier()) is not None}
        done, self._after = self._after, Committed()
        done.sink_floor = floor
        done.stored = stored
        self._records = {}
        self._dirty = set()
        self.last_commit = time.monotonic()
        return done
