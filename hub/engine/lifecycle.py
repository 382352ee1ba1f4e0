"""Running the hub's queries: deploy and replace them, restart the failed ones, stop them.

One query per sink branch (rather than one per app) gives each branch its
own checkpoint, so redeploying a new version of an app restarts only the
branches whose operators changed (their fingerprint, :mod:`hub.engine.fingerprint`)
and the others keep their window state; a branch that changed reads the
log segments its predecessor had not committed (:mod:`hub.engine.checkpoints`), so
no result is repeated. The parts:

* :mod:`hub.engine.wanted`: the queries a plan runs at the hub, and their handover sides;
* :mod:`hub.engine.builder`: building and starting them;
* :mod:`hub.engine.shares`: the share of a handover's results each one writes;
* :mod:`hub.engine.retirement`: retiring the queries and checkpoints a deployment replaces;
* :mod:`hub.engine.recovery`: restarting the failed ones.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hub.engine.builder import QueryBuilder, Starter
from hub.engine.checkpoints import checkpoint_name
from hub.engine.queries import STOP_DRAIN_S, Deployed, Query, operator_rates
from hub.engine.recovery import Recovery
from hub.engine.retirement import retire_earlier_runs, stop_replaced
from hub.engine.share_progress import leave_note, reported_watermark, share_needs, written_all
from hub.engine.shares import HandoverShares, drop_written
from hub.engine.sinks import MemoryStore
from hub.engine.wanted import name_letter_filers, unchanged, warn_flows_leaving_hub
from hub.ingest import log as ingest_log
from spanedge.errors import InvalidDataflow, InvalidPlan
from spanedge.plan import Plan
from spanedge.sites import Sites

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from hub.engine.input_rates import InputRates
    from hub.engine.late import LateRecords
    from hub.engine.operator_counts import ObservedCounts
    from spanedge.app import App

log = logging.getLogger(__name__)


class Lifecycle:
    """The queries of the apps deployed at the hub, under one lock.

    ``state_dir`` holds ``ingest/<app>/`` (the logs :class:`hub.ingest.consumer.Ingest`
    writes) and ``checkpoints/<app>/<sink>-<hash>/`` (one per query, with
    the sink's last completed batch id).
    """

    def __init__(
        self,
        spark: SparkSession,
        state_dir: Path,
        sites: Sites,
        memory: MemoryStore,
        late: LateRecords,
        trigger: str,
        counts: ObservedCounts | None = None,
        close_windows: bool = True,
        stateless_trigger: str | None = None,
        input_rates: InputRates | None = None,
    ) -> None:
        """Run queries on ``spark`` with micro-batches every ``trigger`` (or ``availableNow``).

        A query that runs no window at the hub takes ``stateless_trigger``
        instead (:class:`hub.engine.builder.Starter`).

        ``counts`` is the listener that totals what the queries observe on their
        operators; without it :meth:`metrics` has no per-operator figures.
        ``input_rates`` gives each query's recent input rows/s; without it
        :meth:`metrics` says Spark's figure for the last batch. With
        ``close_windows``, a sink that reads a window directly closes it at the
        watermark (:mod:`hub.engine.window_close`).
        """
        self.builder = QueryBuilder(spark, state_dir, sites, memory, close_windows)
        self.starter = Starter(trigger, stateless_trigger)
        self.shares = HandoverShares()
        self.recovery = Recovery()
        self.late = late
        self.counts = counts
        self.input_rates = input_rates
        self.apps: dict[str, Deployed] = {}
        self.lock = threading.RLock()

    def log_dir(self, app: str) -> Path:
        """The ingest log directory of ``app``."""
        return self.builder.log_dir(app)

    def checkpoint_root(self, app: str) -> Path:
        """The directory of the checkpoints of ``app``'s queries."""
        return self.builder.checkpoint_root(app)

    # -- deployment ----------------------------------------------------------

    def deploy(self, app: App, plan: Plan) -> None:
        """Start (or restart) the queries of the sinks ``plan`` puts at the hub; see :meth:`hub.engine.engine.Engine.deploy`.

        Every new query is built before any running one stops, so a plan the
        compiler rejects leaves the app as it was. While ``plan`` moves
        replicas to or from the hub, a sink whose query that changes also
        keeps the query of the previous placement, and each writes its share
        of the results (:mod:`hub.handover.cutoffs`).
        """
        warn_flows_leaving_hub(app.name, plan)
        graph, wanted, sides = self.builder.wanted(app, plan)
        with self.lock:
            written = drop_written(self.checkpoint_root(app.name), wanted, sides)
            current = self.apps.get(app.name)
            names = {slot: checkpoint_name(a.replica, fp) for slot, (a, _, fp) in wanted.items()}
            if current is not None and unchanged(current.queries, names, sides, self.shares.deployed_sides(app.name)):
                self.apps[app.name] = Deployed(app, plan, current.queries)
                log.info("app %s: hub part unchanged in plan v%d; its queries keep running", app.name, plan.version)
                return
            old = current.queries if current else {}
            running = {q.checkpoint.name: q for q in old.values() if q.running}
            keep = {slot: running[names[slot]] for slot in wanted if names[slot] in running}
            built = self.builder.build_all(wanted, keep, bool(sides))
            log_dir = self.log_dir(app.name)
            log_dir.mkdir(parents=True, exist_ok=True)
            stop_replaced(app.name, log_dir, old, keep, built)
            known = [*old.values(), *keep.values()]
            retire_earlier_runs(app.name, log_dir, self.checkpoint_root(app.name), known, built, written)
            queries = {**keep, **{slot: q for slot, (q, _) in built.items()}}
            self.shares.give(app, plan.version, graph, queries, sides)
            name_letter_filers(wanted, queries)
            if sides:  # a query that starts now reads the log from now on: the switch is still ahead
                for q, _ in built.values():
                    ingest_log.subscribe(log_dir, q.reader, ingest_log.sealed_tail(log_dir))
            deployed = Deployed(app, plan, dict(keep))
            self.apps[app.name] = deployed
            self.shares.deployed(app.name, sides)
            self.starter.start(deployed, built, log_dir)

    def retire_written_shares(self) -> list[str]:
        """Stop the queries of an old placement that have written their whole handover share; return their slots.

        Such a query can write nothing more, yet it would read the whole log
        (and compute its windows again) until a re-plan drops the handover,
        which a steady network may never bring. It is done as :meth:`unsettled`
        tells (its watermark past the share's end by the longest window
        upstream of its sink), and only a query whose every record reaches its
        sink through a hub window can tell (a record on a path without one
        is written whatever its event time): any other goes on until the
        handover is dropped. Its folder keeps only a note
        (:data:`hub.engine.share_progress.SHARE_WRITTEN`), so that no
        deployment of a plan that lists the handover starts it again
        (:func:`hub.engine.shares.drop_written`).

        Returns:
            ``<app>/<slot>`` of each query stopped by this call.
        """
        stopped: list[str] = []
        with self.lock:
            for name, deployed in self.apps.items():
                graph = deployed.app.graph()
                for slot, q in list(deployed.queries.items()):
                    done = written_all(graph, q)
                    if done is None:
                        continue
                    self._drop_query(name, slot, q)
                    del deployed.queries[slot]
                    leave_note(q, done[0])
                    log.info(
                        "app %s: query %s wrote its share of the handover (results of origin %s; watermark %.3f "
                        "past %.3f): stopped",
                        name,
                        slot,
                        q.sink.share.describe() if q.sink.share else "nothing",
                        *done,
                    )
                    stopped.append(f"{name}/{slot}")
        return stopped

    def _drop_query(self, name: str, slot: str, q: Query) -> None:
        """Stop ``q``, app ``name``'s query in ``slot``, and drop its log reader and restart record."""
        q.stop()
        ingest_log.unsubscribe(self.log_dir(name), q.reader)
        self.recovery.forget(name, slot)

    def undeploy(self, name: str) -> None:
        """Stop an app's queries and drop its hub state (checkpoints and log readers)."""
        with self.lock:
            deployed = self.apps.pop(name, None)
            self.shares.forget(name)
            if deployed is None:
                return
            for slot, q in deployed.queries.items():
                self._drop_query(name, slot, q)
            shutil.rmtree(self.checkpoint_root(name), ignore_errors=True)

    def stop(self) -> None:
        """Stop every query, letting running batches end within one :data:`~hub.engine.queries.STOP_DRAIN_S`, and forget the apps."""
        deadline = time.monotonic() + STOP_DRAIN_S
        with self.lock:
            for deployed in self.apps.values():
                for q in deployed.queries.values():
                    q.stop(drain=max(0.0, deadline - time.monotonic()))
            self.apps.clear()
            self.shares.forget_sides()

    # -- monitoring ----------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """Per app: the plan version, per query what :meth:`hub.engine.queries.Query.metrics` says, per operator its records.

        ``operators`` maps each hub operator a query has reported on to its
        ``{"in", "out", "in_rate", "out_rate"}`` (:func:`hub.engine.queries.operator_rates`).
        """
        out: dict[str, Any] = {}
        with self.lock:
            for name, deployed in self.apps.items():
                queries = {
                    slot: q.metrics(self.recovery.total(name, slot), self.late, self.input_rates)
                    for slot, q in deployed.queries.items()
                }
                out[name] = {"version": deployed.plan.version, "queries": queries}
                if self.counts is not None:
                    counts = self.counts
                    observed = [
                        (q.counted, {**counts.of(str(q.handle.id)), **q.sink.observed()})
                        for q in deployed.queries.values()
                        if q.handle
                    ]
                    out[name]["operators"] = operator_rates(observed)
        return out

    def watermarked_readers(self, name: str) -> frozenset[str]:
        """The log readers of app ``name``'s queries that run a window at the hub."""
        with self.lock:
            deployed = self.apps.get(name)
            queries = deployed.queries.values() if deployed is not None else ()
            return frozenset(q.reader for q in queries if q.watermarked)

    def watermarked_sinks(self, name: str) -> dict[str, str]:
        """Each log reader of app ``name``'s window queries, with its sink replica."""
        with self.lock:
            deployed = self.apps.get(name)
            queries = deployed.queries.values() if deployed is not None else ()
            return {q.reader: q.replica for q in queries if q.watermarked}

    def unsettled(self, name: str, proposed: Plan | None = None) -> list[str]:
        """The queries of app ``name`` that have not yet written a handover share ending at a switch, for people.

        Such a query (the old placement's, or one that owns the interval
        between two switches) is done once its watermark, as its last
        micro-batch reported it, has passed the end of its share by the
        longest window upstream of its sink: every window starting before
        the end has then fired and been written. A query without a
        watermark writes its share as its records come and is never listed.
        With ``proposed``, only the queries a deployment of that plan would
        stop are listed: one it keeps goes on with its share.
        """
        with self.lock:
            deployed = self.apps.get(name)
            if deployed is None:
                return []
            graph = deployed.app.graph()
            kept = self._kept(deployed.app, proposed) if proposed is not None else set()
            waiting = []
            for slot, q in deployed.queries.items():
                if q.checkpoint.name in kept:
                    continue
                needed = share_needs(graph, q)
                if needed is None:
                    continue
                reached = reported_watermark(q.handle, q.watermarked)
                if reached is None or reached < needed:
                    shown = "no batch yet" if reached is None else f"watermark {reached:.0f}"
                    waiting.append(f"hub query {slot} ({shown}, done at {needed:.0f})")
            return waiting

    def _kept(self, app: App, plan: Plan) -> set[str]:
        """The checkpoint names of the queries a deployment of ``plan`` would run (none if it would be refused)."""
        try:
            _, wanted, _ = self.builder.wanted(app, plan)
        except (InvalidPlan, InvalidDataflow):
            return set()
        return {checkpoint_name(a.replica, fp) for a, _, fp in wanted.values()}

    def recover(self, now: float | None = None) -> list[str]:
        """Restart failed queries from their checkpoints, each after a growing wait (:mod:`hub.engine.restarts`).

        Returns:
            ``<app>/<sink replica>`` of the queries restarted by this call.
        """
        now = time.monotonic() if now is None else now
        with self.lock:
            return self.recovery.recover(self.apps, self.deploy, now)
