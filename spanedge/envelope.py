"""The record envelope and the batches that carry records from edge to hub.

A batch on the wire is JSON::

    {"v": 1, "app": "cold-chain", "site": "truck-7", "stream": "site_stats",
     "records": [{"seq": 41, "t": 1700000000.0, "k": "truck-7", "v": {...}}, ...]}

``seq`` is monotonic per (site, stream, epoch), so the hub can drop duplicates.
A batch may carry ``"epoch": 3``: the plan version at which the replica
producing the stream moved to the site publishing it (absent: 0). Each owner
of a moved replica numbers its records from 1 in its own epoch. A batch
may carry ``"complete": 1700000010.0``: the event time below which the
publishing site sends the app nothing after this batch (its frontier), which
lets the hub's windows wait for a site that is behind (:mod:`hub.handover.frontiers`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

VERSION = 1


@dataclass(frozen=True, slots=True)
class Record:
    """One record in flight: where it comes from, its sequence, time, key and value."""

    site: str
    stream: str
    seq: int
    event_time: float
    key: str | None
    value: Any
    epoch: int = 0


class Batch(NamedTuple):
    """A decoded batch: its app, its records and the publisher's frontier (None: not announced)."""

    app: str
    records: list[Record]
    complete: float | None = None


def encode_batch(app: str, records: list[Record], complete: float | None = None) -> bytes:
    """Serialise records of one (site, stream, epoch) as a batch message, with the frontier ``complete`` if given."""
    if not records:
        msg = "a batch needs at least one record"
        raise ValueError(msg)
    first = records[0]
    head: dict[str, Any] = {"v": VERSION, "app": app, "site": first.site, "stream": first.stream}
    if first.epoch:
        head["epoch"] = first.epoch
    if complete is not None:
        head["complete"] = complete
    head["records"] = [{"seq": r.seq, "t": r.event_time, "k": r.key, "v": r.value} for r in records]
    return orjson.dumps(head)


def decode_batch(payload: bytes) -> Batch:
    """Parse a batch message into ``(app, records, complete)``; raise ``ValueError`` if malformed."""
    try:
        data = orjson.loads(payload)
        site, stream = str(data["site"]), str(data["stream"])
        if data.get("v") != VERSION:
            msg = f"unsupported envelope version {data.get('v')!r}, expected {VERSION}"
            raise ValueError(msg)
        epoch = data.get("epoch", 0)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            msg = f"epoch must be a plan version (an integer >= 0), got {epoch!r}"
            raise ValueError(msg)
        complete = data.get("complete")
        if complete is not None and (
            isinstance(complete, bool) or not isinstance(complete, int | float) or not math.isfinite(complete)
        ):
            msg = f"complete must be an event time (a finite number of seconds), got {complete!r}"
            raise ValueError(msg)
        records = [
            Record(site, stream, int(r["seq"]), float(r["t"]), r.get("k"), r["v"], epoch) for r in data["records"]
        ]
        return Batch(str(data["app"]), records, None if complete is None else float(complete))
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        msg = f"malformed batch: {exc}"
        raise ValueError(msg) from None
