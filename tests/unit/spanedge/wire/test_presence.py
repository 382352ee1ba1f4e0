"""The hub's presence record: its wire form, its description, and which claim came first."""

from __future__ import annotations

import msgspec
import orjson
import pytest

from spanedge.wire.presence import Presence, decode, encode

LIVE = Presence(
    hub_site="cloud",
    instance="3f9c2a1b",
    live=True,
    host="hub-1",
    pid=4242,
    state_dir="/var/lib/spanedge/hub",
    since=1_700_000_000.0,
)


def test_a_record_goes_on_the_wire_as_versioned_json_and_back() -> None:
    wire = encode(LIVE)
    assert orjson.loads(wire) == {
        "v": 1,
        "hub_site": "cloud",
        "instance": "3f9c2a1b",
        "live": True,
        "host": "hub-1",
        "pid": 4242,
        "state_dir": "/var/lib/spanedge/hub",
        "since": 1_700_000_000.0,
    }
    assert decode(wire) == LIVE


def test_the_gone_record_is_the_same_process_marked_gone() -> None:
    gone = LIVE.gone()
    assert not gone.live
    assert gone.same_process(LIVE)
    assert decode(encode(gone)) == gone


def test_the_description_names_host_pid_instance_since_and_state_dir() -> None:
    assert LIVE.describe() == (
        "hub site 'cloud' instance 3f9c2a1b (pid 4242 on host hub-1, live since 2023-11-14 22:13:20 UTC, "
        "state dir /var/lib/spanedge/hub)"
    )


def test_the_earlier_claim_is_senior_and_the_instance_id_breaks_a_tie() -> None:
    later = msgspec.structs.replace(LIVE, instance="00000000", since=LIVE.since + 1)
    tie = msgspec.structs.replace(LIVE, instance="00000000")
    assert LIVE.senior_to(later)
    assert not later.senior_to(LIVE)
    assert tie.senior_to(LIVE)
    assert not LIVE.same_process(later)


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"not json", "not a hub presence record"),
        (b'{"v": 2, "hub_site": "cloud"}', "not a hub presence record"),
        (orjson.dumps({**orjson.loads(encode(LIVE)), "since": "yesterday"}), r"\$\.since"),
        (orjson.dumps({k: v for k, v in orjson.loads(encode(LIVE)).items() if k != "pid"}), "pid"),
    ],
)
def test_anything_else_is_refused_saying_what_is_wrong(payload: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode(payload)
