"""Envelope, topics, signing, durations and the plan's JSON form."""

from __future__ import annotations

import pytest

from spanedge import topics
from spanedge.durations import parse_duration
from spanedge.envelope import Record, decode_batch, encode_batch
from spanedge.errors import InvalidPlan, SpanEdgeError
from spanedge.plan import Assignment, Flow, Plan, SolverInfo, Totals, replica_id, split_replica
from spanedge.signing import load_secret, sign, verify


def test_batch_round_trip() -> None:
    records = [Record("truck-7", "stats", i, 1700000000.0 + i, "u1", {"n": i}) for i in range(3)]
    app, back = decode_batch(encode_batch("cold-chain", records))
    assert app == "cold-chain"
    assert back == records


@pytest.mark.parametrize(
    "payload", [b"not json", b"{}", b'{"v": 2, "app": "a", "site": "s", "stream": "x", "records": []}']
)
def test_malformed_batches_raise_value_error(payload: bytes) -> None:
    with pytest.raises(ValueError, match="malformed batch|unsupported envelope"):
        decode_batch(payload)


def test_topics() -> None:
    assert topics.data("cold-chain", "stats", "truck-7") == "spanedge/v1/cold-chain/stats/truck-7"
    assert topics.parse_data("spanedge/v1/cold-chain/stats/truck-7") == ("cold-chain", "stats", "truck-7")
    assert topics.parse_data(topics.dlq("cold-chain", "truck-7")) is None
    assert topics.parse_data(topics.control("truck-7", "plan")) is None
    with pytest.raises(ValueError, match="plan, heartbeat or probe"):
        topics.control("x", "other")


def test_signing_detects_forgery(monkeypatch: pytest.MonkeyPatch) -> None:
    message = sign({"site": "a", "version": 3}, b"k1")
    assert verify(message, b"k1") == {"site": "a", "version": 3}
    with pytest.raises(InvalidPlan, match="signature does not match"):
        verify(message, b"k2")
    tampered = message.replace(b'\\"version\\":3', b'\\"version\\":4')
    assert tampered != message
    with pytest.raises(InvalidPlan, match="signature does not match"):
        verify(tampered, b"k1")
    with pytest.raises(InvalidPlan, match="not a signed envelope"):
        verify(b"{}", b"k1")
    monkeypatch.delenv("SPANEDGE_PLAN_SECRET", raising=False)
    monkeypatch.delenv("SPANEDGE_PLAN_SECRET_FILE", raising=False)
    with pytest.raises(SpanEdgeError, match="set SPANEDGE_PLAN_SECRET"):
        load_secret()


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10.0), ("500ms", 0.5), ("5m", 300.0), (2, 2.0), ("1.5h", 5400.0)]
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_plan_json_round_trip_and_helpers() -> None:
    plan = Plan(
        app="a",
        version=2,
        hub="cloud",
        assignments=(
            Assignment("raw@s1", "raw", "s1", "s1", "source"),
            Assignment("parse@s1", "parse", "s1", "s1", "scope @local"),
            Assignment("fleet", "fleet", None, "cloud", "scope @global_"),
        ),
        flows=(Flow("raw@s1", "parse@s1", 10.0, 1000.0), Flow("parse@s1", "fleet", 10.0, 500.0)),
        totals=Totals(500.0, 20.0, 20.0, 1.0),
        solver=SolverInfo("ilp", "optimal", 0.01, 0.0),
    )
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert [a.replica for a in again.at("s1")] == ["raw@s1", "parse@s1"]
    assert [f.dst for f in again.crossing()] == ["fleet"]
    assert replica_id("parse", "s1") == "parse@s1"
    assert split_replica("fleet") == ("fleet", None)
    with pytest.raises(InvalidPlan, match="regenerate it"):
        Plan.from_json("{}")
