"""Running the hub's queries: deploy and replace them, restart the failed ones, stop them.

One query per sink branch (rather than one per app) gives each branch its
own checkpoint, so redeploying a new version of an app restarts only the
branches whose operators changed (their fingerprint, :mod:`hub.engine.fingerprint`)
and the others keep their window state; a branch that changed reads the
log segments its predecessor had not committed (:mod:`hub.engine.checkpoints`), so
no result is repeated.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hub.engine.checkpoints import check_distinct, checkpoint_name, is_checkpoint_of, retire
from hub.engine.compile import Compiler
from hub.engine.queries import Deployed, Query, await_first_batch, operator_rates
from hub.engine.replicas import Replicas
from hub.engine.restarts import RestartBook
from hub.engine.session import stateless_trigger_of
from hub.engine.share_progress import SHARE_WRITTEN, leave_note, reported_watermark, share_needs, written_all
from hub.engine.sinks import BatchSink, MemoryStore
from hub.engine.window_close import WindowCloser
from hub.handover import cutoffs
from hub.handover.switches import before_placement
from hub.ingest import log as ingest_log
from spanedge.errors import InvalidDataflow, InvalidPlan
from spanedge.operators import Kind
from spanedge.plan import Assignment, Plan, split_replica
from spanedge.sites import Sites

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from hub.engine.late import LateRecords
    from hub.engine.operator_counts import ObservedCounts
    from spanedge.app import App
    from spanedge.dag import OperatorGraph

log = logging.getLogger(__name__)

SINK_KINDS = ("mqtt", "file", "console", "memory")
"""The sink kinds a hub query can write to."""

_Wanted = tuple[Assignment, Compiler, str]
"""A query a plan runs: its sink's assignment, the compiler of its placement and its fingerprint."""

_Built = dict[str, tuple[Query, "DataFrame"]]
"""New queries by slot (the sink replica, or :func:`before_slot`), with the DataFrame each will run."""

Side = tuple[str, float]
"""``("before" | "after", switch time)``: which share of a handover's results a query writes."""


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
    ) -> None:
        """Run queries on ``spark`` with micro-batches every ``trigger`` (or ``availableNow``).

        A query that runs no window at the hub takes ``stateless_trigger``
        instead (by default 230 ms, or ``trigger`` if shorter:
        :func:`hub.engine.session.stateless_trigger_of`).

        ``counts`` is the listener that totals what the queries observe on their
        operators; without it :meth:`metrics` has no per-operator figures. With
        ``close_windows``, a sink that reads a window directly closes it at the
        watermark (:mod:`hub.engine.window_close`).
        """
        self.close_windows = close_windows
        self.spark = spark
        self.state_dir = state_dir
        self.sites = sites
        self.memory = memory
        self.late = late
        self.counts = counts
        self.trigger = trigger
        self.stateless_trigger = stateless_trigger_of(trigger, stateless_trigger)
        self.apps: dict[str, Deployed] = {}
        self._sides: dict[str, dict[str, Side]] = {}  # per app, the handover shares of its last deployment
        # per app, the plan version deployed last and each query's share before it (see _share)
        self._shares_before: dict[str, tuple[int, dict[Path, tuple[cutoffs.Interval, ...] | None]]] = {}
        self.restarts = RestartBook()
        self.lock = threading.RLock()
        self._warm = False  # a query of this engine has run a batch: the driver is past its first jobs

    def log_dir(self, app: str) -> Path:
        """The ingest log directory of ``app``."""
        return self.state_dir / "ingest" / app

    def checkpoint_root(self, app: str) -> Path:
        """The directory of the checkpoints of ``app``'s queries."""
        return self.state_dir / "checkpoints" / app

    # -- deployment ----------------------------------------------------------

    def deploy(self, app: App, plan: Plan) -> None:
        """Start (or restart) the queries of the sinks ``plan`` puts at the hub; see :meth:`hub.engine.engine.Engine.deploy`.

        Every new query is built before any running one stops, so a plan the
        compiler rejects leaves the app as it was. While ``plan`` moves
        replicas to or from the hub, a sink whose query that changes also
        keeps the query of the previous placement, and each writes its share
        of the results (:mod:`hub.handover.cutoffs`).
        """
        _warn_flows_leaving_hub(app.name, plan)
        graph, wanted, sides = self._wanted(app, plan)
        with self.lock:
            written = self._drop_written(app.name, wanted, sides)
            current = self.apps.get(app.name)
            names = {slot: checkpoint_name(a.replica, fp) for slot, (a, _, fp) in wanted.items()}
            if current is not None and unchanged(current.queries, names, sides, self._sides.get(app.name)):
                self.apps[app.name] = Deployed(app, plan, current.queries)
                log.info("app %s: hub part unchanged in plan v%d; its queries keep running", app.name, plan.version)
                return
            old = current.queries if current else {}
            running = {q.checkpoint.name: q for q in old.values() if q.running}
            keep = {
                slot: running[name]
                for slot, (a, _, fp) in wanted.items()
                if (name := checkpoint_name(a.replica, fp)) in running
            }
            built: _Built = {  # (while split, a sink's two queries are told apart by their fingerprint)
                slot: self._build(compiler, a, fp, f"{a.replica} [{fp}]" if sides else slot)
                for slot, (a, compiler, fp) in wanted.items()
                if slot not in keep
            }
            self.log_dir(app.name).mkdir(parents=True, exist_ok=True)
            self._replace(app.name, old, keep, built)
            self._retire_earlier_runs(app.name, [*old.values(), *keep.values()], built, written)
            queries = {**keep, **{slot: q for slot, (q, _) in built.items()}}
            self._share(app, plan.version, graph, queries, sides)
            _name_letter_filers(wanted, queries)
            if sides:  # a query that starts now reads the log from now on: the switch is still ahead
                log_dir = self.log_dir(app.name)
                for q, _ in built.values():
                    ingest_log.subscribe(log_dir, q.reader, ingest_log.sealed_tail(log_dir))
            deployed = Deployed(app, plan, dict(keep))
            self.apps[app.name] = deployed
            self._sides[app.name] = sides
            self._start(deployed, built)

    def _wanted(self, app: App, plan: Plan) -> tuple[OperatorGraph, dict[str, _Wanted], dict[str, Side]]:
        """The queries ``plan`` runs at the hub by slot (the sink, its compiler and fingerprint), and each one's side.

        Raises:
            InvalidPlan: the plan does not fit the app; InvalidDataflow: two sinks' checkpoints would collide.
        """
        graph = _checked_graph(app, plan)
        replicas = Replicas(app, plan, graph)
        compiler = Compiler(self.spark, replicas, close_windows=self.close_windows)
        sinks = [a for a in plan.at(plan.hub) if replicas.op(a).kind is Kind.SINK]
        check_distinct((a.replica for a in sinks), app.name)
        root = self.checkpoint_root(app.name)
        fps = keep_checkpoint_modes(compiler, [a.replica for a in sinks], root)
        wanted = {a.replica: (a, compiler, fps[a.replica]) for a in sinks}
        return graph, wanted, _split(self.spark, app, plan, graph, wanted, root, self.close_windows)

    def _share(
        self, app: App, version: int, graph: OperatorGraph, queries: dict[str, Query], sides: dict[str, Side]
    ) -> None:
        """Give each query's sink its share of a handover's results, kept in its checkpoint (none: everything).

        Shares accumulate from one plan version to the next; deploying the same
        version again (its switch postponed: :func:`hub.handover.switches.postpone`)
        cuts each query's share from before that version at the new switch.
        """
        known = self._shares_before.get(app.name)
        before = known[1] if known is not None and known[0] == version else {}
        for q in queries.values():
            if q.checkpoint not in before:
                before[q.checkpoint] = cutoffs.load(q.checkpoint)
        self._shares_before[app.name] = (version, before)
        for slot, q in queries.items():
            side = sides.get(slot)
            if side is None:
                cutoffs.save(q.checkpoint, None)
                q.sink.share = None
                continue
            name, at = side
            intervals = (cutoffs.after if name == "after" else cutoffs.before)(before[q.checkpoint], at)
            cutoffs.save(q.checkpoint, intervals)
            q.sink.share = cutoffs.Share(intervals, cutoffs.lags(graph, split_replica(q.replica)[0]))
            log.info("app %s: query %s writes the results of origin %s", app.name, slot, q.sink.share.describe())

    def _build(self, compiler: Compiler, sink: Assignment, fingerprint: str, label: str) -> tuple[Query, DataFrame]:
        """The query ending at ``sink`` and its DataFrame, not started.

        Raises:
            InvalidDataflow: the sink's kind is unknown, or the compiler rejects an operator.
        """
        app = compiler.replicas.app.name
        name = checkpoint_name(sink.replica, fingerprint)
        checkpoint = self.checkpoint_root(app) / name
        op = compiler.replicas.op(sink)
        assert op.sink is not None
        if op.sink.kind not in SINK_KINDS:
            msg = f"sink {op.describe()}: unknown sink kind {op.sink.kind!r}"
            raise InvalidDataflow(msg)
        hub = compiler.replicas.hub
        broker = self.sites.site(hub).mqtt()  # the sink's target, or only its dead letters' topic
        batch_sink = BatchSink(
            sink.replica, op.sink.kind, op.sink.target, checkpoint / "sink.json", self.memory, broker
        )
        df = compiler.frame(sink.replica, self.log_dir(app), name)
        closing = compiler.closing_window(sink.replica)
        if closing is not None and closing.window is not None:
            batch_sink.closer = WindowCloser(checkpoint, round(closing.window.allowed_lateness * 1000))
        query = Query(
            sink.replica,
            batch_sink,
            checkpoint,
            name,
            fingerprint,
            counted=compiler.counted(sink.replica),
            label=label,
            watermarked=compiler.keeps_watermark(sink.replica),
            windowed=compiler.windows_everything(sink.replica),
        )
        return query, df

    def _replace(self, app: str, old: dict[str, Query], keep: dict[str, Query], built: _Built) -> None:
        """Stop the old queries not kept; a changed one hands its unread log segments to its successor.

        Only a sink's own query has a successor; the query of an old placement
        kept for a handover is dropped with what it had not read (the query of
        the new placement reads the same log).
        """
        kept = {id(q) for q in keep.values()}
        again = {q.checkpoint for q, _ in built.values()}
        for slot, q in old.items():
            if id(q) in kept:
                continue
            q.stop()
            if q.checkpoint in again:
                continue  # the same query again (it had failed): it resumes from its checkpoint
            successor = built[slot][0] if slot in built and slot == q.replica else None
            retire(self.log_dir(app), q.reader, q.checkpoint, successor.reader if successor else None)
            log.info("app %s: query %s stopped (%s)", app, slot, "changed" if successor else "gone")

    def _drop_written(self, app: str, wanted: dict[str, _Wanted], sides: dict[str, Side]) -> set[str]:
        """Take out of ``wanted`` the old placements' queries that wrote their share already; return their folders.

        Such a query (:meth:`retire_written_shares`) is not started again
        while the plan lists its handover, after a restart of the hub too. A
        query that left such a note and is wanted for another share (the
        replica moved back) starts afresh, as after any retirement.
        """
        root = self.checkpoint_root(app)
        kept: set[str] = set()
        for slot, (a, _, fp) in list(wanted.items()):
            folder = root / checkpoint_name(a.replica, fp)
            if not (folder / SHARE_WRITTEN).is_file():
                continue
            if sides.get(slot, ("", 0.0))[0] == "before":
                del wanted[slot]
                kept.add(folder.name)
            else:
                shutil.rmtree(folder, ignore_errors=True)
        return kept

    def retire_written_shares(self) -> list[str]:
        """Stop the queries of an old placement that have written their whole handover share; return their slots.

        Such a query can write nothing more, yet it would read the whole log
        (and compute its windows again) until a re-plan drops the handover,
        which a steady network may never bring. It is done as :meth:`unsettled`
        tells (its watermark past the share's end by the longest window
        upstream of its sink), and only a query whose every record reaches its
        sink through a hub window can tell (a record on a path without one
        is written whatever its event time): any other goes on until the
        handover is dropped. Its folder
        keeps only a note (:data:`SHARE_WRITTEN`), so that no deployment of a
        plan that lists the handover starts it again.

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
        self.restarts.forget(name, slot)

    def _retire_earlier_runs(self, app: str, known: list[Query], built: _Built, written: set[str]) -> None:
        """Retire the checkpoints of an earlier run of the hub that this deployment replaces.

        ``written`` names the folders of the queries that wrote their share
        of a handover the plan still lists: kept for their note.
        """
        in_use = {q.checkpoint for q in known} | {q.checkpoint for q, _ in built.values()}
        in_use |= {self.checkpoint_root(app) / name for name in written}
        root = self.checkpoint_root(app)
        for path in sorted(root.iterdir()) if root.is_dir() else ():
            if path in in_use or not path.is_dir():
                continue
            successor = next(
                (q for slot, (q, _) in built.items() if slot == q.replica and is_checkpoint_of(path.name, q.replica)),
                None,
            )
            retire(self.log_dir(app), path.name, path, successor.reader if successor else None)
            log.info("app %s: checkpoint %s of an earlier version retired", app, path.name)

    def _start(self, deployed: Deployed, built: _Built) -> None:
        """Start the new queries; one after another until a query has run a batch (see :func:`hub.engine.queries.await_first_batch`).

        Only the first jobs of a fresh driver must not run side by side; once
        it has run a batch, a re-plan's queries start together, so a deploy on
        a loaded hub does not take a first batch per query (12-19 s each were
        measured under saturating load) before the sites get the plan.
        """
        app = deployed.app.name
        previous: StreamingQuery | None = None
        for replica, (q, df) in built.items():
            if previous is not None and not self._driver_warm():
                await_first_batch(previous)
            ingest_log.subscribe(self.log_dir(app), q.reader)
            previous = q.start(app, df, self.trigger_of(q))
            deployed.queries[replica] = q
            log.info("app %s: query %s started (checkpoint %s)", app, replica, q.checkpoint.name)

    def trigger_of(self, q: Query) -> str:
        """The micro-batch interval of ``q``: the windows' unless it runs no window at the hub."""
        return self.trigger if q.watermarked else self.stateless_trigger

    def _driver_warm(self) -> bool:
        """Whether a query of this engine has completed a batch (it stays so)."""
        if not self._warm:
            handles = [q.handle for d in self.apps.values() for q in d.queries.values() if q.handle is not None]
            self._warm = any(h.lastProgress is not None for h in handles)
        return self._warm

    def undeploy(self, name: str) -> None:
        """Stop an app's queries and drop its hub state (checkpoints and log readers)."""
        with self.lock:
            deployed = self.apps.pop(name, None)
            self._sides.pop(name, None)
            self._shares_before.pop(name, None)
            if deployed is None:
                return
            for slot, q in deployed.queries.items():
                self._drop_query(name, slot, q)
            shutil.rmtree(self.checkpoint_root(name), ignore_errors=True)

    def stop(self) -> None:
        """Stop every query and forget the apps."""
        with self.lock:
            for deployed in self.apps.values():
                for q in deployed.queries.values():
                    q.stop()
            self.apps.clear()
            self._sides.clear()

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
                    replica: q.metrics(self.restarts.total(name, replica), self.late)
                    for replica, q in deployed.queries.items()
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
            _, wanted, _ = self._wanted(app, plan)
        except (InvalidPlan, InvalidDataflow):
            return set()
        return {checkpoint_name(a.replica, fp) for a, _, fp in wanted.values()}

    def recover(self, now: float | None = None) -> list[str]:
        """Restart failed queries from their checkpoints, each after a growing wait (:mod:`hub.engine.restarts`).

        Returns:
            ``<app>/<sink replica>`` of the queries restarted by this call.
        """
        now = time.monotonic() if now is None else now
        restarted: list[str] = []
        with self.lock:
            for name, deployed in list(self.apps.items()):
                due = []
                for replica, q in deployed.queries.items():
                    error = q.failure()  # None while running, and for a finished availableNow query
                    if error is not None and self.restarts.failed(name, replica, error, now):
                        due.append(replica)
                if not due:
                    continue
                try:
                    self.deploy(deployed.app, deployed.plan)  # rebuilds exactly the queries that are not running
                except Exception:
                    log.exception("app %s: restarting queries %s failed; trying again later", name, ", ".join(due))
                    for replica in due:
                        self.restarts.retry_later(name, replica, now)
                    continue
                for replica in due:
                    self.restarts.restarted(name, replica, now)
                    restarted.append(f"{name}/{replica}")
        return restarted


def unchanged(
    queries: dict[str, Query], wanted: dict[str, str], sides: dict[str, Side], deployed_sides: dict[str, Side] | None
) -> bool:
    """Whether a deployment changes nothing at the hub, so it need neither build, stop nor start a query.

    Args:
        queries: the app's queries by slot (:attr:`hub.engine.queries.Deployed.queries`).
        wanted: the checkpoint name (sink and fingerprint) of each query the new plan needs, by slot.
        sides: the handover share of each query the new plan gives (:func:`_split`).
        deployed_sides: the shares the app's last deployment gave (None: not known, as after a restart).

    True when the new plan wants exactly the queries that run, each with the
    fingerprint it runs with, and the same shares of a handover (a share
    that changes is written to the query's checkpoint); a plan version,
    totals or replica owners that differ elsewhere are no change here.
    """
    if deployed_sides is None or sides != deployed_sides or set(queries) != set(wanted):
        return False
    return all(q.checkpoint.name == wanted[slot] and q.running for slot, q in queries.items())


def before_slot(sink: str) -> str:
    """The key, in :attr:`hub.engine.queries.Deployed.queries`, of the query of ``sink`` under the old placement of a handover."""
    return f"{sink} (before handover)"


def _name_letter_filers(wanted: dict[str, _Wanted], queries: dict[str, Query]) -> None:
    """Tell each query's sink whose dead letters it files: each hub operator's, by one sink only.

    An operator upstream of several sinks runs in each of their queries; the
    first of those sinks by name files its letters (both queries of that sink
    during a handover, each its share).
    """
    runs = {slot: compiler.python_operators(a.replica) for slot, (a, compiler, _) in wanted.items()}
    filer: dict[str, str] = {}
    for slot, ops in runs.items():
        sink = wanted[slot][0].replica
        for op in ops:
            filer[op] = min(filer.get(op, sink), sink)
    for slot, q in queries.items():
        sink = wanted[slot][0].replica
        q.sink.letters_of = frozenset(op for op in runs.get(slot, ()) if filer[op] == sink)


def _split(
    spark: SparkSession,
    app: App,
    plan: Plan,
    graph: OperatorGraph,
    wanted: dict[str, _Wanted],
    root: Path,
    close_windows: bool = False,
) -> dict[str, Side]:
    """Add to ``wanted`` the queries of the old placement of ``plan``'s moves to or from the hub; return each side.

    Only sinks whose query the move changes get a second query; a sink's own
    query is then the ``after`` side, the added one the ``before`` side. A
    sink that moves with the replicas has one query at the hub: the ``after``
    side when it comes from a spoke (the old owner writes the results before
    the switch), the ``before`` side when it leaves for one.
    """
    split = before_placement(plan)
    if split is None:
        return {}
    old_plan, at = split
    compiler = Compiler(spark, Replicas(app, old_plan, graph), close_windows=close_windows)
    old_sinks = [a.replica for a in old_plan.at(old_plan.hub) if graph.op(a.operator).kind is Kind.SINK]
    old_fps = keep_checkpoint_modes(compiler, sorted({*old_sinks, *(a.replica for a, _, _ in wanted.values())}), root)
    sides: dict[str, Side] = {}
    for slot, (a, _, fp) in list(wanted.items()):
        old_fp = old_fps[a.replica]
        if old_fp != fp:
            sides[slot] = ("after", at)
            if old_plan.site_of(a.replica) == old_plan.hub:
                wanted[before_slot(slot)] = (a, compiler, old_fp)
                sides[before_slot(slot)] = ("before", at)
    for a in old_plan.at(old_plan.hub):
        if graph.op(a.operator).kind is Kind.SINK and a.replica not in wanted:
            wanted[before_slot(a.replica)] = (a, compiler, old_fps[a.replica])
            sides[before_slot(a.replica)] = ("before", at)
    return sides


def keep_checkpoint_modes(compiler: Compiler, sinks: list[str], root: Path) -> dict[str, str]:
    """Let the query of each of ``sinks`` keep the window-close mode its checkpoint under ``root`` was written in.

    Returns each sink's fingerprint in the mode it keeps.

    The two modes keep different window state, so a query switched to the
    other would start afresh and lose the records of its open windows. So
    ``--window-close`` (and its default, which changed) applies to queries
    that start anew, and a running query keeps its mode across hub restarts.
    """
    fps: dict[str, str] = {}
    for sink in sinks:
        mode = compiler.closes(sink)
        current = fps[sink] = compiler.fingerprint(sink)
        if (root / checkpoint_name(sink, current)).is_dir():
            continue
        compiler.modes[sink] = not mode
        other = compiler.fingerprint(sink)
        if other == current or not (root / checkpoint_name(sink, other)).is_dir():
            compiler.modes.pop(sink)
            continue
        fps[sink] = other
        log.info(
            "query %s keeps writing its windows %s, as its checkpoint was started so",
            sink,
            "once the watermark passes them" if not mode else "in the micro-batch after the watermark passed them",
        )
    return fps


def _checked_graph(app: App, plan: Plan) -> OperatorGraph:
    """``app``'s DAG, once ``plan`` is known to place this app's operators.

    Raises:
        InvalidPlan: the plan is for another app or names unknown operators.
    """
    if plan.app != app.name:
        msg = f"plan is for app '{plan.app}' but the app is '{app.name}'"
        raise InvalidPlan(msg)
    graph = app.graph()
    for a in plan.assignments:
        if a.operator not in graph:
            msg = f"plan of app '{app.name}' places unknown operator '{a.operator}' (replica '{a.replica}')"
            raise InvalidPlan(msg)
    return graph


def _warn_flows_leaving_hub(app: str, plan: Plan) -> None:
    """Log the flows from the hub to an edge site: the hub does not forward results to edge sites."""
    site_of = {a.replica: a.site for a in plan.assignments}
    for f in plan.flows:
        if site_of.get(f.src) == plan.hub and site_of.get(f.dst, plan.hub) != plan.hub:
            log.warning(
                "app %s: flow %s -> %s leaves the hub; the hub does not forward results to edge sites",
                app,
                f.src,
                f.dst,
            )
