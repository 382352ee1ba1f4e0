"""The ingest's counters: overall and per app, site and stream, updated by the writer thread, read by the API."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from spanedge.wire.batch import Record

#: The counters that count single events.
Event = Literal["malformed", "oversize", "site_mismatch", "commits", "connects"]


@dataclass
class StreamStats:
    """Counters of one (app, site, stream)."""

    records: int = 0
    duplicates: int = 0
    last_seq: int | None = None
    last_event_time: float | None = None
    lag_s: float | None = None


@dataclass
class IngestCounters:
    """Every counter of the ingest, behind one lock (the writer and network threads update, others read)."""

    messages: int = 0
    records: int = 0
    duplicates: int = 0
    malformed: int = 0
    oversize: int = 0
    site_mismatch: int = 0
    commits: int = 0
    connects: int = 0
    streams: dict[tuple[str, str, str], StreamStats] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, event: Event) -> None:
        """Count one ``event``."""
        with self._lock:
            setattr(self, event, getattr(self, event) + 1)

    def count(self, app: str, records: list[Record], fresh: list[Record], now: float) -> None:
        """Count one accepted batch: ``fresh`` of its ``records`` were new, the rest duplicates."""
        with self._lock:
            self.messages += 1
            self.records += len(fresh)
            self.duplicates += len(records) - len(fresh)
            if not records:
                return
            first = records[0]
            stats = self.streams.setdefault((app, first.site, first.stream), StreamStats())
            stats.records += len(fresh)
            stats.duplicates += len(records) - len(fresh)
            if fresh:
                last = fresh[-1]
                stats.last_seq = last.seq
                stats.last_event_time = last.event_time
                stats.lag_s = max(0.0, now - last.event_time)

    def to_dict(self, *, connected: bool, queued: int) -> dict[str, Any]:
        """The counters as :meth:`hub.ingest.consumer.Ingest.stats` returns them, with the connection state and queue size."""
        with self._lock:
            apps: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
            for (app, site, stream), s in sorted(self.streams.items()):
                apps.setdefault(app, {}).setdefault(site, {})[stream] = dataclasses.asdict(s)
            return {
                "connected": connected,
                "messages": self.messages,
                "records": self.records,
                "duplicates": self.duplicates,
                "malformed": self.malformed,
                "oversize": self.oversize,
                "site_mismatch": self.site_mismatch,
                "commits": self.commits,
                "connects": self.connects,
                "queued": queued,
                "apps": apps,
            }
