"""Result latency per sink: p50/p95 over the last minute, bounded per sink."""

from __future__ import annotations

import math

from spanedge.result_latency import ResultLatency, percentile, summarise


def test_percentiles_by_nearest_rank() -> None:
    ordered = [float(i) for i in range(1, 101)]
    assert (percentile(ordered, 0.5), percentile(ordered, 0.95)) == (50.0, 95.0)
    assert percentile([7.0], 0.95) == 7.0
    assert summarise([0.2, 0.1, 0.3]) == {"p50_ms": 200.0, "p95_ms": 300.0, "results": 3}
    assert summarise([]) is None


def test_latencies_are_from_event_time_to_written_over_the_last_minute() -> None:
    now = [1000.0]
    latency = ResultLatency(clock=lambda: now[0])
    latency.written("alerts", [999.5, 999.0, None, math.nan, 1001.0])  # no event time, or one ahead of the clock
    assert latency.latencies("alerts") == [0.5, 1.0, 0.0]
    now[0] = 1050.0
    latency.written("alerts", [1049.9])
    assert latency.summary() == {"alerts": {"p50_ms": 100.0, "p95_ms": 1000.0, "results": 4}}  # 0, 0.1, 0.5, 1 s
    now[0] = 1070.0  # the first results are more than a minute old
    assert latency.summary() == {"alerts": {"p50_ms": 100.0, "p95_ms": 100.0, "results": 1}}
    now[0] = 1200.0
    assert latency.summary() == {}


def test_a_busy_sink_keeps_its_latest_results() -> None:
    latency = ResultLatency(max_samples=3, clock=lambda: 100.0)
    latency.written("s", [99.0, 98.0, 97.0, 96.0, 95.0])
    assert latency.latencies("s") == [3.0, 4.0, 5.0]
