"""When the ingest seals a log at once: the event times at which a hub window can close.

A hub window closes in the micro-batch that reads the first record at or
past its end plus its allowed lateness (:mod:`hub.engine.window_close`). The
ingest seals each app's log every :data:`hub.ingest.log.SEAL_INTERVAL_S`, so that
record used to wait half an interval on average before Spark could read it.
With the app's :class:`Closings`, the ingest seals as soon as it has
appended a record that crosses one of them, and a window's closing record
reaches the next micro-batch without that wait.

Windows are aligned to the epoch: a tumbling or sliding window ends its size
past a multiple of its slide, so its closing points are one grid per window.
A session's end lies a gap past its last record, on no grid: sessions add
no points, and their closing records wait for the regular seal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hub.handover.frontiers import hub_windows

if TYPE_CHECKING:
    from spanedge.app import App
    from spanedge.plan import Plan


@dataclass(frozen=True)
class Closings:
    """Event times on grids: every ``offset + k * period`` of each ``(period, offset)`` pair, in milliseconds."""

    grids: tuple[tuple[int, int], ...] = ()

    def crossed(self, before: float, after: float) -> bool:
        """Whether a point lies in ``(before, after]``, event times in seconds (never before any record)."""
        if after <= before or before == -math.inf:
            return False
        lo, hi = _ms(before), _ms(after)
        return any((hi - offset) // period > (lo - offset) // period for period, offset in self.grids)

    def coarser_than(self, seconds: float) -> Closings:
        """Only the grids whose period is longer than ``seconds`` (finer ones gain nothing over the regular seal)."""
        return Closings(tuple(g for g in self.grids if g[0] > seconds * 1000))

    def __bool__(self) -> bool:
        """True if there is any point."""
        return bool(self.grids)


def _ms(seconds: float) -> int:
    """Whole milliseconds, a record a microsecond short of one counted at it (``0.001 * 1000`` is below 1)."""
    return math.floor(seconds * 1000 + 1e-3)


def closing_points(app: App, plan: Plan) -> Closings:
    """The points at which ``app``'s windows that ``plan`` runs at the hub can close."""
    grids: set[tuple[int, int]] = set()
    for spec in hub_windows(app, plan):
        if spec.gap or not (spec.slide or spec.size):
            continue
        period = max(1, round((spec.slide or spec.size or 0.0) * 1000))
        end = round(((spec.size or 0.0) + spec.allowed_lateness) * 1000)
        grids.add((period, end % period))
    return Closings(tuple(sorted(grids)))
