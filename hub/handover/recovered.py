"""Results recomputed for a gone spoke: the hub keeps each one once.

A source site recomputes the part of a spoke gone for good from its
``recover_from`` on (:mod:`edge_agent.recovery`), in a recovery epoch
(:func:`spanedge.keyrange.recovery_epoch` of the gone spoke's). The gone
spoke may have delivered some of those results after its last heartbeat,
and, back later, may still send what its outbox held. Sequence numbers
cannot tell, as each side numbers its own epoch; the records themselves can:
a result is its stream, event time, key and value.

So the ingest passes every record a spoke sends for another site (the
offloaded replicas' results, the only ones a recovery repeats) and every
recovered record through :class:`Recovered`: a record whose twin came from
the other side and was not matched yet is dropped as a duplicate, the others
are kept and remembered. A spoke's own records older than what it announced
as delivered (``delivered``, :mod:`hub.handover.frontiers`) are forgotten: no
recovery starts before it. Whatever is left is forgotten after
:data:`KEEP_S`. The memory is the hub's: a hub restarted between a spoke's
death and its recovery may keep a result twice.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable

import orjson

from spanedge.keyrange import RECOVERY_EPOCH, is_recovery_epoch
from spanedge.wire.batch import Record

KEEP_S = 1800.0
"""Seconds a record is remembered for its twin at most."""
PRUNE_EVERY_S = 5.0

#: (app, site, stream, epoch of the gone spoke)
Stream = tuple[str, str, str, int]
#: (event time, key, value)
Twin = tuple[float, str | None, bytes]


class _Seen:
    """The unmatched records of one stream from one side, with when each came."""

    def __init__(self) -> None:
        self.count: collections.Counter[Twin] = collections.Counter()
        self.arrived: collections.deque[tuple[float, str, Twin]] = collections.deque()  # (arrival, sender, twin)

    def add(self, twin: Twin, sender: str, now: float) -> None:
        self.count[twin] += 1
        self.arrived.append((now, sender, twin))

    def take(self, twin: Twin) -> bool:
        if self.count[twin] <= 0:
            return False
        self.count[twin] -= 1
        return True

    def prune(self, now: float, below: Callable[[str], float]) -> None:
        kept: collections.deque[tuple[float, str, Twin]] = collections.deque()
        for entry in self.arrived:
            arrival, sender, twin = entry
            if self.count[twin] <= 0:
                continue
            if arrival < now - KEEP_S or twin[0] < below(sender):
                self.count[twin] -= 1
            else:
                kept.append(entry)
        self.arrived = kept
        self.count = +self.count


class Recovered:
    """Matches recovered records against what the gone spoke delivered itself.

    ``delivered(app, site)`` is the event time below which ``site`` announced
    every result of ``app`` delivered (None: nothing announced).
    """

    def __init__(
        self,
        delivered: Callable[[str, str], float | None] = lambda app, site: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Remember nothing yet."""
        self.delivered = delivered
        self.clock = clock
        self._lock = threading.Lock()
        self._owner: dict[Stream, _Seen] = {}
        self._recovery: dict[Stream, _Seen] = {}
        self._pruned_at = 0.0
        self.dropped = 0

    def keep(self, app: str, sender: str, records: list[Record]) -> list[Record]:
        """The records of a batch ``sender`` published to keep: all but the twins of earlier ones from the other side."""
        if not records or (records[0].site == sender and not is_recovery_epoch(records[0].epoch)):
            return records  # a site's own stream (a batch holds one site, stream and epoch): nothing to match
        out: list[Record] = []
        now = self.clock()
        with self._lock:
            for r in records:
                if is_recovery_epoch(r.epoch):
                    stream, mine, theirs = (
                        (app, r.site, r.stream, r.epoch - RECOVERY_EPOCH),
                        self._recovery,
                        self._owner,
                    )
                elif sender != r.site:
                    stream, mine, theirs = (app, r.site, r.stream, r.epoch), self._owner, self._recovery
                else:
                    out.append(r)
                    continue
                twin = (r.event_time, r.key, orjson.dumps(r.value, option=orjson.OPT_SORT_KEYS))
                other = theirs.get(stream)
                if other is not None and other.take(twin):
                    self.dropped += 1
                    continue
                mine.setdefault(stream, _Seen()).add(twin, sender, now)
                out.append(r)
            if now - self._pruned_at >= PRUNE_EVERY_S:
                self._pruned_at = now
                self._prune(now)
        return out

    def _prune(self, now: float) -> None:
        for side, floor in ((self._owner, True), (self._recovery, False)):
            for stream, seen in list(side.items()):
                app = stream[0]

                def below(sender: str, app: str = app, floor: bool = floor) -> float:
                    if not floor:
                        return -math.inf
                    delivered = self.delivered(app, sender)
                    return -math.inf if delivered is None else delivered

                seen.prune(now, below)
                if not seen.count:
                    del side[stream]

    def size(self) -> int:
        """How many records wait for a twin."""
        with self._lock:
            return sum(s.count.total() for side in (self._owner, self._recovery) for s in side.values())
