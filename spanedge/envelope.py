"""The record envelope and the batches that carry records from edge to hub.

A batch on the wire is JSON::

    {"v": 1, "app": "cold-chain", "site": "truck-7", "stream": "site_stats",
     "records": [{"seq": 41, "t": 1700000000.0, "k": "truck-7", "v": {...}}, ...]}

``seq`` is monotonic per (site, stream, epoch), so the hub can drop duplicates.
A batch may carry ``"epoch": 3``: the plan version at which the replica
producing the stream moved to the site publishing it (absent: 0). Each owner
of a moved replica numbers its records from 1 in its own epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def encode_batch(app: str, records: list[Record]) -> bytes:
    """Serialise records of one (site, stream, epoch) as a batch message."""
    if not records:
        msg = "a batch needs at least one record"
        raise ValueError(msg)
    first = records[0]
    head: dict[str, Any] = {"v": VERSION, "app": app, "site": first.site, "stream": first.stream}
    if first.epoch:
        head["epoch"] = first.epoch
    head["records"] = [{"seq": r.seq, "t": r.event_time, "k": r.key, "v": r.value} for r in records]
    return orjson.dumps(head)


def decode_batch(payload: bytes) -> tuple[str, list[Record]]:
    """Parse a batch message into ``(app, records)``; raise ``ValueError`` if malformed."""
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
        records = [
            Record(site, stream, int(r["seq"]), float(r["t"]), r.get("k"), r["v"], epoch) for r in data["records"]
        ]
        return str(data["app"]), records
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        msg = f"malformed batch: {exc}"
        raise ValueError(msg) from None
