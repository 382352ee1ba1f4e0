"""Recovering a gone spoke's part: the source site's spool, and the part recomputed from it.

A spoke that runs replicas for another site (offloaded to it) and dies for
good takes their open windows and its undelivered results with it. Their
input came from the source site's broker, so the source site keeps it: its
agent subscribes to its own sensor streams that another spoke consumes and
spools them on disk (:class:`Spool`, ``<state dir>/spool.db``, for
``keep_s``, 15 minutes by default), over a connection of its own
(:class:`SpoolFeed`).

When the hub re-plans around the gone spoke, each handover away from it
names the source site as ``recoverer`` and the origin from which the gone
spoke had not delivered everything (``recover_from``, its last announced
frontier; see :class:`spanedge.plan.Handover`). The source site then
recomputes the gone spoke's part (:func:`spanedge.runtime.recovery_part`:
the windows starting, or records timed, in ``[recover_from, switch)``) from
its spool (:class:`Recoveries`): once the part's last window has fired, or
``FLUSH_AFTER_S`` after the switch whatever its input, its results go to the
hub in one outbox commit with a mark that the part is done (a restart midway
starts over; one after it sends nothing twice), its sink values to the
site's broker, and its heartbeats report the part like an old owner reports
its own (:mod:`hub.handover.holds`), so the hub's windows wait for it. The
hub drops the results the gone spoke had delivered after its last frontier
(:mod:`hub.handover.recovered`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.checkpoint import Committed
from edge_agent.intake import topic_matches
from edge_agent.mqtt.transport import Inbox, Message, Transport, TransportFactory
from edge_agent.outbox import Outbox
from spanedge.app import App
from spanedge.errors import SpanEdgeError
from spanedge.keyrange import recovery_epoch
from spanedge.operators import Kind
from spanedge.plan import Handover, Plan, split_replica
from spanedge.private_files import create_private, private_dir
from spanedge.runtime import Pipeline, recovery_part
from spanedge.sites import Sites

log = logging.getLogger(__name__)

DEFAULT_KEEP_S = 900.0
"""How long the spool keeps a message: the grace period, the re-plan and the longest window, with room."""
FEED_MARGIN_S = 60.0
"""Spooled messages that arrived this long before ``recover_from`` are fed too (clock skew, late arrivals)."""
FLUSH_AFTER_S = 120.0
"""Seconds after the switch when a part still open is finished with what the spool holds."""
FEED_BATCH = 5000
"""Spooled messages fed to the parts in one step."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool (
    id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload BLOB NOT NULL, arrival REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS spool_arrival ON spool (arrival);
"""


def spooled_streams(site: str, plan: Plan, app: App) -> list[str]:
    """The streams of ``site`` that another spoke consumes in ``plan`` of ``app``, or may have to recompute.

    A source of ``site`` counts if it feeds a replica another spoke runs, or
    one handed over from another spoke (its old owner may die mid-handover),
    or one whose gone old owner's part ``site`` recovers.
    """
    recovering = {h.replica for h in plan.recoveries(site)}
    others = {h.replica for h in plan.handovers if h.source not in (site, plan.hub)}
    streams = []
    for flow in plan.flows:
        stream, group = split_replica(flow.src)
        op = app.operators.get(stream)
        if group != site or stream in streams or op is None or op.kind is not Kind.SOURCE:
            continue
        away = plan.site_of_or_none(flow.dst) not in (site, plan.hub, None)
        if away or flow.dst in others or flow.dst in recovering:
            streams.append(stream)
    return streams


class Spool:
    """The messages of this site's sensor streams that other spokes consume, on disk for ``keep_s``."""

    def __init__(self, path: Path, keep_s: float = DEFAULT_KEEP_S, clock: Callable[[], float] = time.time) -> None:
        """Open (or create) the spool at ``path``."""
        private_dir(path.parent)
        create_private(path)
        self.keep_s = keep_s
        self.clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA cache_size=-512")  # KiB: the agent's memory is small; reads go in order
        self._db.executescript(_SCHEMA)
        self._pruned_at = 0.0

    def add(self, messages: Iterable[Message]) -> int:
        """Store ``messages`` (the caller acknowledges them after); return how many."""
        rows = [(m.topic, bytes(m.payload), m.arrival) for m in messages]
        if not rows:
            return 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT INTO spool (topic, payload, arrival) VALUES (?, ?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        self.prune()
        return len(rows)

    def read(self, after_id: int, arrived_from: float, limit: int = FEED_BATCH) -> list[tuple[int, str, bytes, float]]:
        """Up to ``limit`` messages after ``after_id`` that arrived at or after ``arrived_from``, in arrival order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, topic, payload, arrival FROM spool WHERE id > ? AND arrival >= ? ORDER BY id LIMIT ?",
                (after_id, arrived_from, limit),
            ).fetchall()
        return [(int(i), str(t), bytes(p), float(a)) for i, t, p, a in rows]

    def oldest(self) -> float | None:
        """The arrival time of the oldest message kept (None: empty)."""
        with self._lock:
            row = self._db.execute("SELECT MIN(arrival) FROM spool").fetchone()
        return None if row[0] is None else float(row[0])

    def prune(self, *, forced: bool = False) -> None:
        """Drop the messages older than ``keep_s`` (at most every 10 s unless ``forced``)."""
        now = self.clock()
        if now - self._pruned_at < 10.0 and not forced:
            return
        self._pruned_at = now
        with self._lock:
            self._db.execute("DELETE FROM spool WHERE arrival < ?", (now - self.keep_s,))

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


class SpoolFeed:
    """Keeps the spool fed: a connection to this site's broker for the streams :func:`spooled_streams` names.

    Args:
        site: this agent's site.
        sites: the site descriptions (the site's broker and stream topics).
        spool: where the spooled messages go.
        inbox: where the connection delivers (the agent's; :meth:`take` picks its messages out).
        connect: builds the connection, on the first stream to spool.
    """

    def __init__(self, site: str, sites: Sites, spool: Spool, inbox: Inbox, connect: TransportFactory) -> None:
        self.site = site
        self.sites = sites
        self.spool = spool
        self.inbox = inbox
        self.connect = connect
        self.link: Transport | None = None

    def update(self, plans: Mapping[str, Plan], apps: Mapping[str, App]) -> None:
        """Subscribe to the streams the apps' ``plans`` spool; prune the spool when there are none."""
        streams = sorted({s for name, plan in plans.items() for s in spooled_streams(self.site, plan, apps[name])})
        bindings = self.sites.site(self.site).streams
        filters = sorted({(bindings[s].topic, 1) for s in streams if s in bindings and bindings[s].topic})
        limit = max((bindings[s].max_message_bytes for s in streams if s in bindings), default=None)
        link = self.link
        if not filters:
            if link is not None and link.filters:
                link.unsubscribe([f for f, _ in link.filters])
            self.spool.prune(forced=True)
            return
        if link is None:
            link = self.link = self.connect(
                self.sites.site(self.site).mqtt(),
                f"spanedge-{self.site}-spool",
                f"site broker ({self.site}, spool)",
                inbox=self.inbox,
            )
            link.start()
        link.max_message_bytes = limit
        stale = [f for f, _ in link.filters if (f, 1) not in filters]
        if stale:
            link.unsubscribe(stale)
        link.subscribe(filters)

    def take(self, messages: list[Message]) -> list[Message]:
        """Spool and acknowledge the messages of the spool's connection; return the others.

        One over the largest ``max_message_bytes`` of the spooled streams is acknowledged only: the
        live replica at its own site dead-letters it.
        """
        link = self.link
        if link is None or not any(m.source is link for m in messages):
            return messages
        ours = [m for m in messages if m.source is link]
        limit = link.max_message_bytes
        self.spool.add([m for m in ours if limit is None or m.size <= limit])
        for m in ours:
            link.ack(m.mid, m.qos)
        return [m for m in messages if m.source is not link]

    def stop(self) -> None:
        """Close the connection (the spool stays open for :meth:`close`)."""
        if self.link is not None:
            self.link.stop()

    def close(self) -> None:
        """Close the spool."""
        self.spool.close()


@dataclass
class _Part:
    """One gone spoke's part of one app being recomputed here."""

    app: str
    dead: str
    moves: list[Handover]
    pipeline: Pipeline
    routes: list[tuple[str, str]]  # (topic filter, source replica)
    feed_from: float  # spooled messages that arrived before this are not needed
    fed_id: int = 0
    fed: int = 0

    @property
    def start(self) -> float:
        return min(h.recover_from for h in self.moves if h.recover_from is not None)

    @property
    def switch(self) -> float:
        return max(h.switch_at for h in self.moves)


def done_key(app: str, replica: str, switch_at: float) -> str:
    """The outbox state name marking a recovered part as committed."""
    return f"recovered\x00{app}\x00{replica}\x00{switch_at!r}"


class Recoveries:
    """The gone spokes' parts this site recomputes from its spool.

    Args:
        site: this site.
        sites: the topology (the topics this site binds its streams to).
        outbox: where the results go, with the marks of the parts done.
        spool: the spooled messages.
        serve: delivers a commit's sink values and dead letters (:meth:`edge_agent.sinks.LocalSinks.serve`).
        on_stored: called after results were stored (wakes the drain).
        now: the clock a part's switch is compared with.
        options: the pipelines' options (``out_of_orderness``, ``max_future_skew``, ``clock``).
    """

    def __init__(
        self,
        site: str,
        sites: Sites,
        outbox: Outbox,
        spool: Spool,
        serve: Callable[[Committed], None],
        on_stored: Callable[[], None] = lambda: None,
        now: Callable[[], float] = time.time,
        **options: Any,
    ) -> None:
        self.site = site
        self.sites = sites
        self.outbox = outbox
        self.spool = spool
        self.serve = serve
        self.on_stored = on_stored
        self.now = now
        self.options = options
        self.parts: dict[tuple[str, str], _Part] = {}
        self.plans: dict[str, Plan] = {}

    def update(self, plans: Mapping[str, Plan], apps: Mapping[str, App]) -> None:
        """Start recomputing the parts the plans give this site that are not done yet; drop those no longer listed.

        ``apps`` are the plans' apps, by name.
        """
        self.plans = dict(plans)
        wanted: dict[tuple[str, str], list[Handover]] = {}
        for name, plan in plans.items():
            for h in plan.recoveries(self.site):
                if self.outbox.load_state(done_key(name, h.replica, h.switch_at)) is None:
                    wanted.setdefault((name, h.source), []).append(h)
        for key in [k for k in self.parts if k not in wanted]:
            log.info("app %s: the plan no longer asks for %s's part; stopped recomputing it", *key)
            del self.parts[key]
        for (name, dead), moves in wanted.items():
            part = self.parts.get((name, dead))
            if part is not None and {(h.replica, h.switch_at) for h in part.moves} == {
                (h.replica, h.switch_at) for h in moves
            }:
                continue
            built = self._build(apps[name], plans[name], dead, moves)
            if built is not None:
                self.parts[(name, dead)] = built

    def _build(self, app: App, plan: Plan, dead: str, moves: list[Handover]) -> _Part | None:
        try:
            pipeline = recovery_part(app, plan, self.site, dead, **self.options)
        except SpanEdgeError as exc:
            log.error("app %s: cannot recompute %s's part: %s", plan.app, dead, exc)
            return None
        if pipeline is None:
            return None
        routes = []
        for replica in pipeline.sources:  # source nodes only
            binding = self.sites.site(self.site).streams.get(split_replica(replica)[0])
            if binding is not None and binding.topic:  # connector streams are not spooled
                routes.append((binding.topic, replica))
        owned = [n.owns[0] for n in pipeline.nodes if n.owns is not None]
        feed_from = min(owned, default=min(h.recover_from or h.switch_at for h in moves)) - FEED_MARGIN_S
        part = _Part(plan.app, dead, moves, pipeline, routes, feed_from)
        oldest = self.spool.oldest()
        log.warning(
            "app %s: %s is gone; recomputing its part of %s from origin %.3f to the switch at %.3f from the "
            "messages spooled here%s",
            plan.app,
            dead,
            ", ".join(sorted(h.replica for h in moves)),
            part.start,
            part.switch,
            ""
            if oldest is not None and oldest <= part.feed_from + FEED_MARGIN_S
            else f" (the spool starts at {oldest}: what came before is lost)"
            if oldest is not None
            else " (the spool is empty: its part is lost)",
        )
        return part

    @property
    def pending(self) -> bool:
        """True while a part is being recomputed."""
        return bool(self.parts)

    def step(self) -> None:
        """Feed each part what the spool has for it; commit and deliver the parts that are done."""
        for key, part in list(self.parts.items()):
            rows = self.spool.read(part.fed_id, part.feed_from)
            for ident, topic, payload, arrival in rows:
                part.fed_id = ident
                for topic_filter, replica in part.routes:
                    if topic_matches(topic_filter, topic):
                        part.pipeline.process(replica, payload, arrival)
                        part.fed += 1
            if len(rows) == FEED_BATCH:
                continue  # more to read first
            late = self.now() > part.switch + FLUSH_AFTER_S
            if not part.pipeline.drained() and not late:
                continue
            if late and not part.pipeline.drained():
                log.warning(
                    "app %s: %s's part is still open %g s after the switch; finishing it with what the spool holds",
                    part.app,
                    part.dead,
                    FLUSH_AFTER_S,
                )
                part.pipeline.flush()
            self._finish(part)
            del self.parts[key]

    def _finish(self, part: _Part) -> None:
        out = part.pipeline.take()
        marks = {done_key(part.app, h.replica, h.switch_at): b"1" for h in part.moves}
        stored = self.outbox.commit({part.app: out.to_hub}, marks)
        log.info(
            "app %s: recomputed %s's part of %s from %d spooled messages: %d records to the hub, %d sink values",
            part.app,
            part.dead,
            ", ".join(sorted(h.replica for h in part.moves)),
            part.fed,
            stored,
            len(out.sinks),
        )
        self.serve(
            Committed(
                sinks=[(part.app, s) for s in out.sinks],
                dlq=[(part.app, d) for d in out.dlq],
                late=[(part.app, d) for d in out.late],
            )
        )
        if stored:
            self.on_stored()

    def reports(self) -> list[dict[str, Any]]:
        """The recovered parts the plans still list, with what they sent the hub last (heartbeat ``handed_over``)."""
        out = []
        for name, plan in sorted(self.plans.items()):
            for h in plan.recoveries(self.site):
                if self.outbox.load_state(done_key(name, h.replica, h.switch_at)) is None:
                    continue
                epoch = recovery_epoch(h.epoch)
                sent = [
                    [self.site, stream, epoch, seq] for stream, seq in self.outbox.last_seqs(name, self.site, epoch)
                ]
                out.append({"app": name, "replica": h.replica, "switch_at": h.switch_at, "sent": sent})
        return out
