"""Which presence records keep a hub from claiming its hub site."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from hub.control.presence import HubPresence, holds_site, presence_of
from spanedge import topics
from spanedge.sites import Broker
from spanedge.wire.presence import Presence, encode


@pytest.fixture
def me(tmp_path: Path) -> Presence:
    return presence_of("cloud", "3f9c2a1b", tmp_path / "hub")


def test_the_record_of_this_process_says_who_and_where_it_is(tmp_path: Path) -> None:
    import os
    import socket

    record = presence_of("cloud", "3f9c2a1b", tmp_path / "hub")
    assert (record.hub_site, record.instance, record.live) == ("cloud", "3f9c2a1b", True)
    assert (record.host, record.pid) == (socket.gethostname(), os.getpid())
    assert record.state_dir == str((tmp_path / "hub").resolve())
    assert topics.control("cloud", "presence") == "spanedge/v1/control/cloud/presence"


def test_another_live_hub_holds_the_site(me: Presence) -> None:
    other = msgspec.structs.replace(me, instance="00000000", host="hub-2", pid=7)
    assert holds_site(other, me)
    # the same instance id on another host or in another directory: a copy of the state dir that runs
    assert holds_site(msgspec.structs.replace(me, host="hub-2", pid=7, since=1.0), me)
    assert holds_site(msgspec.structs.replace(me, state_dir="/elsewhere", pid=7, since=1.0), me)


def test_a_gone_hub_this_process_and_its_own_earlier_process_do_not(me: Presence) -> None:
    other = msgspec.structs.replace(me, instance="00000000", host="hub-2", pid=7)
    assert not holds_site(other.gone(), me)
    assert not holds_site(me, me)
    # killed before the broker published its will; this process holds the state dir's lock, so it is gone
    assert not holds_site(msgspec.structs.replace(me, pid=me.pid + 1, since=me.since - 60), me)


class _Client:
    """Records what the presence publishes from its MQTT callbacks."""

    def __init__(self) -> None:
        self.published: list[tuple[str, bytes, bool]] = []
        self.subscribed: list[str] = []

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        self.published.append((topic, payload, retain))

    def subscribe(self, topic: str, qos: int = 0) -> None:
        self.subscribed.append(topic)


class _Message:
    def __init__(self, record: Presence, retain: bool = False) -> None:
        self.topic = topics.control("cloud", "presence")
        self.payload = encode(record)
        self.retain = retain


def _holding(me: Presence) -> HubPresence:
    presence = HubPresence(Broker(scheme="mqtt", host="127.0.0.1", port=1), me, "presence-under-test")
    presence._claimed = True  # as after claim(): the broker echoed this hub's record first
    return presence


def test_a_running_hub_writes_its_record_again_over_a_gone_or_later_claim(me: Presence) -> None:
    presence, client = _holding(me), _Client()
    loser = msgspec.structs.replace(me, instance="00000000", host="hub-2", since=me.since + 1)
    presence._on_message(client, None, _Message(loser.gone()))  # a hub that lost the race marked itself gone
    presence._on_message(client, None, _Message(loser))  # a junior claim
    assert client.published == [(presence.topic, encode(me), True)] * 2


def test_a_running_hub_leaves_a_senior_claim_and_its_own_records_alone(
    me: Presence, caplog: pytest.LogCaptureFixture
) -> None:
    presence, client = _holding(me), _Client()
    senior = msgspec.structs.replace(me, instance="00000000", host="hub-2", since=me.since - 1)
    presence._on_message(client, None, _Message(senior))
    presence._on_message(client, None, _Message(me))  # its own echo
    presence._on_message(client, None, _Message(me.gone(), retain=True))
    assert client.published == []
    assert "another hub claims this hub site, and claimed it first: hub site 'cloud' instance 00000000" in caplog.text


def test_a_reconnected_hub_subscribes_and_writes_its_record_again(me: Presence) -> None:
    presence, client = _holding(me), _Client()

    class Accepted:
        is_failure = False

    presence._on_connect(client, None, None, Accepted(), None)
    assert client.subscribed == [presence.topic, presence.topic]
    assert client.published == [(presence.topic, encode(me), True)]
