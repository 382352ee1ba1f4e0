"""Trying a connector without an agent: read what a source yields, acknowledged as after a commit."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from edge_agent.connectors.api import Source
from edge_agent.connectors.runner import SourceRunner
from edge_agent.mqtt.transport import Inbox


async def collect(source: Source, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Run ``source`` as the agent would until it read ``count`` readings; return their records.

    Each reading is acknowledged once taken (the agent does so after its commit); a reading that
    does not fit comes back with its ``problem`` and ``where``, as the dead letter would say.

    Raises:
        TimeoutError: fewer than ``count`` readings came in ``timeout`` seconds.
    """
    inbox = Inbox()
    inbox.bind(asyncio.get_running_loop())
    runner = SourceRunner(source, "test", "test", inbox)
    runner.start()
    out: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(timeout):
            while len(out) < count:
                await inbox.wait(0.1)
                for m in inbox.drain(count - len(out)):
                    record = orjson.loads(m.payload)
                    if m.problem:
                        record.update(problem=m.problem, where=m.topic)
                    out.append(record)
                    m.source.ack(m.mid, m.qos)
    finally:
        runner.stop()
        await runner.wait_stopped()
    return out
