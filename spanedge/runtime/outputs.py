"""What a pipeline produces: records for the hub, local sink values, dead letters and late records."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from spanedge.operators import SinkSpec

#: The most bytes of an original payload a dead letter repeats.
EXCERPT_BYTES = 1024


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that could not be processed (or came too late), with the reason.

    ``payload`` is a bounded excerpt of the original message (see :func:`excerpt`);
    ``size`` and ``sha256`` describe the whole original, and ``truncated`` says
    whether the excerpt is shorter. Build one with :meth:`of`, or with
    :meth:`oversize` for a message refused unread (then ``topic`` says where it came).
    ``error`` says that a user's function (a map, filter, flat map, model or
    custom aggregation) raised on it; the agent counts those per app in its heartbeat.
    """

    reason: str
    operator: str
    payload: str
    site: str
    ts: float
    size: int = 0
    sha256: str = ""
    truncated: bool = False
    topic: str = ""
    error: bool = False

    @classmethod
    def oversize(cls, operator: str, size: int, limit: int, topic: str, site: str, ts: float) -> DeadLetter:
        """A dead letter for a message of ``size`` bytes on ``topic``, over its stream's ``limit``: no excerpt, no hash."""
        reason = (
            f"message of {size} bytes on topic {topic!r} is over the stream's limit of {limit} bytes; "
            "raise the stream's max_message_bytes in sites.yaml to take such messages"
        )
        return cls(reason, operator, "", site, ts, size, "", True, topic)

    @classmethod
    def of(
        cls,
        reason: str,
        operator: str,
        payload: bytes | str,
        site: str,
        ts: float,
        limit: int = EXCERPT_BYTES,
        *,
        error: bool = False,
    ) -> DeadLetter:
        """A dead letter carrying at most ``limit`` bytes of ``payload``, with its size and SHA-256."""
        cut = excerpt(payload, limit)
        truncated = cut["truncated"]
        return cls(reason, operator, cut["excerpt"], site, ts, cut["size"], cut["sha256"], truncated, error=error)

    def to_json(self) -> bytes:
        """The DLQ message body (with ``topic`` when known)."""
        body = {
            "reason": self.reason,
            "operator": self.operator,
            "payload": self.payload,
            "size": self.size,
            "sha256": self.sha256,
            "truncated": self.truncated,
            "site": self.site,
            "ts": self.ts,
        }
        if self.topic:
            body["topic"] = self.topic
        return orjson.dumps(body)


@dataclass(frozen=True, slots=True)
class HubRecord:
    """A record bound for the hub, before it gets its sequence number.

    ``epoch`` is the ownership epoch of the replica that produced it (see
    :class:`spanedge.plan.Assignment`).
    """

    stream: str
    site: str
    event_time: float
    key: str | None
    value: Any
    encoded: bytes
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class SinkItem:
    """A value for a local sink, with its event time (a window's end, or its record's)."""

    operator: str
    spec: SinkSpec
    value: Any
    event_time: float | None = None


@dataclass
class Outputs:
    """What a pipeline produced since the last :meth:`Pipeline.take`."""

    to_hub: list[HubRecord] = field(default_factory=list)
    sinks: list[SinkItem] = field(default_factory=list)
    dlq: list[DeadLetter] = field(default_factory=list)
    late: list[DeadLetter] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.to_hub or self.sinks or self.dlq or self.late)


def excerpt(payload: bytes | str, limit: int = EXCERPT_BYTES) -> dict[str, Any]:
    """A bounded view of a payload for a dead letter: its start, its size and its hash.

    Args:
        payload: the raw payload; text counts as its UTF-8 bytes.
        limit: the most bytes of the payload the excerpt shows.

    Returns:
        ``{"excerpt": str, "size": int, "sha256": str, "truncated": bool}``: the
        first ``limit`` bytes as text (bytes that are not UTF-8 are replaced, a
        character cut by the limit is left out, so the excerpt has at most
        ``limit`` characters), the size in bytes, the SHA-256 of the whole
        payload in hex, and whether the excerpt is shorter than the payload.

    Raises:
        ValueError: ``limit`` is negative.
    """
    if limit < 0:
        msg = f"excerpt limit must be >= 0 bytes, got {limit}"
        raise ValueError(msg)
    raw = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else bytes(payload)
    cut = min(limit, len(raw))
    if cut < len(raw):
        # step back over the continuation bytes of a UTF-8 character the limit cuts in two
        start = cut
        while start > 0 and cut - start < 3 and raw[start] & 0xC0 == 0x80:
            start -= 1
        if raw[start] >= 0xC0 and start + _utf8_length(raw[start]) > cut:
            cut = start
    head = raw[:cut].decode("utf-8", "replace")
    return {
        "excerpt": head,
        "size": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "truncated": len(raw) > limit,
    }


def _utf8_length(lead: int) -> int:
    """How many bytes the UTF-8 character starting with byte ``lead`` has (1 for a stray byte)."""
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    return 2 if lead >= 0xC0 else 1
