"""How far a hub query has written its handover share, and the note left by one that wrote all of it.

During a move to or from the hub, a sink's query of the old placement
writes the results whose origin is before the switch (:mod:`hub.handover.cutoffs`).
It has written them all once the watermark of its last micro-batch has
passed the share's end by the longest window upstream of its sink: every
window starting before the end has then fired. Then it can stop, and its
checkpoint folder keeps only a note (:data:`SHARE_WRITTEN`), so that no
deployment of a plan that still lists the handover starts it again.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from datetime import datetime
from typing import TYPE_CHECKING

from spanedge.plan import split_replica

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

    from hub.engine.queries import Query
    from spanedge.dag import OperatorGraph

SHARE_WRITTEN = "share-written.json"
"""In a stopped query's checkpoint folder, all that is left of it: it wrote its whole handover share."""


def reported_watermark(handle: StreamingQuery | None, watermarked: bool) -> float | None:
    """The watermark (epoch seconds) of the query's last micro-batch: ``None`` before one, infinite if it keeps none.

    Spark leaves the watermark out of a watermarked query's progress until a
    batch of the query's run has read records (after a start or a restart
    from the checkpoint alike), so a missing one means "not yet" there.
    """
    if handle is None or not handle.isActive:
        return None
    progress = handle.lastProgress
    if not progress:
        return None
    if not watermarked:
        return math.inf
    text = (progress.get("eventTime") or {}).get("watermark")
    if text is None:
        return None
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def share_needs(graph: OperatorGraph, q: Query) -> float | None:
    """The watermark past which ``q`` has written its handover share up to the share's last finite end.

    That is the end plus the longest window upstream of its sink: every
    window starting before the end has then fired and been written. ``None``
    for a query without a share, or whose share has no finite end.
    """
    share = q.sink.share
    ends = [hi for _, hi in share.intervals if math.isfinite(hi)] if share is not None else []
    if not ends:
        return None
    return max(ends) + longest_window(graph, split_replica(q.replica)[0])


def longest_window(graph: OperatorGraph, sink: str) -> float:
    """The longest window (size or gap) upstream of ``sink``: how far past a share's end its watermark must go."""
    spans = [(spec.size or spec.gap or 0.0) for n in graph.ancestors(sink) if (spec := graph.op(n).window)]
    return max(spans, default=0.0)


def written_all(graph: OperatorGraph, q: Query) -> tuple[float, float] | None:
    """``(watermark reached, watermark needed)`` once ``q`` has written its whole share and may stop; else ``None``.

    Only a query whose share ends everywhere (no interval runs to infinity)
    and whose every record reaches its sink through a hub window can tell:
    Spark drops what reaches a window behind its watermark, but a record on
    a path without one is written whatever its event time.
    """
    share = q.sink.share
    if share is None or not q.windowed or any(math.isinf(hi) for _, hi in share.intervals):
        return None
    needed = share_needs(graph, q)
    reached = reported_watermark(q.handle, q.watermarked)
    if reached is None or (needed is not None and reached < needed):
        return None
    return reached, -math.inf if needed is None else needed


def leave_note(q: Query, reached: float) -> None:
    """Replace the stopped query ``q``'s checkpoint with the note that it wrote its share."""
    share = q.sink.share
    shutil.rmtree(q.checkpoint, ignore_errors=True)
    q.checkpoint.mkdir(parents=True, exist_ok=True)
    note = {"share": share.describe() if share else None, "watermark": reached, "stopped_at": time.time()}
    (q.checkpoint / SHARE_WRITTEN).write_text(json.dumps(note) + "\n")
