"""Envelope, topics, signing, durations and the plan's JSON form."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from spanedge import topics
from spanedge.durations import parse_duration
from spanedge.errors import InvalidPlan
from spanedge.keyrange import KEY_SPACE
from spanedge.plan import (
    Assignment,
    Flow,
    Handover,
    Join,
    KeyPart,
    Plan,
    SolverInfo,
    Totals,
    replica_id,
    split_replica,
)
from spanedge.wire.batch import Record, decode_batch, encode_batch


def test_batch_round_trip() -> None:
    records = [Record("truck-7", "stats", i, 1700000000.0 + i, "u1", {"n": i}) for i in range(3)]
    app, back, complete = decode_batch(encode_batch("cold-chain", records))
    assert app == "cold-chain"
    assert back == records
    assert complete is None  # no frontier announced


def test_a_batch_may_announce_its_publishers_frontier() -> None:
    records = [Record("barn", "dry", 1, 1700000000.0, None, {"n": 1})]
    assert decode_batch(encode_batch("farm", records, complete=1700000004.5)).complete == 1700000004.5
    old = b'{"v": 1, "app": "farm", "site": "barn", "stream": "dry", "records": [{"seq": 1, "t": 1.0, "v": 2}]}'
    for bad in (b'"x"', b"true", b"[1]"):
        with pytest.raises(ValueError, match="complete must be an event time"):
            decode_batch(old[:-1] + b', "complete": ' + bad + b"}")


def test_a_batch_carries_the_ownership_epoch_of_its_stream() -> None:
    records = [Record("tiny", "avg", i, 1700000000.0 + i, None, {"n": i}, 5) for i in range(1, 3)]
    payload = encode_batch("farm", records)
    assert b'"epoch":5' in payload
    assert decode_batch(payload)[1] == records
    old = b'{"v": 1, "app": "farm", "site": "tiny", "stream": "avg", "records": [{"seq": 1, "t": 1.0, "v": 2}]}'
    assert decode_batch(old)[1][0].epoch == 0  # an envelope without an epoch is epoch 0
    for bad in (b'"x"', b"-1", b"true", b"1.5"):
        with pytest.raises(ValueError, match="epoch must be a plan version"):
            decode_batch(old[:-1] + b', "epoch": ' + bad + b"}")


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
    with pytest.raises(ValueError, match="plan, heartbeat, probe, presence"):
        topics.control("x", "other")


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
            Assignment("fleet", "fleet", None, "cloud", "scope @global_", since=2),
        ),
        flows=(Flow("raw@s1", "parse@s1", 10.0, 1000.0), Flow("parse@s1", "fleet", 10.0, 500.0)),
        totals=Totals(500.0, 20.0, 20.0, 1.0),
        solver=SolverInfo("ilp", "optimal", 0.01, 0.0),
    )
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert again.assignment("fleet").since == 2
    assert [a.replica for a in again.at("s1")] == ["raw@s1", "parse@s1"]
    assert [f.dst for f in again.crossing()] == ["fleet"]
    assert replica_id("parse", "s1") == "parse@s1"
    assert split_replica("fleet") == ("fleet", None)
    with pytest.raises(InvalidPlan, match="regenerate it"):
        Plan.from_json("{}")


def asdict_reference(plan: Plan) -> dict[str, Any]:
    """What ``Plan.to_dict`` gave when it was built on ``dataclasses.asdict``."""
    data = dataclasses.asdict(plan)
    for name, empty in (
        ("parts", not plan.parts),
        ("joins", not plan.joins),
        ("hub_epoch", not plan.hub_epoch),
        ("trial", not plan.trial),
    ):
        if empty:
            del data[name]
    for p in data.get("parts", ()):
        if p["share"] is None:
            del p["share"]
    for h in data["handovers"]:
        if h["keys_from"] == 0 and h["keys_before"] == KEY_SPACE:
            del h["keys_from"], h["keys_before"]
        if h["recoverer"] is None:
            del h["recover_from"], h["recoverer"]
    return data


@pytest.mark.parametrize("full", [False, True])
def test_plan_to_dict_is_what_asdict_gave(full: bool) -> None:
    totals = Totals(500.0, math.inf, 20.0, 1.0, hub_cpu=0.5, violations=("over budget",))
    plan = Plan(
        app="a",
        version=3,
        hub="cloud",
        assignments=(
            Assignment("raw@s1", "raw", "s1", "s1", "source"),
            Assignment("win@s1", "win", "s1", "s2", "latency", since=3),
            Assignment("fleet", "fleet", None, "cloud", "scope @global_", since=2),
        ),
        flows=(Flow("raw@s1", "win@s1", 10.0, 1000.0), Flow("win@s1", "fleet", 1.0, 50.0)),
        totals=totals,
        solver=SolverInfo("ilp", "optimal", 0.01, None),
        baselines={"central": Totals(900.0, 40.0, 40.0, 2.0)} if full else {},
        slo_ms=100.0 if full else None,
        warnings=("a warning",) if full else (),
        handovers=(
            Handover("win@s1", "s1", "s2", 12.5, epoch=1),
            Handover(
                "win@s1", "s1", "s3", 12.5, keys_from=0, keys_before=KEY_SPACE // 2, recover_from=2.0, recoverer="s1"
            ),
        )
        if full
        else (),
        parts=(KeyPart("win@s1", "s3", 0, KEY_SPACE // 2, since=3), KeyPart("win@s1", "s4", 1, 2, share=0.25))
        if full
        else (),
        joins=(Join("s5", 30.0),) if full else (),
        hub_epoch=4 if full else 0,
        trial=full,
    )
    data = plan.to_dict()
    assert data == asdict_reference(plan)
    assert Plan.from_dict(data) == plan
