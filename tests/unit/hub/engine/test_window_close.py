"""The sink's window closer: windows written once the watermark passes their end, late updates dropped, replays repeat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from hub.engine.source import ROW_SCHEMA
from hub.engine.window_close import EXTRA, KEPT_STATES, STATE_DIR, WindowCloser

SCHEMA = pa.schema([*ROW_SCHEMA, *((name, pa.int64()) for name in EXTRA)])
"""A window's results as a closing query hands them to its sink: a record's columns and the closer's."""


def _update(key: str | None, start: int, n: int, latest_ms: int) -> dict[str, Any]:
    """The aggregate of window ``[start, start + 1)`` s of ``key`` after ``n`` records, the latest at ``latest_ms``."""
    return {
        "site": "cloud",
        "stream": "w",
        "seq": None,
        "event_time": start + 0.999,
        "key": key,
        "value": f'{{"n": {n}}}',
        "_start_ms": start * 1000,
        "_end_ms": (start + 1) * 1000,
        "_max_ms": latest_ms,
        "_keyed": n if key is not None else 0,
    }


def _close(closer: WindowCloser, batch: int, *rows: dict[str, Any]) -> list[tuple[str, str]]:
    out = closer.close(pa.Table.from_pylist(list(rows), schema=SCHEMA), batch)
    assert out.column_names == ["site", "stream", "seq", "event_time", "key", "value"]
    return [(r["key"], r["value"]) for r in out.to_pylist()]


def test_a_window_is_written_once_the_watermark_passes_its_end_and_not_before(tmp_path: Path) -> None:
    closer = WindowCloser(tmp_path, 500)
    assert _close(closer, 0, _update("a", 10, 1, 10_100), _update("b", 10, 2, 10_900)) == []
    # 11.4 s is not 0.5 s past the end of [10, 11); the group without the key moves the watermark
    assert _close(closer, 1, _update("a", 11, 1, 11_400)) == []
    assert _close(closer, 2, _update(None, 11, 0, 11_500)) == [("a", '{"n": 1}'), ("b", '{"n": 2}')]
    assert closer.watermark_ms == 11_000
    assert (closer.closed, closer.late) == (2, 0)


def test_an_update_of_a_written_window_is_late_and_dropped_with_its_records_counted(tmp_path: Path) -> None:
    closer = WindowCloser(tmp_path, 0)
    assert _close(closer, 0, _update("a", 10, 2, 10_500), _update("a", 11, 1, 11_200)) == [("a", '{"n": 2}')]
    # Spark still adds records of [10, 11) in the next batch: 3 more, late; a window never opened opens, and is written
    assert _close(closer, 1, _update("a", 10, 5, 10_500), _update("c", 9, 1, 9_100)) == [("c", '{"n": 1}')]
    assert closer.late == 3
    assert _close(closer, 2, _update("a", 11, 2, 12_000), _update("c", 9, 2, 9_900)) == [("a", '{"n": 2}')]
    assert closer.late == 4


def test_a_replayed_batch_closes_the_same_windows_from_the_state_before_it(tmp_path: Path) -> None:
    first = WindowCloser(tmp_path, 0)
    _close(first, 0, _update("a", 10, 1, 10_100))
    _close(first, 1, _update("a", 10, 2, 10_800))
    assert _close(first, 2, _update("b", 11, 1, 11_300)) == [("a", '{"n": 2}')]
    # a new process replays batch 2 (Spark had not committed it): same windows; then goes on
    again = WindowCloser(tmp_path, 0)
    assert _close(again, 2, _update("b", 11, 1, 11_300)) == [("a", '{"n": 2}')]
    assert _close(again, 3, _update("b", 12, 1, 12_200)) == [("b", '{"n": 1}')]
    # and the one that ran first, asked to replay batch 1, starts from the state after batch 0
    assert _close(first, 1, _update("a", 10, 2, 10_800)) == []
    assert sorted(int(p.stem) for p in (tmp_path / STATE_DIR).glob("*.json")) == list(range(4 - KEPT_STATES, 4))


@pytest.mark.parametrize("empty_batches", [1, 3])
def test_batches_without_results_carry_the_state_over(tmp_path: Path, empty_batches: int) -> None:
    closer = WindowCloser(tmp_path, 0)
    _close(closer, 0, _update("a", 10, 1, 10_100))
    for batch in range(1, 1 + empty_batches):
        assert _close(closer, batch) == []
    later = WindowCloser(tmp_path, 0)
    assert _close(later, 1 + empty_batches, _update("a", 11, 1, 11_000)) == [("a", '{"n": 1}')]
