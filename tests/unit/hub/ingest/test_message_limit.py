"""The hub's ingest takes no message over its max_message_bytes: dead-lettered with its size and topic, unread."""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson

from hub.ingest.consumer import Ingest
from spanedge import topics
from spanedge.sites import Broker
from spanedge.wire.batch import Record, encode_batch
from tests.unit.fakes import FakeIngestClient, message

APP = "farm"


def _batch(seqs: range, pad: int = 0) -> bytes:
    return encode_batch(APP, [Record("barn", "means", s, 1000.0 + s, "p1", {"n": s, "pad": "x" * pad}) for s in seqs])


def test_an_oversize_batch_is_dead_lettered_unread_and_acknowledged() -> None:
    topic = topics.data(APP, "means", "barn")
    small, big = _batch(range(1, 3)), _batch(range(3, 13), pad=500)
    assert len(small) < 2048 < len(big)
    with tempfile.TemporaryDirectory() as log_dir:
        ingest = Ingest(Broker(scheme="mqtt", host="127.0.0.1", port=9), Path(log_dir), max_message_bytes=2048)
        client = FakeIngestClient()
        ingest._client = client  # type: ignore[assignment]
        ingest._write_group([message(1, topic, small), message(2, topic, big)])
        stats = ingest.stats()
        ingest.stop()
    assert (stats["records"], stats["oversize"], stats["malformed"]) == (2, 1, 0)
    assert stats["apps"][APP]["barn"]["means"]["last_seq"] == 2
    assert sorted(client.acked) == [1, 2]
    ((dlq, body),) = client.published
    letter = orjson.loads(body)
    assert dlq == topics.dlq(APP, "barn")
    assert (letter["topic"], letter["size"], letter["payload"], letter["truncated"]) == (topic, len(big), "", True)
    assert f"message of {len(big)} bytes is over the hub's limit of 2048 bytes" in letter["reason"]
