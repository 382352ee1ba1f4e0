"""Peer-spoke latency probes get their answer from the broker itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edge_agent.probes import mqtt_roundtrip_ms
from simulate.broker import BrokerSecurity, Mosquitto, free_port, mosquitto_path
from simulate.tls import make_tls
from simulate.wan import LinkProxy, WanLink
from spanedge.broker_acl import password_file
from spanedge.errors import SpanEdgeError
from spanedge.sites import TLS
from tests.conftest import missing_part


@pytest.mark.timeout(30)
async def test_mqtt_roundtrip_reaches_the_broker(mosquitto: Any) -> None:
    rtt = await mqtt_roundtrip_ms("127.0.0.1", mosquitto.port)
    assert rtt is not None
    assert rtt >= 0.0


@pytest.mark.timeout(30)
async def test_unreachable_broker_gives_none() -> None:
    assert await mqtt_roundtrip_ms("127.0.0.1", free_port(), timeout=1.0) is None


@pytest.mark.timeout(60)
async def test_the_tls_roundtrip_crosses_the_link_to_the_broker(tmp_path: Path) -> None:
    """Over TLS too the answer comes from the broker, so a proxy on the way adds its delay (a TCP connect would not)."""
    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    tls = make_tls(tmp_path / "tls")
    (tmp_path / "passwords").write_text(password_file({"cloud": "hub-password-0123456789"}))
    (tmp_path / "acl").write_text("user cloud\ntopic readwrite #\n")
    security = BrokerSecurity(tls, tmp_path / "passwords", tmp_path / "acl")
    with Mosquitto(workdir=tmp_path / "broker", security=security) as broker:
        proxy = await LinkProxy(WanLink("a", "b", delay_ms=100), "a", "b", broker.port).start()
        try:
            context = TLS(ca_file=str(tls.ca_file)).context()
            rtt = await mqtt_roundtrip_ms("127.0.0.1", proxy.port, timeout=10, tls=context)
            assert rtt is not None
            assert rtt >= 200.0  # one round trip over a link that delays each way by 100 ms
            other = make_tls(tmp_path / "other")  # a CA that did not sign the broker's certificate
            wrong = TLS(ca_file=str(other.ca_file)).context()
            assert await mqtt_roundtrip_ms("127.0.0.1", broker.port, timeout=10, tls=wrong) is None
        finally:
            await proxy.stop()
