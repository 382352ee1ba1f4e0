"""What a query's checkpoint says it processed, and handing its unread segments to a successor (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hub.control.state import StateStore
from hub.engine.checkpoints import (
    check_distinct,
    checkpoint_name,
    is_checkpoint_of,
    processed_files,
    retire,
    settled,
    unprocessed,
)
from hub.ingest import log as ingest_log
from hub.ingest.log import AppLog, encode_records
from spanedge.errors import InvalidDataflow
from spanedge.names import InvalidName
from spanedge.wire.batch import Record


def write_batch(checkpoint: Path, batch: int, files: list[Path], committed: bool, watermarks: tuple[int, int]) -> None:
    """Write what Spark's file source and commit log write for one micro-batch."""
    (checkpoint / "sources" / "0").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets").mkdir(exist_ok=True)
    (checkpoint / "commits").mkdir(exist_ok=True)
    entries = [json.dumps({"path": p.resolve().as_uri(), "timestamp": 1, "batchId": batch}) for p in files]
    (checkpoint / "sources" / "0" / str(batch)).write_text("\n".join(["v1", *entries]))
    used, following = watermarks
    (checkpoint / "offsets" / str(batch)).write_text(
        "\n".join(["v1", json.dumps({"batchWatermarkMs": used, "conf": {}}), json.dumps({"logOffset": batch})])
    )
    if committed:
        (checkpoint / "commits" / str(batch)).write_text(
            "\n".join(["v1", json.dumps({"nextBatchWatermarkMs": following})])
        )


def sealed_log(log_dir: Path, readers: list[str], batches: int) -> None:
    app_log = AppLog(log_dir, seal_interval=0)
    for reader in readers:
        ingest_log.subscribe(log_dir, reader)
    for i in range(batches):
        records = [Record("s1", "x", i * 3 + j, 1000.0 + i * 3 + j, None, {"j": j}) for j in range(3)]
        fresh = [r for r in records if app_log.hwm.accept(r)]
        app_log.append(encode_records(fresh))
        app_log.flush()
        app_log.seal()
    app_log.close()


def test_only_committed_batches_count_as_processed(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    sealed_log(log_dir, ["q1"], 3)
    inbox = ingest_log.inbox_files(ingest_log.inbox(log_dir, "q1"))
    checkpoint = tmp_path / "cp"
    write_batch(checkpoint, 0, inbox[:1], committed=True, watermarks=(0, 0))
    write_batch(checkpoint, 1, inbox[1:2], committed=False, watermarks=(0, 0))  # planned, not committed
    assert processed_files(checkpoint) == {inbox[0].name}
    assert unprocessed(log_dir, "q1", checkpoint) == [p.name for p in inbox[1:]]
    assert processed_files(tmp_path / "none") == set()


def test_a_retired_query_hands_what_it_had_not_committed_to_its_successor(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    sealed_log(log_dir, ["q1"], 3)
    inbox = ingest_log.inbox_files(ingest_log.inbox(log_dir, "q1"))
    checkpoint = tmp_path / "cp"
    write_batch(checkpoint, 0, inbox[:2], committed=True, watermarks=(0, 0))
    retire(log_dir, "q1", checkpoint, "q2")
    assert not checkpoint.exists()
    assert not ingest_log.inbox(log_dir, "q1").exists()
    assert [p.name for p in ingest_log.inbox_files(ingest_log.inbox(log_dir, "q2"))] == [inbox[2].name]
    retire(log_dir, "q2", tmp_path / "cp2", None)  # gone without a successor
    assert ingest_log.inbox_positions(log_dir) == {}


def test_a_batch_that_moved_the_watermark_is_followed_by_one_without_data(tmp_path: Path) -> None:
    checkpoint = tmp_path / "cp"
    assert settled(checkpoint)
    write_batch(checkpoint, 0, [], committed=True, watermarks=(0, 5000))
    assert not settled(checkpoint)
    write_batch(checkpoint, 1, [], committed=True, watermarks=(5000, 5000))
    assert settled(checkpoint)


def test_sinks_that_would_share_a_checkpoint_directory_are_refused() -> None:
    check_distinct(["alerts_out", "alerts-out", "alerts.out@s1", "alerts_out@s1"], "demo")
    with pytest.raises(InvalidDataflow, match="'alerts out' and 'alerts_out' would share"):
        check_distinct(["alerts out", "alerts_out"], "demo")
    assert is_checkpoint_of(checkpoint_name("alerts out", "0123456789ab"), "alerts out")


def test_the_app_store_refuses_names_it_cannot_hold_unchanged(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    kept = tmp_path / "apps" / "q_uote.json"  # the file a character-stripping mapping would have hit
    kept.write_text("{}")
    for bad in ("..", 'q"uote', "a/b", "x" * 300):
        with pytest.raises(InvalidName):
            store.delete_app(bad)
    assert kept.read_text() == "{}"
