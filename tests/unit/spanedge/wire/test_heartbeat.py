"""The heartbeat: the agent's writer and the hub's reader share one definition."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from edge_agent.heartbeat import heartbeat
from spanedge.wire.heartbeat import VERSION, Heartbeat, decode, encode


def _beat(**extra: Any) -> Heartbeat:
    fields: dict[str, Any] = {
        "site": "barn",
        "apps": ["farm"],
        "operators": {"readings@barn": {"in": 5, "out": 5, "rate_in": 1.5, "rate_out": 1.5}},
        "watermark_lag_s": None,
        "outbox": {"records": 0, "bytes": 0, "dropped": 0, "sent": 5},
        "dlq": 0,
        "late": 1,
        "overload_dropped": 0,
        "cpu_percent": 12.5,
        "rss_bytes": 30_000_000,
        "latency": {"cloud": {"rtt_ms": 8.0, "p95_ms": 9.5, "samples": 3}},
        "clock_offset_ms": None,
    }
    return heartbeat(**{**fields, **extra})


def test_what_the_agent_writes_the_hub_reads_back_with_its_version() -> None:
    beat = _beat(cpu_budget=0.5, state_bytes={"farm": {"w@barn": 120}}, complete={"farm": None}, key_spread={})
    payload = encode(beat)
    assert orjson.loads(payload)["v"] == VERSION
    assert "key_spread" not in orjson.loads(payload)  # empty: left out
    assert decode(payload) == (beat, [])


def test_a_heartbeat_without_a_version_is_read_as_the_first() -> None:
    assert decode(b'{"site": "barn", "dlq": 3}')[0] == Heartbeat(site="barn", dlq=3)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"v": 2, "site": "barn"}', "heartbeat format version 2 is not 1"),
        (b'{"site": 7}', "its 'site' field is 7, not a site name"),
    ],
)
def test_malformed_heartbeats_are_refused(payload: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode(payload)


def test_a_report_of_the_wrong_type_is_left_out_and_named() -> None:
    beat, dropped = decode(
        {"site": "barn", "dlq": "many", "cpu_percent": float("nan"), "state_bytes": {"farm": {"a": 1, "b": True}}}
    )
    assert (beat.dlq, beat.cpu_percent, beat.state_bytes) == (None, None, {"farm": {"a": 1}})
    assert [d.split(":")[0] for d in dropped] == ["dlq", "cpu_percent", "state_bytes.farm.b"]


def test_the_local_sinks_result_latency_travels_and_a_bad_figure_is_left_out() -> None:
    latency = {"farm": {"alerts": {"p50_ms": 40.0, "p95_ms": 95.5, "results": 12}}}
    beat = _beat(result_latency=latency)
    assert orjson.loads(encode(beat))["result_latency"] == latency
    assert decode(encode(beat)) == (beat, [])
    assert "result_latency" not in orjson.loads(encode(_beat()))  # none yet: left out
    data = orjson.loads(encode(beat))
    data["result_latency"]["farm"]["alerts"]["p95_ms"] = -1
    read, dropped = decode(data)
    assert read.result_latency == {"farm": {"alerts": {"p50_ms": 40.0, "results": 12}}}
    assert len(dropped) == 1
    assert dropped[0].startswith("result_latency.farm.alerts.p95_ms")
