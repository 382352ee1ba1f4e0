"""The hub's one streaming listener: progress read from its JSON, handed to every hub listener."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.listener import StreamingQueryListener

QUERY_ID = "4f9d6a4e-3c1b-4b5e-9d0a-2f7a1c9e8b10"

PROGRESS = {
    "id": QUERY_ID,
    "runId": "0b6f1a52-7d2e-4a8c-b1f3-5e9c2d7a4f61",
    "name": "spanedge:cold-chain:fleet_alerts@cloud",
    "timestamp": "2024-05-01T10:00:00.000Z",
    "batchId": 7,
    "batchDuration": 250,
    "numInputRows": 40,
    "inputRowsPerSecond": 160.0,
    "processedRowsPerSecond": 160.0,
    "durationMs": {"addBatch": 120, "triggerExecution": 250},
    "eventTime": {"watermark": "2024-05-01T09:59:50.000Z"},
    "stateOperators": [
        {
            "operatorName": "stateStoreSave",
            "numRowsTotal": 10,
            "numRowsUpdated": 4,
            "allUpdatesTimeMs": 3,
            "numRowsRemoved": 0,
            "allRemovalsTimeMs": 0,
            "commitTimeMs": 5,
            "memoryUsedBytes": 2048,
            "numRowsDroppedByWatermark": 3,
            "numShufflePartitions": 2,
            "numStateStoreInstances": 2,
            "customMetrics": {},
        }
    ],
    "sources": [
        {
            "description": "FileStreamSource[file:/state/ingest/cold-chain/inbox/q]",
            "startOffset": {"logOffset": 6},
            "endOffset": {"logOffset": 7},
            "latestOffset": None,
            "numInputRows": 40,
            "inputRowsPerSecond": 160.0,
            "processedRowsPerSecond": 160.0,
        }
    ],
    "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    "observedMetrics": {"in_0": {"n": 40}, "out_1": {"n": 4}},
}


class _Progress:
    def json(self) -> str:
        return json.dumps(PROGRESS)


class _JEvent:
    """What the JVM hands the listener: only ``progress().json()`` is read."""

    def progress(self) -> _Progress:
        return _Progress()


class _Recorder(StreamingQueryListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def onQueryStarted(self, event: Any) -> None:
        self.events.append(("started", event))

    def onQueryProgress(self, event: Any) -> None:
        self.events.append(("progress", event))

    def onQueryIdle(self, event: Any) -> None:
        self.events.append(("idle", event))

    def onQueryTerminated(self, event: Any) -> None:
        self.events.append(("terminated", event))


class _Broken(_Recorder):
    def onQueryProgress(self, event: Any) -> None:
        raise RuntimeError("broken listener")


def test_a_progress_event_read_from_json_feeds_the_hub_listeners() -> None:
    from hub.engine.late import LateRecords
    from hub.engine.listeners import ProgressFanout, _JsonEvents
    from hub.engine.operator_counts import ObservedCounts

    late, counts = LateRecords(), ObservedCounts()
    _JsonEvents(ProgressFanout([late, counts])).onQueryProgress(_JEvent())
    assert late.dropped(QUERY_ID) == 3
    assert counts.of(QUERY_ID) == {"in_0": (40, 160.0), "out_1": (4, 16.0)}


def test_every_listener_gets_every_event_even_after_one_fails(caplog: pytest.LogCaptureFixture) -> None:
    from hub.engine.listeners import ProgressFanout

    broken, recorder = _Broken(), _Recorder()
    fanout = ProgressFanout([broken, recorder])
    started, progress, idle, ended = (SimpleNamespace(kind=k) for k in ("s", "p", "i", "t"))
    fanout.onQueryStarted(started)
    fanout.onQueryProgress(progress)
    fanout.onQueryIdle(idle)
    fanout.onQueryTerminated(ended)
    assert recorder.events == [("started", started), ("progress", progress), ("idle", idle), ("terminated", ended)]
    assert broken.events == [("started", started), ("idle", idle), ("terminated", ended)]
    assert "_Broken failed in onQueryProgress" in caplog.text


class _EndedEvent:
    """An event that arrives while Spark ends the session: reading it finds no JVM."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        raise self.error


def test_an_event_spark_ended_the_session_under_is_dropped_at_info(caplog: pytest.LogCaptureFixture) -> None:
    from hub.engine.listeners import ProgressFanout, _JsonEvents

    recorder = _Recorder()
    events = _JsonEvents(ProgressFanout([recorder]))
    caplog.set_level("INFO")
    gone = ConnectionRefusedError("the JVM is gone")
    events.onQueryProgress(_EndedEvent(gone))
    events.onQueryTerminated(_EndedEvent(gone))
    assert recorder.events == []
    assert "Spark ended the session before onQueryTerminated could be read" in caplog.text
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    with pytest.raises(ValueError, match="a bad event"):
        events.onQueryProgress(_EndedEvent(ValueError("a bad event")))
