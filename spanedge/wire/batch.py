"""The edge→hub batch: records of one (site, stream, epoch) in one MQTT message.

A batch on the wire is JSON::

    {"v": 1, "app": "cold-chain", "site": "truck-7", "stream": "site_stats",
     "records": [{"seq": 41, "t": 1700000000.0, "k": "truck-7", "v": {...}}, ...]}

``seq`` is monotonic per (site, stream, epoch), so the hub can drop duplicates.
A batch may carry ``"epoch": 3``: the plan version at which the replica
producing the stream moved to the site publishing it (absent: 0). Each owner
of a moved replica numbers its records from 1 in its own epoch. A batch
may carry ``"complete": 1700000010.0``: the event time below which the
publishing site sends the app nothing after this batch (its frontier), which
lets the hub's windows wait for a site that is behind.

:class:`BatchMessage` is the one definition of that form: the agent's outbox
writes it (with each value already encoded, as :class:`msgspec.Raw`), the hub
ingest reads it with :func:`decode_batch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

import msgspec

from spanedge.numbers import Finite

VERSION = 1
"""The format version of the batch, its ``v`` field."""

Epoch = Annotated[int, msgspec.Meta(ge=0)]


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


class WireRecord(msgspec.Struct, kw_only=True):
    """One record of a batch: sequence number, event time, key and value (any JSON, or :class:`msgspec.Raw`)."""

    seq: int
    t: Finite
    k: str | None = None
    v: Any


class BatchMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A batch as it goes on the wire (see the module docstring); ``epoch`` 0 and no ``complete`` are left out."""

    v: int
    app: str
    site: str
    stream: str
    epoch: Epoch = 0
    complete: Finite | None = None
    records: list[WireRecord]


class _Version(msgspec.Struct):
    v: Any = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(BatchMessage)
_FIELD_RULES = {
    "epoch": "epoch must be a plan version (an integer >= 0)",
    "complete": "complete must be an event time (a finite number of seconds)",
}


def encode_message(message: BatchMessage) -> bytes:
    """Serialise a batch message."""
    return _encoder.encode(message)


def encode_batch(app: str, records: list[Record], complete: float | None = None) -> bytes:
    """Serialise records of one (site, stream, epoch) as a batch message, with the frontier ``complete`` if given.

    Raises:
        ValueError: no records.
        TypeError: a value JSON cannot hold.
    """
    if not records:
        msg = "a batch needs at least one record"
        raise ValueError(msg)
    first = records[0]
    wire = [WireRecord(seq=r.seq, t=r.event_time, k=r.key, v=r.value) for r in records]
    message = BatchMessage(
        v=VERSION, app=app, site=first.site, stream=first.stream, epoch=first.epoch, complete=complete, records=wire
    )
    return _encoder.encode(message)


def decode_batch(payload: bytes) -> Batch:
    """Parse a batch message into ``(app, records, complete)``.

    Raises:
        ValueError: the payload is not a batch of this version; the message starts with
            ``malformed batch`` or ``unsupported envelope version`` and says what is wrong.
    """
    try:
        message = _decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise _refusal(payload, exc) from None
    if message.v != VERSION:
        raise _unsupported(message.v)
    site, stream, epoch = message.site, message.stream, message.epoch
    records = [Record(site, stream, r.seq, r.t, r.k, r.v, epoch) for r in message.records]
    return Batch(message.app, records, message.complete)


def _unsupported(version: object) -> ValueError:
    return ValueError(f"unsupported envelope version {version!r}, expected {VERSION}")


def _refusal(payload: bytes, exc: msgspec.DecodeError) -> ValueError:
    """The error for a payload that does not decode: its version if not ours, else what is wrong."""
    try:
        version = msgspec.json.decode(payload, type=_Version).v
    except msgspec.DecodeError:
        return ValueError(f"malformed batch: {exc}")
    if version != VERSION or (type(version) is not int):
        return _unsupported(version)
    for name, rule in _FIELD_RULES.items():
        if str(exc).endswith(f"`$.{name}`"):
            try:
                got = repr(msgspec.json.decode(payload).get(name))
            except msgspec.DecodeError:
                got = "a number out of range"
            return ValueError(f"malformed batch: {rule}, got {got}")
    return ValueError(f"malformed batch: {exc}")


__all__ = [
    "VERSION",
    "Batch",
    "BatchMessage",
    "Record",
    "WireRecord",
    "decode_batch",
    "encode_batch",
    "encode_message",
]
