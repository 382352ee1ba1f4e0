"""Local sinks: served after the commit, delivered once their broker acknowledged them."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.unit.edge_agent.test_processing import _msg, _parts


def test_sinks_serve_a_window_after_its_commit(tmp_path: Path) -> None:
    _apps, processor, source, outbox = _parts(tmp_path)
    processor.handle([_msg(source, mid, 1000.0 + mid) for mid in range(1, 4)])
    processor.handle([_msg(source, 9, 1030.0)])  # moves the watermark past [1000, 1010)
    assert source.published == []
    processor.flush()
    assert [(t, orjson.loads(b)["n"]) for t, b in source.published] == [("cold-chain/unit-stats", 3)]
    assert outbox.records == 1
    outbox.close()


def test_a_sink_value_counts_as_delivered_once_its_broker_acknowledged_it(tmp_path: Path) -> None:
    _apps, processor, source, outbox = _parts(tmp_path)
    sinks = processor.sinks
    processor.handle([_msg(source, 1, 1000.0)])
    processor.flush()
    floor = processor.checkpointer.sink_frontiers["cold-chain"]  # the window [1000, 1010) ends past it
    processor.handle([_msg(source, 2, 1030.0)])
    processor.flush()
    assert len(source.published) == 1
    assert sinks.unacknowledged.bounds() == {"cold-chain": floor}  # the value lies at or past the frontier before
    assert source.on_published is not None
    source.on_published(1)  # the broker's PUBACK
    assert sinks.unacknowledged.bounds() == {}
    processor.handle([_msg(source, 3, 1045.0)])
    processor.flush()
    assert len(source.published) == 2
    sinks.closed(source)  # the connection closed before its PUBACK: not waited for any more
    assert sinks.unacknowledged.bounds() == {}
    outbox.close()


def test_an_acknowledgement_may_come_before_the_publish_is_recorded() -> None:
    from edge_agent.sinks import Unacknowledged
    from tests.unit.fakes import FakeTransport

    pending, link = Unacknowledged(), FakeTransport(None, "sink", "site broker (truck-7)")
    pending.hook(link)
    assert link.on_published is not None
    link.on_published(7)  # the connection's thread heard the PUBACK first
    pending.published(link, 7, "farm", 100.0)
    pending.published(link, 8, "farm", 101.0)
    pending.published(link, 9, "farm", None)  # a first commit: no bound known
    assert (pending.bounds(), len(pending)) == ({"farm": 101.0}, 2)
    link.on_published(8)
    link.on_published(9)
    assert (pending.bounds(), len(pending)) == ({}, 0)


def test_sinks_report_the_latency_of_their_results_from_event_time_to_written(tmp_path: Path) -> None:
    import time

    _apps, processor, source, outbox = _parts(tmp_path)
    now = time.time()
    processor.handle([_msg(source, mid, now - 30.0 + mid) for mid in range(1, 4)])
    processor.handle([_msg(source, 9, now + 60.0)])  # moves the watermark past the first window
    processor.flush()
    assert len(source.published) >= 1
    (sink,) = processor.sinks.result_latency()["cold-chain"].values()
    assert sink["results"] == len(source.published)
    assert 0 < sink["p50_ms"] <= sink["p95_ms"] < 60_000  # from each window's end to its publication
    outbox.close()
