"""The hub's ingest log and its dedupe high-water marks, without a broker or Spark."""

from __future__ import annotations

import math
import time
from pathlib import Path

import orjson
import pytest

from hub.ingest import log as ingest_log
from hub.ingest.log import HWM_FILE, AppLog, HighWaterMarks, encode_records
from spanedge.wire.batch import Record


def recs(site: str, stream: str, seqs: range, t0: float = 1000.0) -> list[Record]:
    return [Record(site, stream, s, t0 + s, f"k{s % 3}", {"i": s, "name": "é"}) for s in seqs]


def accept(app_log: AppLog, records: list[Record]) -> int:
    fresh = [r for r in records if app_log.hwm.accept(r)]
    app_log.append(encode_records(fresh))
    app_log.flush()
    return len(fresh)


def lines(log_dir: Path, start: int = 0) -> list[dict]:
    return list(ingest_log.iter_lines(log_dir, max(start, ingest_log.head(log_dir)), ingest_log.tail(log_dir)))


def test_append_and_read_back_across_segments(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, segment_bytes=500)
    assert accept(app_log, recs("s1", "x", range(50))) == 50
    assert len(ingest_log.segments(tmp_path)) == 1  # a group never splits over segments
    assert accept(app_log, recs("s1", "x", range(50, 60))) == 10
    assert accept(app_log, recs("s2", "x", range(5))) == 5
    segs = ingest_log.segments(tmp_path)
    assert len(segs) == 3
    assert ingest_log.tail(tmp_path) == app_log.position
    rows = lines(tmp_path)
    assert [(r["site"], r["seq"]) for r in rows] == [("s1", i) for i in range(60)] + [("s2", i) for i in range(5)]
    assert orjson.loads(rows[0]["value"]) == {"i": 0, "name": "é"}
    assert rows[0]["key"] == "k0"
    ranges = ingest_log.split_ranges(tmp_path, 0, app_log.position)
    assert [a for a, _ in ranges] == [b for b, _ in segs]
    assert b"".join(ingest_log.read_bytes(tmp_path, a, b) for a, b in ranges) == ingest_log.read_bytes(
        tmp_path, 0, app_log.position
    )


def test_duplicates_are_dropped_by_site_and_stream(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    assert accept(app_log, recs("s1", "x", range(10))) == 10
    assert accept(app_log, recs("s1", "x", range(10))) == 0
    assert accept(app_log, recs("s1", "x", range(5, 15))) == 5
    assert accept(app_log, recs("s1", "y", range(3))) == 3  # another stream
    assert accept(app_log, recs("s2", "x", range(3))) == 3  # another site
    assert app_log.hwm.marks == {("s1", "x", 0): 14, ("s1", "y", 0): 2, ("s2", "x", 0): 2}
    assert len(lines(tmp_path)) == 21


def test_marks_survive_a_restart(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    accept(app_log, recs("s1", "x", range(10)))
    app_log.close()
    again = AppLog(tmp_path)
    assert accept(again, recs("s1", "x", range(12))) == 2
    assert again.hwm.marks[("s1", "x", 0)] == 11


def test_marks_are_rebuilt_from_the_log_when_the_snapshot_is_stale(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    accept(app_log, recs("s1", "x", range(5)))
    stale = (tmp_path / HWM_FILE).read_bytes()
    accept(app_log, recs("s1", "x", range(5, 9)))
    app_log.close()
    (tmp_path / HWM_FILE).write_bytes(stale)  # a crash after the fsync, before the snapshot
    again = AppLog(tmp_path)
    assert again.hwm.marks[("s1", "x", 0)] == 8
    assert accept(again, recs("s1", "x", range(9))) == 0


def test_a_corrupt_snapshot_falls_back_to_the_whole_log(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    accept(app_log, recs("s1", "x", range(5)))
    app_log.close()
    (tmp_path / HWM_FILE).write_bytes(b"{not json")
    again = AppLog(tmp_path)
    assert again.hwm.marks == {("s1", "x", 0): 4}


def test_a_partial_last_record_is_cut_on_open(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    accept(app_log, recs("s1", "x", range(3)))
    app_log.close()
    _, path = ingest_log.segments(tmp_path)[-1]
    good = path.stat().st_size
    with path.open("ab") as fh:
        fh.write(b'{"site": "s1", "stream": "x", "se')  # killed mid-write
    assert ingest_log.tail(tmp_path) == good  # readers never see it
    again = AppLog(tmp_path)
    assert path.stat().st_size == good
    assert again.position == good
    assert accept(again, recs("s1", "x", range(4))) == 1
    assert [r["seq"] for r in lines(tmp_path)] == [0, 1, 2, 3]


def test_segments_are_deleted_once_every_reader_processed_them(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, seal_interval=0)
    ingest_log.subscribe(tmp_path, "a")
    ingest_log.subscribe(tmp_path, "b")
    for i in range(4):
        accept(app_log, recs("s1", "x", range(i * 3, i * 3 + 3)))
        app_log.seal()
    segs = ingest_log.segments(tmp_path)
    assert len(segs) == 5  # four sealed, one active
    a, b = (ingest_log.inbox(tmp_path, reader) for reader in ("a", "b"))
    for path in ingest_log.inbox_files(a)[:3]:  # Spark's file source deletes what it committed
        path.unlink()
    assert ingest_log.collect_garbage(tmp_path) == []  # b still needs them
    ingest_log.inbox_files(b)[0].unlink()
    assert ingest_log.collect_garbage(tmp_path) == [segs[0][1]]
    assert ingest_log.head(tmp_path) == segs[1][0]
    with pytest.raises(FileNotFoundError, match="missing"):
        ingest_log.read_bytes(tmp_path, 0, segs[1][0])
    for path in [*ingest_log.inbox_files(a), *ingest_log.inbox_files(b)]:
        path.unlink()
    ingest_log.collect_garbage(tmp_path)
    assert ingest_log.segments(tmp_path) == [segs[-1]]  # the active segment stays
    assert ingest_log.inbox_positions(tmp_path) == {"a": segs[-1][0], "b": segs[-1][0]}


def test_high_water_marks_round_trip() -> None:
    hwm = HighWaterMarks({("s1", "x", 0): 3, ("s1", "x", 2): 1}, 42)
    assert HighWaterMarks.from_json(hwm.to_json()) == hwm
    with pytest.raises(ValueError, match="malformed"):
        HighWaterMarks.from_json(b'{"marks": 1}')


def names(folder: Path) -> list[str]:
    return [p.name for p in ingest_log.inbox_files(folder)]


def test_sealed_segments_reach_every_inbox_once(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, seal_interval=3600)
    accept(app_log, recs("s1", "x", range(5)))
    assert app_log.seal()
    assert not app_log.seal()  # nothing new: no empty segment
    assert ingest_log.subscribe(tmp_path, "a") == 0  # a new reader gets what the log retains
    first = ingest_log.segments(tmp_path)[0][1].name
    assert names(ingest_log.inbox(tmp_path, "a")) == [first]
    accept(app_log, recs("s1", "x", range(5, 8)))
    assert not app_log.seal_if_due()  # the last seal is recent
    assert ingest_log.sealed_tail(tmp_path) < ingest_log.tail(tmp_path)
    assert app_log.seal_if_due(now=app_log.seal_due_at())
    assert ingest_log.sealed_tail(tmp_path) == ingest_log.tail(tmp_path)
    second = ingest_log.segments(tmp_path)[1][1].name
    assert names(ingest_log.inbox(tmp_path, "a")) == [first, second]
    assert ingest_log.subscribe(tmp_path, "a") == 0  # subscribing again keeps the inbox
    assert names(ingest_log.inbox(tmp_path, "a")) == [first, second]
    # the links are the segments' bytes: whole records only
    data = (ingest_log.inbox(tmp_path, "a") / second).read_bytes()
    assert [orjson.loads(line)["seq"] for line in data.splitlines()] == [5, 6, 7]


def test_the_first_seal_is_due_an_interval_after_the_log_opened(tmp_path: Path) -> None:
    before = time.monotonic()
    app_log = AppLog(tmp_path, seal_interval=3600)
    accept(app_log, recs("s1", "x", range(3)))
    due = app_log.seal_due_at()
    assert due is not None
    assert before + 3600 <= due <= time.monotonic() + 3600  # not "at once" because the machine is up for long
    assert not app_log.seal_if_due()


def test_a_reader_that_processed_its_inbox_lets_the_log_drop_segments(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, seal_interval=0)
    ingest_log.subscribe(tmp_path, "a")
    for i in range(3):
        accept(app_log, recs("s1", "x", range(i * 3, i * 3 + 3)))
        app_log.seal()
    folder = ingest_log.inbox(tmp_path, "a")
    assert len(names(folder)) == 3
    assert len(ingest_log.segments(tmp_path)) == 4  # three sealed, one active
    for path in ingest_log.inbox_files(folder)[:2]:  # Spark's file source deletes what it committed
        path.unlink()
    accept(app_log, recs("s1", "x", range(9, 10)))
    app_log.seal()
    assert ingest_log.head(tmp_path) == ingest_log.inbox_position(tmp_path, "a")
    assert len(ingest_log.segments(tmp_path)) == 3
    ingest_log.unsubscribe(tmp_path, "a")
    assert ingest_log.inbox_positions(tmp_path) == {}


def test_a_successor_gets_exactly_what_its_predecessor_had_not_processed(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, seal_interval=0)
    ingest_log.subscribe(tmp_path, "old")
    for i in range(3):
        accept(app_log, recs("s1", "x", range(i * 3, i * 3 + 3)))
        app_log.seal()
    files = names(ingest_log.inbox(tmp_path, "old"))
    ingest_log.inbox(tmp_path, "new").mkdir()  # the successor's query was built first
    ingest_log.hand_over(tmp_path, "old", "new", processed={files[0]})
    assert not ingest_log.inbox(tmp_path, "old").exists()
    assert names(ingest_log.inbox(tmp_path, "new")) == files[1:]
    accept(app_log, recs("s1", "x", range(9, 12)))
    app_log.seal()
    assert len(names(ingest_log.inbox(tmp_path, "new"))) == 3
    assert ingest_log.subscribe(tmp_path, "new") == int(files[1].removesuffix(".jsonl"))
    assert ingest_log.head(tmp_path) == int(files[1].removesuffix(".jsonl"))  # the processed one was dropped


def test_reopening_seals_the_last_segment_and_hands_it_out(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, seal_interval=3600)
    ingest_log.subscribe(tmp_path, "a")
    accept(app_log, recs("s1", "x", range(4)))
    app_log.close()  # stopped before the segment was sealed
    assert names(ingest_log.inbox(tmp_path, "a")) == []
    again = AppLog(tmp_path)
    assert len(names(ingest_log.inbox(tmp_path, "a"))) == 1
    assert ingest_log.sealed_tail(tmp_path) == again.position


def _epoch(records: list[Record], epoch: int) -> list[Record]:
    return [Record(r.site, r.stream, r.seq, r.event_time, r.key, r.value, epoch) for r in records]


def test_each_ownership_epoch_has_its_own_mark(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    assert accept(app_log, recs("s1", "x", range(1, 41))) == 40  # the first owner of s1's replica
    assert accept(app_log, _epoch(recs("s1", "x", range(1, 11)), 3)) == 10  # the new owner from plan v3
    assert accept(app_log, recs("s1", "x", range(41, 46))) == 5  # the old owner finishes its windows
    assert accept(app_log, _epoch(recs("s1", "x", range(5, 13)), 3)) == 2  # a redelivery, then two new
    assert app_log.hwm.marks == {("s1", "x", 0): 45, ("s1", "x", 3): 12}
    app_log.close()
    again = AppLog(tmp_path)
    assert again.hwm.marks == {("s1", "x", 0): 45, ("s1", "x", 3): 12}
    assert [(r["seq"], r.get("epoch", 0)) for r in lines(tmp_path)][40:42] == [(1, 3), (2, 3)]


def test_epoch_marks_are_rebuilt_from_the_log(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    accept(app_log, recs("s1", "x", range(1, 6)))
    stale = (tmp_path / HWM_FILE).read_bytes()
    accept(app_log, _epoch(recs("s1", "x", range(1, 4)), 2))
    app_log.close()
    (tmp_path / HWM_FILE).write_bytes(stale)
    again = AppLog(tmp_path)
    assert again.hwm.marks == {("s1", "x", 0): 5, ("s1", "x", 2): 3}


def test_every_mark_names_its_epoch() -> None:
    assert HighWaterMarks.from_json(orjson.dumps({"position": 7, "marks": [["s1", "x", 9, 0]]})) == HighWaterMarks(
        {("s1", "x", 0): 9}, 7
    )
    with pytest.raises(ValueError, match="malformed"):
        HighWaterMarks.from_json(orjson.dumps({"position": 7, "marks": [["s1", "x", 9]]}))
    with pytest.raises(ValueError, match="malformed"):
        HighWaterMarks.from_json(orjson.dumps({"position": 7, "marks": [["s1", "x"]]}))


def test_a_hold_keeps_segments_with_later_records_from_its_readers_until_it_is_lifted(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, seal_interval=0)
    ingest_log.subscribe(tmp_path, "window")
    ingest_log.subscribe(tmp_path, "stateless")

    def seal(site: str, seqs: range, t0: float) -> str:
        fresh = [r for r in recs(site, "x", seqs, t0) if app_log.hwm.accept(r)]
        app_log.append(encode_records(fresh), max(r.event_time for r in fresh))
        app_log.flush()
        assert app_log.seal()
        return ingest_log.segments(tmp_path)[-2][1].name

    before = seal("s1", range(3), 1000.0)  # event times 1000-1002
    app_log.set_hold(ingest_log.Hold(1005.0, frozenset({"window"})))
    assert app_log.seal_due_at() is None  # nothing to seal
    edge = seal("s1", range(3, 6), 1000.0)  # 1003-1005: reaches the hold's time
    late = seal("s2", range(2), 1001.0)  # an owed site's earlier records, after it
    assert names(ingest_log.inbox(tmp_path, "window")) == [before]
    assert names(ingest_log.inbox(tmp_path, "stateless")) == [before, edge, late]
    assert ingest_log.inbox_position(tmp_path, "window") == ingest_log.inbox_position(tmp_path, "stateless")
    assert ingest_log.sealed_tail(tmp_path) > int(edge.removesuffix(".jsonl"))
    app_log.append(encode_records(recs("s3", "x", range(1), 900.0)), 900.0)
    assert app_log.seal_due_at() == pytest.approx(app_log._sealed_at)  # two held back: sealed as often as ever
    more = [seal("s1", range(10 + 3 * i, 13 + 3 * i), 1000.0) for i in range(ingest_log.HELD_MANY - 2)]
    app_log.append(encode_records(recs("s3", "x", range(1, 2), 900.0)), 900.0)
    assert app_log.seal_due_at() == pytest.approx(app_log._sealed_at + ingest_log.HELD_SEAL_INTERVAL_S)  # many
    app_log.set_hold(None)  # the owed records are in: the held segments come together, in order
    assert names(ingest_log.inbox(tmp_path, "window")) == [before, edge, late, *more]
    app_log.seal()
    assert len(names(ingest_log.inbox(tmp_path, "window"))) == 4 + len(more)
    assert app_log.seal_due_at() is None


def test_a_log_reopened_under_a_hold_keeps_back_what_it_held(tmp_path: Path) -> None:
    hold = ingest_log.Hold(1005.0, frozenset({"window"}))
    app_log = AppLog(tmp_path, seal_interval=0, hold=hold)
    ingest_log.subscribe(tmp_path, "window")
    for site, t0 in (("s1", 1000.0), ("s2", 1003.0)):  # event times 1000-1002, then 1003-1005
        fresh = [r for r in recs(site, "x", range(3), t0) if app_log.hwm.accept(r)]
        app_log.append(encode_records(fresh), max(r.event_time for r in fresh))
        app_log.flush()
        app_log.seal()
    sealed = [path.name for _, path in ingest_log.segments(tmp_path)[:-1]]
    assert names(ingest_log.inbox(tmp_path, "window")) == sealed[:1]
    app_log.close()  # the hub restarts: the writer knew the segments' times, the new one reads them back
    again = AppLog(tmp_path, seal_interval=0, hold=hold)
    assert names(ingest_log.inbox(tmp_path, "window")) == sealed[:1]
    again.set_hold(None)
    assert names(ingest_log.inbox(tmp_path, "window")) == sealed


def test_a_held_reader_never_gets_a_window_end_past_a_record_still_waiting_in_the_log(tmp_path: Path) -> None:
    """A cut-off site's backlog reaches the log after the others' later records: those wait to be read with it."""
    app_log = AppLog(tmp_path, seal_interval=0)
    ingest_log.subscribe(tmp_path, "window")

    def seal(site: str, times: list[float]) -> str:
        fresh = [Record(site, "x", int(t * 10), t, None, {"t": t}) for t in times]
        app_log.append(encode_records(fresh), max(times), min(times))
        app_log.flush()
        assert app_log.seal()
        return ingest_log.segments(tmp_path)[-2][1].name

    app_log.set_hold(ingest_log.Hold(1008.0, frozenset({"window"}), grid=10.0))  # the cut-off site's frontier
    first = seal("barn", [1005.0, 1009.0])  # 1009: past the hold
    second = seal("barn", [1010.5, 1012.0])
    assert names(ingest_log.inbox(tmp_path, "window")) == []
    app_log.set_hold(ingest_log.Hold(1013.0, frozenset({"window"}), grid=10.0))  # the site is back, draining
    backlog = seal("west", [1008.5, 1011.0])  # its records of the window [1000, 1010) come after barn's
    # barn's two segments alone would close [1000, 1010) before west's 1008.5: all three go together
    assert names(ingest_log.inbox(tmp_path, "window")) == [first, second, backlog]
    later = seal("barn", [1013.0])  # at the hold's time: held
    app_log.append(encode_records([Record("west", "x", 9999, 1009.5, None, {})]), 1009.5, 1009.5)  # not sealed
    app_log.set_hold(ingest_log.Hold(1020.0, frozenset({"window"}), grid=10.0))
    assert names(ingest_log.inbox(tmp_path, "window")) == [first, second, backlog]  # 1013 would close [1000, 1010)
    app_log.flush()
    assert app_log.seal()
    last = ingest_log.segments(tmp_path)[-2][1].name
    assert names(ingest_log.inbox(tmp_path, "window")) == [first, second, backlog, later, last]
    assert ingest_log.closes_before(1010.0, 1009.5, 10.0)
    assert not ingest_log.closes_before(1009.9, 1009.5, 10.0)
    assert not ingest_log.closes_before(1e12, 1.0, 0.0)  # no grid: by the hold's time alone


def test_a_reader_with_its_own_later_start_gets_what_the_others_wait_for(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, seal_interval=0)
    for reader in ("needs-it", "other"):
        ingest_log.subscribe(tmp_path, reader)

    def seal(site: str, seqs: range, t0: float) -> str:
        fresh = [r for r in recs(site, "x", seqs, t0) if app_log.hwm.accept(r)]
        app_log.append(encode_records(fresh), max(r.event_time for r in fresh), min(r.event_time for r in fresh))
        app_log.flush()
        assert app_log.seal()
        return ingest_log.segments(tmp_path)[-2][1].name

    hold = ingest_log.Hold(1005.0, frozenset({"needs-it", "other"}), own={"other": math.inf})
    assert hold.start_of("needs-it") == 1005.0
    assert hold.start_of("other") == math.inf
    assert ingest_log.Hold(1005.0, frozenset(), own={"x": 900.0}).start_of("x") == 1005.0  # never earlier
    app_log.set_hold(hold)
    before = seal("s1", range(3), 1000.0)  # 1000-1002
    after = seal("s1", range(3, 6), 1000.0)  # 1003-1005: reaches the hold's time
    assert names(ingest_log.inbox(tmp_path, "needs-it")) == [before]
    assert names(ingest_log.inbox(tmp_path, "other")) == [before, after]
    app_log.set_hold(None)
    assert names(ingest_log.inbox(tmp_path, "needs-it")) == [before, after]
