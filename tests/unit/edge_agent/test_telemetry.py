"""Telemetry: peer brokers probed every peer interval, a heartbeat at once when the hub link is back."""

from __future__ import annotations

import time
import types
from typing import Any

import orjson
import pytest

from spanedge.sites import parse_sites

PEER_SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1"}
  a: {tier: spoke, broker: "mqtt://127.0.0.1:2", streams: {readings: {topic: "a/+", rate: 1}}}
  b: {tier: spoke, broker: "mqtt://127.0.0.1:3", streams: {readings: {topic: "b/+", rate: 1}}}
"""
"""Spoke ``a``, whose telemetry probes the broker of its one peer spoke ``b`` (port 3)."""


def _fake_peer_roundtrips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Peer broker round trips of 12 ms without a network; the ports probed, in order."""
    from edge_agent import telemetry as telemetry_module

    probed: list[int] = []

    async def roundtrip(host: str, port: int, timeout: float = 3.0, tls: object = None, **login: object) -> float:
        assert login == {"username": None, "password": None}  # the sites file gives no credentials
        probed.append(port)
        return 12.0

    monkeypatch.setattr(telemetry_module, "mqtt_roundtrip_ms", roundtrip)
    return probed


async def test_peer_brokers_are_probed_every_peer_interval_not_every_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_agent import telemetry as telemetry_module
    from edge_agent.telemetry import Telemetry

    sites = parse_sites(PEER_SITES)
    probed = _fake_peer_roundtrips(monkeypatch)

    class Hub:
        connected = False

    now = [100.0]
    clock = types.SimpleNamespace(monotonic=lambda: now[0], time=time.time, perf_counter=time.perf_counter)
    monkeypatch.setattr(telemetry_module, "time", clock)  # the module's clock only, not the event loop's
    telemetry = Telemetry("a", sites, "cloud", Hub(), 2.0, peer_interval=10.0)  # type: ignore[arg-type]
    for _ in range(5):  # five heartbeats, 2 s apart: one peer probe
        await telemetry.probe()
        now[0] += 2.0
    assert probed == [3]
    await telemetry.probe()  # 10 s after the first
    assert probed == [3, 3]
    assert telemetry.peer_rtt["b"].to_dict()["samples"] == 2


async def test_a_heartbeat_goes_at_once_when_the_hub_link_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A site back from a partition is heard from then, not up to a heartbeat interval later."""
    import asyncio

    from edge_agent.telemetry import Telemetry

    sites = parse_sites(PEER_SITES)
    probed = _fake_peer_roundtrips(monkeypatch)

    class Hub:
        def __init__(self) -> None:
            self.connected = False
            self.beats: list[dict[str, Any]] = []

        def publish(self, topic: str, payload: bytes, qos: int) -> int:
            if topic.endswith("/heartbeat"):
                self.beats.append(orjson.loads(payload))
            return 1

    hub = Hub()
    telemetry = Telemetry("a", sites, "cloud", hub, 3600.0, peer_interval=0.0)  # type: ignore[arg-type]
    stop = asyncio.Event()
    count = iter(range(100))
    running = asyncio.create_task(telemetry.run(stop, lambda: {"n": next(count)}))
    for _ in range(50):
        await asyncio.sleep(0.01)
    assert hub.beats == []  # not connected: the first heartbeat went nowhere
    assert probed == [3]
    hub.connected = True
    telemetry.reconnected()  # what the transport calls once the link is back
    for _ in range(50):
        await asyncio.sleep(0.01)
    assert hub.beats == [{"n": 1}]  # at once, an hour before the next interval
    assert probed == [3]  # without probing the peers again first
    stop.set()
    await asyncio.wait_for(running, 10.0)
    assert hub.beats == [{"n": 1}]
