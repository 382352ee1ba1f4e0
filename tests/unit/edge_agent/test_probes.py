"""Heartbeat rates and latency statistics (no broker)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from edge_agent.heartbeat import Rates
from edge_agent.probes import EARLY_ACKS, ClockOffset, PublishProbe, RttStats


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
