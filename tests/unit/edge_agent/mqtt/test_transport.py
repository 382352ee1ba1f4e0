"""Inbox backpressure: QoS 0 dropped when full, QoS 1 kept, an idle consumer woken (no broker)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from edge_agent.mqtt.transport import Inbox, Message


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
