"""The MQTT client ``--transport`` names (no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.config import AgentLaunch
from edge_agent.mqtt.asyncio_transport import AsyncioTransport
from edge_agent.mqtt.paho_transport import PahoTransport
from edge_agent.mqtt.select import transport_factory


def test_transport_names() -> None:
    assert transport_factory("paho") is PahoTransport
    assert transport_factory("asyncio") is AsyncioTransport
    with pytest.raises(ValueError, match="use one of asyncio, paho"):
        transport_factory("zmq")
    with pytest.raises(ValueError, match="invalid transport"):
        AgentLaunch(site="s", sites=Path("sites.yaml"), transport="zmq")
    assert AgentLaunch(site="s", sites=Path("sites.yaml"), transport="PAHO").transport == "paho"
