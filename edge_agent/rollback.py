r"""Rollbacks: the previous version's state of an app's changed windows, kept while a new version runs.

When a plan changes the code of an app at this site to a version on trial
(``Plan.trial``: a staged rollout's stage), the windows the new version
cannot carry the state of (:func:`spanedge.runtime.rollback.affected_windows`)
would start empty. So
:class:`Rollbacks` keeps, in one outbox transaction with the app's checkpoint,
the previous version's snapshots of those windows, then, with every later
commit, the messages their sources took (the *spool*) and the results the
new version's windows of the same names emitted. On a plan that returns the
site to the previous version's source, the windows resume from the kept
snapshots and the spooled messages (:func:`spanedge.runtime.rollback.resume_windows`),
and the kept state is deleted in the commit that stores what the replay
produced. A plan of another version, a newer plan of the new version, or
its plan no longer on trial (the rollout passed) means the new version
stays: the kept state is deleted. So is the spool,
with a warning, once it would pass ``limit_bytes``; a return to the previous
version then starts its changed windows empty, and says so.

Outbox state names: ``rollback\0<app>`` (the versions, sources and
snapshots) and ``rollback\0<app>\0<n>`` (the n-th commit's messages and
results, from 1).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from edge_agent import checkpoint
from edge_agent.outbox import Outbox
from spanedge.errors import InvalidSnapshot, SpanEdgeError
from spanedge.loader import source_hash
from spanedge.plan import Plan
from spanedge.runtime import OperatorSnapshot, Pipeline
from spanedge.runtime.rollback import (
    Emitted,
    affected_windows,
    feeding_sources,
    resume_windows,
    rollback_part,
    upstream,
)

log = logging.getLogger(__name__)

DEFAULT_LIMIT_BYTES = 64 * 2**20
"""The most bytes of spooled messages and results kept per app (``--rollback-spool-bytes``)."""
_LAYOUT = 1


def head_key(app: str) -> str:
    """The outbox state name of an app's kept state."""
    return f"rollback\x00{app}"


def chunk_key(app: str, n: int) -> str:
    """The outbox state name of the ``n``-th commit's spooled messages and results (from 1)."""
    return f"rollback\x00{app}\x00{n}"


def _short(sha: str) -> str:
    return sha[:12]


@dataclass
class Kept:
    """The previous version's state of one app's affected windows, and what its spool holds.

    Attributes:
        app: the app.
        source: the SHA-256 of the previous version's source (the one kept).
        target: the SHA-256 of the version running since.
        target_plan: the plan version it runs under.
        windows: the affected windows' snapshots (``OperatorSnapshot.to_data()``), by replica.
        upstream: the snapshots of the other windows that feed them here (the replay runs them too).
        progress: the sources' newest event times at the upgrade.
        sources: the source replicas whose messages are spooled.
        overflow: the spool passed its limit and was dropped (a rollback starts the windows empty).
        chunks: commits spooled so far; ``size``: their bytes.
    """

    app: str
    source: str
    target: str
    target_plan: int
    windows: dict[str, Any]
    progress: dict[str, float]
    sources: list[str]
    upstream: dict[str, Any] = field(default_factory=dict)
    overflow: bool = False
    chunks: int = 0
    size: int = 0
    records: list[list[Any]] = field(default_factory=list)  # spooled since the last commit

    def to_blob(self) -> bytes:
        """The durable part, as JSON."""
        keys = ("source", "target", "target_plan", "windows", "progress", "sources", "upstream", "overflow")
        return orjson.dumps({"v": _LAYOUT, **{k: getattr(self, k) for k in keys}})

    @classmethod
    def from_blob(cls, app: str, blob: bytes) -> Kept:
        """Read :meth:`to_blob` output.

        Raises:
            ValueError: not a kept state of this layout.
        """
        data = orjson.loads(blob)
        if not isinstance(data, dict) or data.get("v") != _LAYOUT:
            msg = f"kept rollback state of app {app} has layout {data.get('v') if isinstance(data, dict) else data!r}"
            raise ValueError(msg)
        return cls(
            app,
            str(data["source"]),
            str(data["target"]),
            int(data["target_plan"]),
            dict(data["windows"]),
            {str(k): float(v) for k, v in data["progress"].items()},
            [str(s) for s in data["sources"]],
            dict(data["upstream"]),
            bool(data["overflow"]),
        )

    def names(self) -> list[str]:
        """Every outbox state name this kept state uses."""
        return [head_key(self.app)] + [chunk_key(self.app, n) for n in range(1, self.chunks + 1)]


class Rollbacks:
    """The kept states of the apps at this site, their spools and their rollbacks.

    Args:
        outbox: where the kept states live, beside the checkpoints.
        pipelines: the running pipelines by app (the agent's dict).
        limit_bytes: the most bytes one app's spool may take.
    """

    def __init__(self, outbox: Outbox, pipelines: Mapping[str, Pipeline], limit_bytes: int = DEFAULT_LIMIT_BYTES):
        if limit_bytes < 0:
            msg = f"rollback spool limit must be >= 0 bytes (0: keep nothing), got {limit_bytes}"
            raise ValueError(msg)
        self.outbox = outbox
        self.pipelines = pipelines
        self.limit_bytes = limit_bytes
        self.kept: dict[str, Kept] = {}
        #: per app, the source replicas whose messages are spooled (read on every message)
        self.spooling: dict[str, frozenset[str]] = {}
        self._loaded: set[str] = set()
        self._drop: list[str] = []
        self._heads: dict[str, bytes] = {}  # heads to rewrite at the next commit
        #: apps whose windows resumed, with outputs the next commit stores as it deletes their kept state
        self.resumed: set[str] = set()

    # -- plans ---------------------------------------------------------------

    def load(self, app: str) -> Kept | None:
        """The kept state of ``app``, read from the outbox the first time (after a restart)."""
        if app not in self._loaded:
            self._loaded.add(app)
            blob = self.outbox.load_state(head_key(app))
            if blob is not None:
                try:
                    kept = Kept.from_blob(app, blob)
                except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
                    log.error("app %s: the state kept for a rollback is unreadable (%s); dropped", app, exc)
                    self._drop.append(head_key(app))
                else:
                    while (chunk := self.outbox.load_state(chunk_key(app, kept.chunks + 1))) is not None:
                        kept.chunks += 1
                        kept.size += len(chunk)
                    self.kept[app] = kept
        return self.kept.get(app)

    def on_plan(self, plan: Plan, before: Plan | None, old: Pipeline | None, new: Pipeline) -> Kept | None:
        """Act on a plan for an app: keep, go on keeping, drop, or hand back the state to resume from.

        ``before`` and ``old`` are the plan and pipeline running until now (``None`` after a
        restart), ``new`` the pipeline built for ``plan``, not restored yet. Returns the kept
        state when ``plan`` returns the site to its version (the caller restores the
        checkpoint without its windows, then calls :meth:`resume`).
        """
        name = plan.app
        sha = source_hash(plan.app_source)
        kept = self.load(name)
        if kept is not None:
            if sha == kept.source:
                self._forget(kept)
                if not kept.overflow:
                    return kept
                log.warning(
                    "app %s: back to version %s, but the messages taken since the upgrade outgrew the rollback "
                    "spool (--rollback-spool-bytes %d): windows %s start empty",
                    name,
                    _short(sha),
                    self.limit_bytes,
                    ", ".join(sorted(kept.windows)) or "(dropped)",
                )
                return None
            if sha == kept.target and plan.version == kept.target_plan and plan.trial:
                self._go_on(kept, new)
                return None
            if sha == kept.target and not plan.trial:
                log.info(
                    "app %s: version %s is no longer on trial here (its rollout passed): dropped the state kept to "
                    "return to version %s",
                    name,
                    _short(sha),
                    _short(kept.source),
                )
                self._forget(kept)
                return None
            log.info(
                "app %s: plan version %d (version %s) keeps the site off version %s: dropped the state kept to "
                "return to it",
                name,
                plan.version,
                _short(sha),
                _short(kept.source),
            )
            self._forget(kept)
        if plan.trial and before is not None and old is not None and source_hash(before.app_source) != sha:
            self._keep(plan, before, old, new)
        return None

    def _keep(self, plan: Plan, before: Plan, old: Pipeline, new: Pipeline) -> None:
        affected = affected_windows(old, new.app)
        if not affected or self.limit_bytes == 0:
            return
        name = plan.app
        windows = {r: old.snapshot_operator(r).to_data() for r in affected}
        feeding = [n.replica for n in upstream(old, affected) if n.window is not None and n.replica not in windows]
        sources = feeding_sources(old, affected)
        kept = Kept(
            name,
            source=source_hash(before.app_source),
            target=source_hash(plan.app_source),
            target_plan=plan.version,
            windows=windows,
            progress=dict(old.max_event_time),
            sources=sources,
            upstream={r: old.snapshot_operator(r).to_data() for r in feeding},
        )
        # what an earlier kept state of this app left goes in the same transaction (the other apps' waits)
        mine = [n for n in self._drop if n == head_key(name) or n.startswith(head_key(name) + "\x00")]
        self._drop = [n for n in self._drop if n not in mine]
        # v1's checkpoint again (as the last commit left it), with the kept state, in one transaction
        self.outbox.commit({}, {name: checkpoint.encode(old), head_key(name): kept.to_blob()}, drop=mine)
        self.kept[name] = kept
        self._go_on(kept, new)
        log.info(
            "app %s: version %s changes windows %s here; kept their state of version %s and spool %s from now "
            "on, to resume them if the site goes back to it",
            name,
            _short(kept.target),
            ", ".join(affected),
            _short(kept.source),
            ", ".join(sources),
        )

    def _go_on(self, kept: Kept, new: Pipeline) -> None:
        if kept.overflow:
            return
        self.spooling[kept.app] = frozenset(kept.sources)
        new.watch(frozenset(kept.windows))

    def _forget(self, kept: Kept) -> None:
        self.kept.pop(kept.app, None)
        self.spooling.pop(kept.app, None)
        self._heads.pop(head_key(kept.app), None)
        self._drop += kept.names()
        pipeline = self.pipelines.get(kept.app)
        if pipeline is not None:
            pipeline.watch(frozenset())

    def _take_drop(self) -> list[str]:
        drop, self._drop = self._drop, []
        return drop

    @property
    def pending(self) -> bool:
        """True while the next commit has kept states to delete or rewrite, or resumed windows' outputs."""
        return bool(self.resumed or self._drop or self._heads)

    # -- spooling ------------------------------------------------------------

    def spool(self, app: str, replica: str, payload: bytes, arrival: float) -> None:
        """Keep one message source ``replica`` of ``app`` took (committed with the next checkpoint)."""
        self.kept[app].records.append([replica, bytes(payload).decode("latin-1"), arrival])

    def commit_parts(self) -> tuple[dict[str, bytes], list[str]]:
        """What the next checkpoint commit stores and deletes: each app's spooled messages and results since the last."""
        states: dict[str, bytes] = {}
        for name, kept in list(self.kept.items()):
            pipeline = self.pipelines.get(name)
            fired = pipeline.take_fired() if pipeline is not None else []
            if kept.overflow or not (kept.records or fired):
                continue
            chunk = orjson.dumps({"r": kept.records, "f": fired})
            kept.records = []
            if kept.size + len(chunk) > self.limit_bytes:
                self._overflow(kept, pipeline)
                continue
            kept.chunks += 1
            kept.size += len(chunk)
            states[chunk_key(name, kept.chunks)] = chunk
        states.update(self._heads)
        self._heads = {}
        return states, self._take_drop()

    def _overflow(self, kept: Kept, pipeline: Pipeline | None) -> None:
        log.warning(
            "app %s: the messages taken since version %s replaced version %s pass the rollback spool's limit "
            "(--rollback-spool-bytes %d); dropped them and the kept state: a return to version %s now starts "
            "windows %s empty",
            kept.app,
            _short(kept.target),
            _short(kept.source),
            self.limit_bytes,
            _short(kept.source),
            ", ".join(sorted(kept.windows)),
        )
        self._drop += kept.names()[1:]
        kept.overflow, kept.chunks, kept.size = True, 0, 0
        kept.windows = dict.fromkeys(kept.windows)  # the names stay, for the rollback's log line
        kept.upstream = {}
        self._heads[head_key(kept.app)] = kept.to_blob()
        self.spooling.pop(kept.app, None)
        if pipeline is not None:
            pipeline.watch(frozenset())

    # -- the rollback ----------------------------------------------------------

    def _chunks(self, kept: Kept) -> Iterator[dict[str, Any]]:
        for n in range(1, kept.chunks + 1):
            blob = self.outbox.load_state(chunk_key(kept.app, n))
            if blob is not None:
                yield orjson.loads(blob)

    def _records(self, kept: Kept) -> Iterator[tuple[str, bytes, float]]:
        for chunk in itertools.chain(self._chunks(kept), [{"r": kept.records}]):  # the last: not committed yet
            for replica, text, arrival in chunk["r"]:
                yield replica, text.encode("latin-1"), arrival

    def resume(self, kept: Kept, plan: Plan, pipeline: Pipeline, **options: Any) -> bool:
        """Resume ``pipeline``'s (the previous version's) affected windows from ``kept`` and the spool.

        Its outputs wait in ``pipeline`` for the next commit, which also deletes the kept state
        (:meth:`commit_parts`); the app is in :attr:`resumed` until then, so the processor
        commits at its next step. ``options`` are the pipelines' options. False if it could not.
        """
        try:
            part = rollback_part(pipeline.app, plan, pipeline.site, kept.windows, **options)
            snapshots = {r: OperatorSnapshot.from_data(d, r) for r, d in {**kept.upstream, **kept.windows}.items()}
            emitted: list[Emitted] = [
                (str(r), str(k), float(s), float(e)) for c in self._chunks(kept) for r, k, s, e in c["f"]
            ]
            records = self._records(kept)
            replayed = resume_windows(pipeline, part, snapshots, kept.progress, records, emitted, kept.windows)
        except (SpanEdgeError, InvalidSnapshot, ValueError, KeyError, TypeError) as exc:
            windows = ", ".join(sorted(kept.windows))
            log.error(
                "app %s: cannot resume windows %s from their kept state (%s); they start empty", plan.app, windows, exc
            )
            return False
        self.resumed.add(plan.app)
        log.info(
            "app %s: back to version %s: windows %s resume from their state at the upgrade and the %d messages "
            "spooled since; %d of their results version %s emitted are not emitted again",
            plan.app,
            _short(kept.source),
            ", ".join(sorted(kept.windows)),
            replayed,
            len(emitted),
            _short(kept.target),
        )
        return True
