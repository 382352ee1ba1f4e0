"""The SQLite outbox: order, batches, bounds and drop policies, seqs and snapshots."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import orjson
import pytest

from edge_agent.outbox import Drainer, Outbox
from spanedge.runtime import HubRecord
from spanedge.wire.batch import decode_batch


def _rec(stream: str, i: int, site: str = "s1") -> HubRecord:
    value = {"i": i, "pad": "x" * (60 - len(str(i)))}  # every record has the same size
    return HubRecord(stream, site, float(i), f"{i:03d}", value, orjson.dumps(value))


def test_records_keep_order_and_get_contiguous_seqs(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", i) for i in range(5)]})
    box.commit({"app": [_rec("b", 0), _rec("a", 5)]})
    batches = box.batches(0, 100)
    decoded = [decode_batch(b.payload) for b in batches]
    assert [(b.stream, len(b.ids)) for b in batches] == [("a", 5), ("b", 1), ("a", 1)]
    assert [r.seq for _, recs, _ in decoded for r in recs] == [1, 2, 3, 4, 5, 1, 6]
    assert decoded[0][0] == "app"
    assert decoded[0][1][0].value["i"] == 0
    assert decoded[0][1][0].key == "000"
    assert box.stats()["records"] == 7


def test_batches_split_by_size_and_resume_after_cursor(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", i) for i in range(25)]})
    batches = box.batches(0, 100, batch_size=10)
    assert [len(b.ids) for b in batches] == [10, 10, 5]
    later = box.batches(batches[0].last_id, 100, batch_size=10)
    assert later[0].ids == batches[1].ids


def test_ack_removes_and_counts_sent(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", i) for i in range(4)]})
    first = box.batches(0, 2)[0]
    box.ack(first.ids)
    box.ack(first.ids)  # a second PUBACK for the same batch changes nothing
    assert box.stats()["records"] == 2
    assert box.stats()["sent"] == 2
    assert [r.seq for r in decode_batch(box.batches(0, 100)[0].payload)[1]] == [3, 4]


def test_drop_oldest_when_full_is_counted(tmp_path: Path) -> None:
    one = len(_rec("a", 0).encoded) + 3 + 48
    box = Outbox(tmp_path / "o.db", max_bytes=one * 10, policy="oldest")
    box.commit({"app": [_rec("a", i) for i in range(15)]})
    stats = box.stats()
    assert stats["dropped"] == 5
    assert stats["records"] == 10
    assert stats["bytes"] <= one * 10
    seqs = [r.seq for b in box.batches(0, 100) for r in decode_batch(b.payload)[1]]
    assert seqs == list(range(6, 16))


def test_drop_newest_refuses_new_records(tmp_path: Path) -> None:
    one = len(_rec("a", 0).encoded) + 3 + 48
    box = Outbox(tmp_path / "o.db", max_bytes=one * 10, policy="newest")
    stored = box.commit({"app": [_rec("a", i) for i in range(15)]})
    assert stored == 10
    assert box.stats()["dropped"] == 5
    seqs = [r.seq for b in box.batches(0, 100) for r in decode_batch(b.payload)[1]]
    assert seqs == list(range(1, 11))


def test_bad_policy_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="drop policy"):
        Outbox(tmp_path / "o.db", policy="random")


def test_backlog_seqs_and_state_survive_reopen(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", i) for i in range(3)]}, {"app": b'{"w": 1}'})
    box.ack(box.batches(0, 1)[0].ids)
    box.close()
    again = Outbox(tmp_path / "o.db")
    assert again.stats() == {"records": 2, "bytes": again.bytes, "dropped": 0, "sent": 1}
    assert again.load_state("app") == b'{"w": 1}'
    again.commit({"app": [_rec("a", 9)]})
    seqs = [r.seq for b in again.batches(0, 100) for r in decode_batch(b.payload)[1]]
    assert seqs == [2, 3, 4]


def test_failed_commit_stores_neither_records_nor_state(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", 0)]}, {"app": b"old"})

    class Broken(dict):
        def items(self):  # type: ignore[override]
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        box.commit({"app": [_rec("a", 1)]}, Broken(app=b"new"))
    assert box.stats()["records"] == 1
    assert box.load_state("app") == b"old"
    box.commit({"app": [_rec("a", 2)]})
    assert [r.seq for b in box.batches(0, 100) for r in decode_batch(b.payload)[1]] == [1, 2]


class _FakeLink:
    """Records publishes; the test plays the broker's PUBACKs."""

    def __init__(self) -> None:
        self.connected = True
        self.sent: list[tuple[int, str, bytes]] = []

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        mid = len(self.sent) + 1
        self.sent.append((mid, topic, payload))
        return mid


def test_drainer_publishes_in_order_bounded_and_removes_on_ack(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", i) for i in range(50)]})
    link = _FakeLink()
    drainer = Drainer(box, link, rate=1e9, max_inflight=2, batch_size=10)
    drainer.step()
    assert len(link.sent) == 2
    assert drainer.inflight == 2
    assert link.sent[0][1] == "spanedge/v1/app/a/s1"
    drainer.acked(1)
    drainer.step()
    assert box.stats()["records"] == 40
    assert len(link.sent) == 3
    link.connected = False
    drainer.acked(2)
    drainer.acked(3)
    drainer.step()  # disconnected: settles acks, publishes nothing
    assert len(link.sent) == 3
    assert box.stats()["records"] == 20
    link.connected = True
    drainer.step()
    seqs = [r.seq for _, _, p in link.sent for r in decode_batch(p)[1]]
    assert seqs == list(range(1, 51))


def test_drainer_publishes_every_batch_on_its_own_sites_topic(tmp_path: Path) -> None:
    """Records of another site's replica run here go on this site's topic and keep their site in the envelope."""
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("means", 1, site="field-east"), _rec("means", 2, site="barn")]})
    link = _FakeLink()
    Drainer(box, link, rate=1e9, publisher="barn").step()
    assert [topic for _, topic, _ in link.sent] == ["spanedge/v1/app/means/barn"] * 2
    sites = [{r.site for r in decode_batch(p)[1]} for _, _, p in link.sent]
    assert sites == [{"field-east"}, {"barn"}]


def test_drainer_respects_the_rate(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", i) for i in range(500)]})
    link = _FakeLink()
    drainer = Drainer(box, link, rate=100.0, max_inflight=100, batch_size=10)
    drainer.step()
    published = sum(len(decode_batch(p)[1]) for _, _, p in link.sent)
    assert 10 <= published <= 50  # the token bucket holds at most half a second of records


def _owned(stream: str, i: int, epoch: int) -> HubRecord:
    value = {"i": i}
    return HubRecord(stream, "tiny", float(i), None, value, orjson.dumps(value), epoch)


def test_each_ownership_epoch_numbers_its_stream_from_1(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_owned("avg", i, 0) for i in range(3)]})
    box.commit({"app": [_owned("avg", 10, 4), _owned("avg", 3, 0), _owned("avg", 11, 4)]})
    batches = box.batches(0, 100)
    decoded = [(b.epoch, [(r.seq, r.epoch) for r in decode_batch(b.payload)[1]]) for b in batches]
    assert decoded == [(0, [(1, 0), (2, 0), (3, 0)]), (4, [(1, 4)]), (0, [(4, 0)]), (4, [(2, 4)])]
    assert b'"epoch"' not in batches[0].payload  # epoch 0 is the envelope without the field
    box.close()
    again = Outbox(tmp_path / "o.db")
    again.commit({"app": [_owned("avg", 12, 4)]})
    assert [r.seq for r in decode_batch(again.batches(0, 100)[-1].payload)[1]] == [2, 3]


def test_ack_takes_any_number_of_ids(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", i) for i in range(40_000)]})
    (batch,) = box.batches(0, 40_000, batch_size=40_000)
    ids = batch.ids
    done = 0
    for n in range(1, 40):  # acknowledgements of every size, some for records already removed
        box.ack([*ids[done : done + n], *ids[:n]])
        done += n
    assert box.stats()["records"] == 40_000 - done
    assert box.stats()["sent"] == done
    box.ack(ids)  # all of them, in one call
    assert box.stats() == {"records": 0, "bytes": 0, "dropped": 0, "sent": 40_000}
    assert box.batches(0, 10) == []


def test_a_batch_announces_the_frontier_of_the_last_commit_it_carries(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", i) for i in range(3)], "other": [_rec("a", 9)]}, frontiers={"app": 5.0})
    box.commit({"app": [_rec("a", 3)]})  # a commit without a frontier
    box.commit({"app": [_rec("b", 4), _rec("a", 5)]}, frontiers={"app": 7.5})
    batches = box.batches(0, 100, batch_size=2)
    announced = [(b.app, b.stream, len(b.ids), decode_batch(b.payload).complete) for b in batches]
    # the frontier rides on the commit's last record of its app: only the batch carrying it announces it
    assert announced == [
        ("app", "a", 2, None),
        ("app", "a", 1, 5.0),
        ("other", "a", 1, None),
        ("app", "a", 1, None),
        ("app", "b", 1, None),
        ("app", "a", 1, 7.5),
    ]
    assert box.oldest("app") == 0.0
    assert box.oldest("missing") is None
    box.ack(batches[0].ids)
    assert box.oldest("app") == 2.0


def test_the_oldest_event_time_is_looked_up_not_scanned_even_in_an_outbox_made_without_the_index(
    tmp_path: Path,
) -> None:
    import sqlite3

    box = Outbox(tmp_path / "o.db")
    box.commit({"app": [_rec("a", i) for i in (5, 3, 9)], "other": [_rec("a", 1)]})
    box.close()
    db = sqlite3.connect(tmp_path / "o.db")
    db.execute("DROP INDEX outbox_app_t")  # as an agent of an earlier release left it
    db.commit()
    db.close()
    box = Outbox(tmp_path / "o.db")
    # every heartbeat asks it per app: with a backlog of a million records a scan took about 80 ms
    plan = " ".join(row[-1] for row in box._db.execute("EXPLAIN QUERY PLAN SELECT MIN(t) FROM outbox WHERE app = 'x'"))
    assert "USING COVERING INDEX outbox_app_t" in plan, plan
    assert (box.oldest("app"), box.oldest("other"), box.oldest("missing")) == (3.0, 1.0, None)


def test_the_outbox_and_its_directory_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        box = Outbox(tmp_path / "state" / "agent.db")
        box.commit({"app": [_rec("a", 1)]}, {"app": b"state"})
    finally:
        os.umask(old)
    files = sorted((tmp_path / "state").iterdir())
    assert {p.name for p in files} >= {"agent.db", "agent.db-wal"}
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: 0o600 for p in files}
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    box.close()
