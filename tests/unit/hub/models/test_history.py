"""The labelled history of a model: what it keeps, for how long, after a restart, and how the ingest log feeds it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hub.ingest import log as ingest_log
from hub.models import feed, history
from hub.models.history import INDEX_FILE, Bounds, History
from spanedge.wire.log_line import LogLine, encode_lines

NOW = 1_000_000.0


def _lines(first: int, count: int, *, site: str = "gw-1", stream: str = "labelled", epoch: int = 0) -> list[LogLine]:
    """Records ``seq`` ``first`` to ``first + count - 1``, one second apart, ending one second before :data:`NOW`."""
    return [
        LogLine(
            site=site,
            stream=stream,
            seq=seq,
            event_time=NOW - 1000 + seq,
            key=None,
            value={"rms": float(seq), "failed": float(seq % 2)},
            epoch=epoch,
        )
        for seq in range(first, first + count)
    ]


def _seqs(h: History) -> list[int]:
    return [int(r["rms"]) for r in h.rows()]


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "SEGMENT_ROWS", 10)


def _open(folder: Path, bounds: Bounds | None = None, now: float = NOW) -> History:
    return History(folder, bounds, clock=lambda: now)


def test_records_come_back_in_order_with_their_event_time(tmp_path: Path) -> None:
    h = _open(tmp_path / "h")
    assert h.add(_lines(1, 5)) == 5
    rows = h.rows()
    assert [r["rms"] for r in rows] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert rows[0] == {"rms": 1.0, "failed": 1.0, "event_time": NOW - 999}


def test_a_record_seen_before_is_dropped_by_site_stream_epoch_and_seq(tmp_path: Path) -> None:
    h = _open(tmp_path / "h")
    h.add(_lines(1, 5))
    assert h.add(_lines(1, 5)) == 0  # the same segment read again
    assert h.add(_lines(3, 4)) == 1  # only seq 6 is new
    assert h.add(_lines(1, 2, site="gw-2")) == 2
    assert h.add(_lines(1, 2, epoch=1)) == 2  # a new owner of the stream starts again at 1
    assert len(h.rows()) == 10


def test_a_value_that_is_not_an_object_is_not_kept(tmp_path: Path) -> None:
    h = _open(tmp_path / "h")
    odd = LogLine(site="gw-1", stream="labelled", seq=1, event_time=NOW, key=None, value="42")
    assert h.add([odd, *_lines(2, 1)]) == 1
    assert _seqs(h) == [2]


def test_the_newest_rows_are_kept_and_segments_past_the_cap_deleted(tmp_path: Path, small_segments: None) -> None:
    h = _open(tmp_path / "h", Bounds(rows=25))
    h.add(_lines(0, 60))
    assert _seqs(h) == list(range(35, 60))
    names = sorted(p.name for p in (tmp_path / "h").glob("*.jsonl"))
    assert names == [ingest_log.segment_name(n) for n in (30, 40, 50)]  # 30-39 still holds rows 35-39


def test_records_older_than_the_window_are_neither_kept_nor_read(tmp_path: Path, small_segments: None) -> None:
    clock = [NOW]
    h = History(tmp_path / "h", Bounds(seconds=500), clock=lambda: clock[0])
    h.add(_lines(0, 600))  # event times NOW - 1000 to NOW - 401
    assert _seqs(h) == list(range(500, 600))
    clock[0] = NOW + 50  # the window moves past 550
    assert _seqs(h) == list(range(550, 600))
    h.add(_lines(600, 1))
    assert sorted(p.name for p in (tmp_path / "h").glob("*.jsonl"))[0] == ingest_log.segment_name(50)


def test_the_oldest_segments_go_when_the_history_is_over_its_size(tmp_path: Path, small_segments: None) -> None:
    h = _open(tmp_path / "h", Bounds(max_bytes=3000))
    h.add(_lines(0, 100))
    files = sorted((tmp_path / "h").glob("*.jsonl"))
    assert sum(p.stat().st_size for p in files) <= 3000
    assert files[-1].name == ingest_log.segment_name(90)
    assert _seqs(h)[-1] == 99


def test_segments_start_at_the_same_records_however_the_records_came(tmp_path: Path, small_segments: None) -> None:
    once, piecemeal = _open(tmp_path / "a"), _open(tmp_path / "b")
    once.add(_lines(0, 45))
    for first in range(0, 45, 7):
        piecemeal.add(_lines(first, min(7, 45 - first)))
    for a in sorted((tmp_path / "a").glob("*.jsonl")):
        assert a.read_bytes() == (tmp_path / "b" / a.name).read_bytes()
    assert len(list((tmp_path / "b").glob("*.jsonl"))) == 5


def test_after_a_restart_the_same_rows_and_marks(tmp_path: Path, small_segments: None) -> None:
    h = _open(tmp_path / "h", Bounds(rows=30))
    h.add(_lines(0, 45))
    again = _open(tmp_path / "h", Bounds(rows=30))
    assert again.rows() == h.rows()
    assert again.add(_lines(0, 45)) == 0
    assert again.add(_lines(45, 10)) == 10
    assert _seqs(again) == list(range(25, 55))


def test_a_crash_before_the_index_is_written_loses_no_dedupe(tmp_path: Path, small_segments: None) -> None:
    h = _open(tmp_path / "h")
    h.add(_lines(0, 15))
    before = (tmp_path / "h" / INDEX_FILE).read_bytes()
    h.add(_lines(15, 10))
    (tmp_path / "h" / INDEX_FILE).write_bytes(before)  # the segments have the records, the index does not
    again = _open(tmp_path / "h")
    assert again.add(_lines(0, 25)) == 0
    assert _seqs(again) == list(range(25))


def test_a_damaged_line_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    h = _open(tmp_path / "h")
    h.add(_lines(0, 3))
    segment = next((tmp_path / "h").glob("*.jsonl"))
    lines = segment.read_bytes().splitlines(keepends=True)
    segment.write_bytes(lines[0] + b"garbage\n" + b"".join(lines[2:]))
    assert _seqs(_open(tmp_path / "h")) == [0, 2]
    assert f"line 2 of {segment} is damaged and skipped; delete the file to drop it" in caplog.text


def test_a_partial_last_line_or_a_damaged_index_is_repaired(tmp_path: Path, small_segments: None) -> None:
    h = _open(tmp_path / "h")
    h.add(_lines(0, 15))
    last = sorted((tmp_path / "h").glob("*.jsonl"))[-1]
    with last.open("ab") as fh:
        fh.write(b'{"site": "gw-1", "str')
    (tmp_path / "h" / INDEX_FILE).write_bytes(b"{not json")
    again = _open(tmp_path / "h")
    assert _seqs(again) == list(range(15))
    assert again.add(_lines(0, 16)) == 1
    assert _seqs(_open(tmp_path / "h")) == list(range(16))


def _log_with(log_dir: Path, batches: list[list[LogLine]]) -> None:
    """An ingest log holding one sealed segment per batch."""
    writer = ingest_log.AppLog(log_dir)
    for lines in batches:
        writer.append(encode_lines(lines), lines[-1].event_time, lines[0].event_time)
        writer.flush()
        writer.seal()
    writer.close()


def test_the_log_keeps_what_the_history_has_not_read_and_drops_it_after(tmp_path: Path) -> None:
    log_dir = tmp_path / "ingest" / "plant"
    feed.follow(log_dir)
    ingest_log.subscribe(log_dir, "query")
    _log_with(log_dir, [_lines(0, 5), _lines(0, 3, stream="features"), _lines(5, 5)])
    for link in ingest_log.inbox_files(ingest_log.inbox(log_dir, "query")):
        link.unlink()  # the query read every segment
    ingest_log.collect_garbage(log_dir)
    assert len(ingest_log.segments(log_dir)) == 4  # held for the models (and the active one)
    h = _open(tmp_path / "h")
    assert feed.drain(log_dir, {"labelled": [h]}) == 10
    assert _seqs(h) == list(range(10))
    assert ingest_log.inbox_files(ingest_log.inbox(log_dir, feed.READER)) == []
    ingest_log.collect_garbage(log_dir)
    assert len(ingest_log.segments(log_dir)) == 1


def test_a_segment_read_again_after_a_crash_adds_nothing(tmp_path: Path) -> None:
    log_dir = tmp_path / "ingest" / "plant"
    feed.follow(log_dir)
    _log_with(log_dir, [_lines(0, 5)])
    link = ingest_log.inbox_files(ingest_log.inbox(log_dir, feed.READER))[0]
    kept = tmp_path / "kept"
    os.link(link, kept)
    h = _open(tmp_path / "h")
    feed.drain(log_dir, {"labelled": [h]})
    os.link(kept, link)  # the crash came before the link was dropped
    assert feed.drain(log_dir, {"labelled": [_open(tmp_path / "h")]}) == 0
    assert feed.following(log_dir)
    feed.unfollow(log_dir)
    assert not feed.following(log_dir)


def test_the_service_follows_the_logs_of_the_apps_with_models_and_trains_on_their_history(tmp_path: Path) -> None:
    from hub.models.registry import ModelRegistry
    from hub.models.service import ModelService
    from hub.models.training import TrainingFailed
    from spanedge import App

    app = App("plant")
    labelled = app.source("labelled")
    app.model("wear", algorithm="logistic_regression", features=["rms"], label="failed", train_on=labelled)
    ingest = tmp_path / "ingest"
    service = ModelService(ModelRegistry(tmp_path / "models"), {"plant": app}.__getitem__, ingest, lambda: None)
    service.clock = lambda: NOW
    service.follow(["plant", "gone"])
    assert feed.following(ingest / "plant")
    assert not (ingest / "gone").exists()
    _log_with(ingest / "plant", [_lines(0, 3), _lines(0, 2, stream="features")])
    assert service.take_in(["plant"]) == 3
    assert [r["rms"] for r in service.records("plant", "wear")] == [0.0, 1.0, 2.0]
    assert (tmp_path / "models" / "plant" / "wear" / "history" / INDEX_FILE).exists()
    with pytest.raises(TrainingFailed, match=r"holds 3 records of 'labelled' in the model's history \(the last 604800"):
        service.train("plant", "wear", "too soon")
    service.unfollow_others(["other"])  # plant is no longer deployed
    assert not feed.following(ingest / "plant")


def test_a_failed_write_leaves_the_history_as_the_disk_has_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = _open(tmp_path / "h")
    h.add(_lines(0, 3))

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(history.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        h.add(_lines(3, 2))
    monkeypatch.undo()
    assert h.add(_lines(3, 2)) == 0  # written before the fsync failed: on disk, so held
    assert _seqs(h) == [0, 1, 2, 3, 4]
