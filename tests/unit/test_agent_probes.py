"""Inbox backpressure, heartbeat rates and latency statistics (no broker)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from edge_agent.heartbeat import Rates
from edge_agent.probes import EARLY_ACKS, ClockOffset, PublishProbe, RttStats
from edge_agent.transport import Inbox, Message


def _m(qos: int, mid: int = 1) -> Message:
    return Message("t", b"{}", qos, mid, None, 0.0)  # type: ignore[arg-type]


def test_inbox_drops_qos0_when_full_and_counts() -> None:
    inbox = Inbox(maxsize=3)
    for i in range(5):
        inbox.put(_m(0, i))
    assert len(inbox) == 3
    assert inbox.dropped == 2


def test_inbox_never_blocks_the_network_thread_for_qos1() -> None:
    # Blocking in paho's on_message would deadlock against ack()/publish() from the
    # event loop (paho holds its callback lock there); the broker's in-flight window
    # bounds unacknowledged QoS 1 messages instead.
    inbox = Inbox(maxsize=2)
    for mid in (1, 2, 3):
        inbox.put(_m(1, mid))
    assert [m.mid for m in inbox.drain(10)] == [1, 2, 3]
    assert inbox.dropped == 0


@pytest.mark.timeout(10)
async def test_inbox_wakes_an_idle_consumer() -> None:
    inbox = Inbox(maxsize=10)
    inbox.bind(asyncio.get_running_loop())
    waiter = asyncio.create_task(inbox.wait(5.0))
    await asyncio.sleep(0.2)  # long enough for the consumer to go idle
    threading.Thread(target=inbox.put, args=(_m(1),)).start()
    await asyncio.wait_for(waiter, 2.0)
    assert len(inbox) == 1


def test_rates_between_heartbeats() -> None:
    rates = Rates()
    first = rates.update({"r": {"in": 10, "out": 5}}, now=100.0)
    assert first["r"] == {"in": 10, "out": 5, "rate_in": 0.0, "rate_out": 0.0}
    second = rates.update({"r": {"in": 30, "out": 9}}, now=102.0)
    assert second["r"]["rate_in"] == 10.0
    assert second["r"]["rate_out"] == 2.0


def test_rtt_stats_report_the_latest_round_trip_and_the_recent_p95() -> None:
    stats = RttStats()
    assert stats.to_dict() == {"rtt_ms": None, "p95_ms": None, "samples": 0}
    for ms in [10.0, 20.0] + [10.0] * 17 + [300.0]:
        stats.add(ms)
    assert stats.to_dict() == {"rtt_ms": 300.0, "p95_ms": 20.0, "samples": 20}  # unsmoothed: the hub smooths


def test_publish_probe_times_only_its_own_acks() -> None:
    probe = PublishProbe()
    probe.send(lambda: 7)
    assert not probe.acked(8)
    assert probe.acked(7)
    assert probe.stats.samples == 1
    assert not probe.acked(7)


def test_a_puback_handled_inside_the_clients_lock_during_publish_neither_deadlocks_nor_goes_unmeasured() -> None:
    """paho calls ``acked`` from its network thread while holding the lock its ``publish`` takes.

    Here the PUBACK of probe 7 is handled before ``publish`` can return 7: a probe that held its own lock across
    ``publish`` waited for the client's lock while the network thread waited for the probe's (an agent froze so).
    """
    probe = PublishProbe()
    client_lock, holding = threading.Lock(), threading.Event()

    def network_thread() -> None:
        with client_lock:  # as paho's PUBACK handling
            holding.set()
            assert not probe.acked(7)  # not a probe yet: send has not learnt its id

    def publish() -> int:
        threading.Thread(target=network_thread, daemon=True).start()
        holding.wait()
        with client_lock:  # as paho's publish
            return 7

    sender = threading.Thread(target=probe.send, args=(publish,), daemon=True)
    sender.start()
    sender.join(timeout=60)
    assert not sender.is_alive(), "send and the PUBACK deadlocked"
    assert probe.stats.samples == 1
    assert not probe.acked(7), "the early PUBACK was matched once, not kept"


def test_unknown_pubacks_kept_for_a_late_probe_id_are_bounded() -> None:
    probe = PublishProbe()
    for mid in range(1, EARLY_ACKS + 2):  # the outbox's batches share the client's ids
        assert not probe.acked(mid)
    probe.send(lambda: 1)  # the oldest was dropped: this is a probe still waiting for its PUBACK
    assert probe.stats.samples == 0
    probe.send(lambda: 2)  # id 2's PUBACK is among the latest: taken as this probe's
    assert probe.stats.samples == 1
    assert probe.acked(1)
    assert probe.stats.samples == 2


def test_clock_offset_keeps_the_tightest_round_trip() -> None:
    clock = ClockOffset()
    assert clock.offset_ms is None
    clock.observe(sent=100.0, hub_ts=102.0, received=100.2)  # rtt 0.2 s, offset 1.9 s
    clock.observe(sent=200.0, hub_ts=201.5, received=202.0)  # rtt 2 s: less trustworthy
    offset: Any = clock.offset_ms
    assert offset == pytest.approx(1900.0)
