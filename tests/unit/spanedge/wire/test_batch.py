"""The edge→hub batch: the writers (outbox, encoder) and the hub's reader agree, and junk is refused."""

from __future__ import annotations

from pathlib import Path

import msgspec
import orjson
import pytest

from edge_agent.outbox import Outbox
from spanedge.runtime import HubRecord
from spanedge.wire.batch import VERSION, BatchMessage, Record, decode_batch, encode_batch


def test_a_batch_round_trips_with_its_version_first() -> None:
    records = [Record("barn", "dry", i, 1700000000.0 + i, "u1", {"n": i}, 2) for i in range(1, 4)]
    payload = encode_batch("farm", records, complete=1700000002.5)
    assert payload.startswith(b'{"v":%d,"app":"farm"' % VERSION)
    assert decode_batch(payload) == ("farm", records, 1700000002.5)


def test_the_outbox_writes_what_the_encoder_writes(tmp_path: Path) -> None:
    """The outbox splices stored values into the one definition: its bytes are the encoder's."""
    box = Outbox(tmp_path / "outbox.db")
    values = [{"t": 1.5, "name": "é"}, [1, None], "text", 7]
    recs = [
        HubRecord("dry", "barn", 1000.0 + i, "k" if i else None, v, orjson.dumps(v), 3) for i, v in enumerate(values)
    ]
    box.commit({"farm": recs}, frontiers={"farm": 1002.0})
    (batch,) = box.batches(0, 100)
    expected = [Record("barn", "dry", i + 1, r.event_time, r.key, r.value, 3) for i, r in enumerate(recs)]
    assert batch.payload == encode_batch("farm", expected, complete=1002.0)
    assert msgspec.json.decode(batch.payload, type=BatchMessage).v == VERSION
    box.close()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "malformed batch"),
        (b"[1]", "malformed batch: Expected `object`, got `array`"),
        (b'{"v": 1, "app": "a", "stream": "x", "records": []}', "malformed batch: .*missing required field `site`"),
        (b'{"app": "a", "site": "s", "stream": "x", "records": []}', "unsupported envelope version None, expected 1"),
        (b'{"v": 2, "app": "a", "site": "s", "stream": "x", "records": []}', "unsupported envelope version 2"),
        (b'{"v": true, "app": "a", "site": "s", "stream": "x", "records": []}', "unsupported envelope version True"),
        (
            b'{"v": 1, "app": "a", "site": "s", "stream": "x", "records": [{"seq": "1", "t": 1, "v": 0}]}',
            r"records\[0\]\.seq",
        ),
        (
            b'{"v": 1, "app": "a", "site": "s", "stream": "x", "records": [{"seq": 1, "t": 1}]}',
            "missing required field `v`",
        ),
        (
            b'{"v": 1, "app": "a", "site": "s", "stream": "x", "epoch": -1, "records": []}',
            "epoch must be a plan version",
        ),
        (
            b'{"v": 1, "app": "a", "site": "s", "stream": "x", "complete": 1e400, "records": []}',
            "complete must be an event time",
        ),
    ],
)
def test_malformed_batches_are_refused_with_the_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode_batch(payload)
