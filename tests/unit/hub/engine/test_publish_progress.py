"""An MQTT sink that dies mid-batch republishes, on the replay, only what the broker had not acknowledged."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from hub.engine.publish_progress import PublishProgress, digest, publish_order
from hub.engine.sinks import BatchSink, MemoryStore
from spanedge.sites import Broker

BROKER = Broker(scheme="mqtt", host="127.0.0.1", port=9)


class Crash(Exception):
    """The hub process dying, as seen from inside the sink."""


class FakeBroker:
    """Receives a message when the sink waits for its acknowledgement; the client dies after ``acks`` of them."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.acks: int | None = None

    def client(self) -> FakeClient:
        return FakeClient(self)


class FakeInfo:
    def __init__(self, broker: FakeBroker, payload: bytes) -> None:
        self.broker, self.payload = broker, payload

    def wait_for_publish(self, timeout: float) -> None:
        self.broker.received.append(self.payload)  # the broker has it...
        if self.broker.acks is not None:
            if self.broker.acks == 0:
                raise Crash  # ...but the client dies before its acknowledgement comes back
            self.broker.acks -= 1

    def is_published(self) -> bool:
        return True


class FakeClient:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    def publish(self, topic: str, payload: bytes, qos: int) -> FakeInfo:
        assert qos == 1
        return FakeInfo(self.broker, payload)


class FakeFrame:
    """What ``foreachBatch`` hands the sink, as far as it looks: the batch's rows as Arrow, its session, a writer."""

    def __init__(self, values: list[str]) -> None:
        self.values = values
        self.sparkSession = self  # PySpark's names
        self.sparkContext = self
        self.write = self
        self.ran_without_output = False

    def setLocalProperty(self, key: str, value: str | None) -> None:
        pass

    def format(self, name: str) -> FakeFrame:
        assert name == "noop"
        return self

    def mode(self, name: str) -> FakeFrame:
        return self

    def save(self) -> None:
        self.ran_without_output = True

    def toArrow(self) -> pa.Table:  # PySpark's name
        return pa.table({"value": self.values})


def _sink(state: Path, broker: FakeBroker) -> BatchSink:
    sink = BatchSink("alerts", "mqtt", "farm/alerts", state, MemoryStore(), broker=BROKER)
    sink._client = broker.client()
    return sink


def test_the_progress_file_keeps_the_last_count_of_its_batch_and_messages_only(tmp_path: Path) -> None:
    progress = PublishProgress(tmp_path / "q" / "sink.published")
    of = digest("farm/alerts", [b"a", b"b"])
    assert progress.acknowledged(3, of) == 0
    for count in (1, 2, 10, 11):
        progress.record(3, of, count)
    assert progress.acknowledged(3, of) == 11
    assert progress.acknowledged(4, of) == 0  # a count of another batch says nothing about this one
    assert progress.acknowledged(3, digest("farm/alerts", [b"a", b"c"])) == 0  # nor of other messages
    assert progress.acknowledged(3, digest("farm/other", [b"a", b"b"])) == 0  # nor to another topic
    progress.record(12_345_678_901, of, 7)
    assert progress.acknowledged(12_345_678_901, of) == 7
    assert len(progress.path.read_text().splitlines()) == 1
    progress.close()
    progress.path.write_text("junk\n")
    assert PublishProgress(progress.path).acknowledged(3, of) == 0


def test_publish_order_ignores_the_order_rows_come_in() -> None:
    values = [f'{{"unit": "u{i}", "n": {i % 7}}}' for i in range(50)]
    shuffled = values[:]
    random.Random(1).shuffle(shuffled)
    assert publish_order(shuffled) == publish_order(values) == sorted(v.encode() for v in values)
    assert publish_order([b"b", "a", None]) == [b"", b"a", b"b"]
    # the digest sees where one message ends and the next begins
    assert digest("t", [b"ab", b"c"]) != digest("t", [b"a", b"bc"])


@pytest.mark.parametrize("acked", [0, 1, 37, 99])
def test_a_replayed_batch_publishes_only_what_the_broker_had_not_acknowledged(tmp_path: Path, acked: int) -> None:
    state = tmp_path / "checkpoints" / "farm" / "q" / "sink.json"
    values = [f'{{"window": {i}, "n": {i * 3 % 11}}}' for i in range(100)]
    broker = FakeBroker()
    broker.acks = acked
    with pytest.raises(Crash):
        _sink(state, broker)(FakeFrame(values), 5)  # type: ignore[arg-type]
    assert len(broker.received) == acked + 1
    broker.acks = None
    replayed = values[:]
    random.Random(acked).shuffle(replayed)  # Spark may hand the replayed rows over in another order
    again = _sink(state, broker)
    again(FakeFrame(replayed), 5)  # type: ignore[arg-type]
    counts = Counter(broker.received)
    assert set(counts) == {v.encode() for v in values}
    # only the message in flight when the client died comes twice
    assert [v for v, n in counts.items() if n > 1] == [publish_order(values)[acked]]
    assert again.rows == len(values)
    broker.received.clear()
    later = FakeFrame(values)
    again(later, 5)  # type: ignore[arg-type]  # completed: a later replay runs and writes nothing
    assert broker.received == []
    assert later.ran_without_output


def test_a_batch_after_a_crashed_one_starts_from_its_first_message(tmp_path: Path) -> None:
    state = tmp_path / "checkpoints" / "farm" / "q" / "sink.json"
    broker = FakeBroker()
    sink = _sink(state, broker)
    sink(FakeFrame(["a", "b", "c"]), 0)  # type: ignore[arg-type]
    sink(FakeFrame(["d", "e"]), 1)  # type: ignore[arg-type]
    assert broker.received == [b"a", b"b", b"c", b"d", b"e"]


def test_a_replay_that_would_publish_other_messages_publishes_them_all(tmp_path: Path) -> None:
    """A count is only skipped over the same messages: say, a handover's share changed what the batch writes."""
    state = tmp_path / "checkpoints" / "farm" / "q" / "sink.json"
    values = [f"m{i:03d}" for i in range(40)]
    broker = FakeBroker()
    broker.acks = 25
    with pytest.raises(Crash):
        _sink(state, broker)(FakeFrame(values), 9)  # type: ignore[arg-type]
    broker.acks = None
    broker.received.clear()
    other = values[:30]
    _sink(state, broker)(FakeFrame(other), 9)  # type: ignore[arg-type]
    assert broker.received == [v.encode() for v in other]
