"""The hub's ingest log and its dedupe high-water marks, without a broker or Spark."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from hub import log as ingest_log
from hub.log import HWM_FILE, AppLog, HighWaterMarks, encode_records
from spanedge.envelope import Record


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
    assert ingest_log.limit_end(tmp_path, 0, app_log.position, 1) == segs[1][0]


def test_duplicates_are_dropped_by_site_and_stream(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    assert accept(app_log, recs("s1", "x", range(10))) == 10
    assert accept(app_log, recs("s1", "x", range(10))) == 0
    assert accept(app_log, recs("s1", "x", range(5, 15))) == 5
    assert accept(app_log, recs("s1", "y", range(3))) == 3  # another stream
    assert accept(app_log, recs("s2", "x", range(3))) == 3  # another site
    assert app_log.hwm.marks == {("s1", "x"): 14, ("s1", "y"): 2, ("s2", "x"): 2}
    assert len(lines(tmp_path)) == 21


def test_marks_survive_a_restart(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    accept(app_log, recs("s1", "x", range(10)))
    app_log.close()
    again = AppLog(tmp_path)
    assert accept(again, recs("s1", "x", range(12))) == 2
    assert again.hwm.marks[("s1", "x")] == 11


def test_marks_are_rebuilt_from_the_log_when_the_snapshot_is_stale(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    accept(app_log, recs("s1", "x", range(5)))
    stale = (tmp_path / HWM_FILE).read_bytes()
    accept(app_log, recs("s1", "x", range(5, 9)))
    app_log.close()
    (tmp_path / HWM_FILE).write_bytes(stale)  # a crash after the fsync, before the snapshot
    again = AppLog(tmp_path)
    assert again.hwm.marks[("s1", "x")] == 8
    assert accept(again, recs("s1", "x", range(9))) == 0


def test_a_corrupt_snapshot_falls_back_to_the_whole_log(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path)
    accept(app_log, recs("s1", "x", range(5)))
    app_log.close()
    (tmp_path / HWM_FILE).write_bytes(b"{not json")
    again = AppLog(tmp_path)
    assert again.hwm.marks == {("s1", "x"): 4}


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


def test_segments_are_deleted_once_every_reader_committed_past_them(tmp_path: Path) -> None:
    app_log = AppLog(tmp_path, segment_bytes=300)
    for i in range(6):
        accept(app_log, recs("s1", "x", range(i * 3, i * 3 + 3)))
    segs = ingest_log.segments(tmp_path)
    assert len(segs) >= 4
    assert ingest_log.register_reader(tmp_path, "a") == 0
    assert ingest_log.register_reader(tmp_path, "b") == 0
    assert ingest_log.commit(tmp_path, "a", segs[2][0]) == []  # b still needs them
    deleted = ingest_log.commit(tmp_path, "b", segs[1][0])
    assert deleted == [segs[0][1]]
    assert ingest_log.head(tmp_path) == segs[1][0]
    with pytest.raises(FileNotFoundError, match="missing"):
        ingest_log.read_bytes(tmp_path, 0, segs[1][0])
    ingest_log.commit(tmp_path, "a", app_log.position)
    ingest_log.commit(tmp_path, "b", app_log.position)
    remaining = ingest_log.segments(tmp_path)
    assert remaining == [segs[-1]]  # the active segment stays
    assert ingest_log.register_reader(tmp_path, "a") == app_log.position  # registration keeps progress
    ingest_log.unregister_reader(tmp_path, "a")
    assert ingest_log.register_reader(tmp_path, "a", 7) == 7
    assert ingest_log.readers(tmp_path) == {"a": 7, "b": app_log.position}


def test_high_water_marks_round_trip() -> None:
    hwm = HighWaterMarks({("s1", "x"): 3}, 42)
    assert HighWaterMarks.from_json(hwm.to_json()) == hwm
    with pytest.raises(ValueError, match="malformed"):
        HighWaterMarks.from_json(b'{"marks": 1}')
