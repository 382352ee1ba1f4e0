"""Peer-spoke latency probes get their answer from the broker itself."""

from __future__ import annotations

from typing import Any

import pytest

from edge_agent.probes import mqtt_roundtrip_ms
from simulate.broker import free_port


@pytest.mark.timeout(30)
async def test_mqtt_roundtrip_reaches_the_broker(mosquitto: Any) -> None:
    rtt = await mqtt_roundtrip_ms("127.0.0.1", mosquitto.port)
    assert rtt is not None
    assert rtt >= 0.0


@pytest.mark.timeout(30)
async def test_unreachable_broker_gives_none() -> None:
    assert await mqtt_roundtrip_ms("127.0.0.1", free_port(), timeout=1.0) is None
