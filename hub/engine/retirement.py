"""Retiring the queries a deployment replaces, and the checkpoints of earlier runs of the hub.

A query that changed hands the log segments it had not committed to its
successor (:func:`hub.engine.checkpoints.retire`), so no record is
processed twice and none is skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from hub.engine.checkpoints import is_checkpoint_of, retire

if TYPE_CHECKING:
    from hub.engine.builder import Built
    from hub.engine.queries import Query

log = logging.getLogger(__name__)


def stop_replaced(app: str, log_dir: Path, old: dict[str, Query], keep: dict[str, Query], built: Built) -> None:
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
        retire(log_dir, q.reader, q.checkpoint, successor.reader if successor else None)
        log.info("app %s: query %s stopped (%s)", app, slot, "changed" if successor else "gone")


def retire_earlier_runs(
    app: str, log_dir: Path, root: Path, known: list[Query], built: Built, written: set[str]
) -> None:
    """Retire the checkpoints under ``root`` of an earlier run of the hub that this deployment replaces.

    ``known`` are the queries this run has deployed; ``written`` names the
    folders of the queries that wrote their share of a handover the plan
    still lists: kept for their note.
    """
    in_use = {q.checkpoint for q in known} | {q.checkpoint for q, _ in built.values()}
    in_use |= {root / name for name in written}
    for path in sorted(root.iterdir()) if root.is_dir() else ():
        if path in in_use or not path.is_dir():
            continue
        successor = next(
            (q for slot, (q, _) in built.items() if slot == q.replica and is_checkpoint_of(path.name, q.replica)),
            None,
        )
        retire(log_dir, path.name, path, successor.reader if successor else None)
        log.info("app %s: checkpoint %s of an earlier version retired", app, path.name)
