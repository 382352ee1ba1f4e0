"""The share of a handover's results each hub query writes, before or after the switch.

While a plan moves replicas to or from the hub, a sink whose query the move
changes runs two queries, the old placement's and the new one's
(:func:`hub.engine.wanted.split`), and each writes its share of the results
(:mod:`hub.handover.cutoffs`), kept in its checkpoint. A query of the old
placement that has written its whole share leaves only a note
(:data:`hub.engine.share_progress.SHARE_WRITTEN`) in its checkpoint folder.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from hub.engine.checkpoints import checkpoint_name
from hub.engine.share_progress import SHARE_WRITTEN
from hub.handover import cutoffs
from spanedge.plan import split_replica

if TYPE_CHECKING:
    from hub.engine.queries import Query
    from hub.engine.wanted import Side, Wanted
    from spanedge.app import App
    from spanedge.dag import OperatorGraph

log = logging.getLogger(__name__)

_Before = dict[Path, tuple[cutoffs.Interval, ...] | None]
"""Each query's share (by checkpoint) from before a plan version (None: everything)."""


class HandoverShares:
    """Per app, the sides its last deployment gave its queries and their shares before that plan version.

    Not thread-safe: callers lock.
    """

    def __init__(self) -> None:
        """Start with no app deployed."""
        self._sides: dict[str, dict[str, Side]] = {}
        self._before: dict[str, tuple[int, _Before]] = {}

    def deployed_sides(self, app: str) -> dict[str, Side] | None:
        """The sides ``app``'s last deployment gave its queries by slot (None: not known, as after a restart)."""
        return self._sides.get(app)

    def give(
        self, app: App, version: int, graph: OperatorGraph, queries: dict[str, Query], sides: dict[str, Side]
    ) -> None:
        """Give each query's sink its share of a handover's results, kept in its checkpoint (no side: everything).

        Shares accumulate from one plan version to the next; deploying the same
        version again (its switch postponed: :func:`hub.handover.switches.postpone`)
        cuts each query's share from before that version at the new switch.
        """
        known = self._before.get(app.name)
        before = known[1] if known is not None and known[0] == version else {}
        for q in queries.values():
            if q.checkpoint not in before:
                before[q.checkpoint] = cutoffs.load(q.checkpoint)
        self._before[app.name] = (version, before)
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

    def deployed(self, app: str, sides: dict[str, Side]) -> None:
        """Note the sides of ``app``'s deployment that now runs."""
        self._sides[app] = sides

    def forget(self, app: str) -> None:
        """Forget an undeployed app."""
        self._sides.pop(app, None)
        self._before.pop(app, None)

    def forget_sides(self) -> None:
        """Forget the sides of every app's deployment (its queries stopped): the next deployment gives them again."""
        self._sides.clear()


def drop_written(root: Path, wanted: dict[str, Wanted], sides: dict[str, Side]) -> set[str]:
    """Take out of ``wanted`` the old placements' queries that wrote their share already; return their folders.

    ``root`` is the directory of the app's checkpoints. Such a query
    (:meth:`hub.engine.lifecycle.Lifecycle.retire_written_shares`) is not
    started again while the plan lists its handover, after a restart of the
    hub too. A query that left such a note and is wanted for another share
    (the replica moved back) starts afresh, as after any retirement.
    """
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
