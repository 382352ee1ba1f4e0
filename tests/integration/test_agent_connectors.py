"""An agent whose app reads an OPC UA stream and a Modbus stream and writes a Modbus coil, all real servers."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import math
import struct
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from spanedge.loader import load_app
from spanedge.sites import parse_sites
from spanedge.testing import local_plan
from tests.conftest import missing_part
from tests.polling import poll

from .agentkit import HubObserver

if not all(importlib.util.find_spec(m) for m in ("asyncua", "pymodbus")):
    missing_part("needs asyncua and pymodbus: pip install 'spanedge[opcua,modbus]'")

from .devices import ModbusDevice, OpcUaDevice

APP = """
from spanedge import App, local, sinks

app = App("plant")


@local
def celsius(r: dict) -> dict:
    return {{"ts": r["ts"], "temp": r["value"]}}


@local
def is_level(r: dict) -> bool:
    return r["name"] == "level"


@local
def pump_command(r: dict) -> dict:
    return {{"point": "pump", "value": r["value"] > 50}}


app.source("boiler", time_field="ts").map(celsius).sink(sinks.memory("boiler"), name="boiler_out", scope="local")
levels = app.source("tank", time_field="ts").filter(is_level)
levels.sink(sinks.memory("tank"), name="tank_out", scope="local")
levels.map(pump_command).sink(
    sinks.modbus("{modbus}", points={{"pump": {{"table": "coil", "address": 5}}}}), name="pump", scope="local"
)
"""


def sites_yaml(hub: str, site: str, opcua: OpcUaDevice, modbus: ModbusDevice) -> str:
    return f"""
sites:
  cloud: {{tier: hub, broker: "{hub}"}}
  plant-1:
    tier: spoke
    broker: "{site}"
    streams:
      boiler:
        url: "{opcua.url}"
        rate: 10
        publish_interval: 0.05
        nodes: {{temp: "{opcua.temp_id}"}}
      tank:
        url: "{modbus.url}"
        rate: 10
        interval: 0.05
        points:
          level: {{table: holding, address: 0, scale: 0.1}}
          flow: {{table: holding, address: 2, type: float32}}
"""


def changes(values: list[Any]) -> list[Any]:
    """``values`` without consecutive repeats (a polled value is read again at every poll)."""
    return [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]


@pytest.mark.timeout(120)
async def test_an_app_reads_opcua_and_modbus_and_writes_a_coil(mosquitto_factory: Any, tmp_path: Path) -> None:
    hub, site = mosquitto_factory("hub"), mosquitto_factory("site")
    opcua, modbus = OpcUaDevice(), ModbusDevice()
    await opcua.start(temp=20.0)
    await modbus.start()
    await modbus.set_holding(0, [100])  # level 10.0
    await modbus.set_holding(2, list(struct.unpack(">2H", struct.pack(">f", math.inf))))  # flow: not finite
    observer = HubObserver(hub.port)
    sites = parse_sites(sites_yaml(hub.url, site.url, opcua, modbus))
    app_file = tmp_path / "plant.py"
    app_file.write_text(APP.format(modbus=modbus.url))
    plan = dataclasses.replace(local_plan(load_app(app_file), sites), app_source=app_file.read_text())
    config = AgentConfig("plant-1", sites, tmp_path / "state", heartbeat_interval=0.5, checkpoint_interval=0.2)
    agent = Agent(config, [plan], connect=PahoTransport)
    task = asyncio.create_task(agent.run())
    try:
        await poll(lambda: len(agent.intake.connectors) == 2, 20, "both connectors")
        memory = agent.memory
        await poll(lambda: [r["temp"] for r in memory["boiler"]] == [20.0], 30, "the boiler's initial value")
        start = math.floor(time.time()) - 60
        written = [21.0, 22.5, 24.0, 23.5]
        for i, v in enumerate(written):
            await opcua.write(opcua.temp, v, start + i)
        await poll(lambda: len(memory["boiler"]) == 5, 30, "the boiler's values")
        assert memory["boiler"][1:] == [{"ts": start + i, "temp": v} for i, v in enumerate(written)]

        await poll(lambda: memory["tank"][-1:] and memory["tank"][-1]["value"] == 10.0, 30, "the tank level")
        await poll(lambda: agent.sinks.actuators.written >= 1, 30, "the first pump command written")
        assert await modbus.coils(5) == [False]
        await modbus.set_holding(0, [700])  # level 70.0: the pump goes on
        await poll(lambda: memory["tank"][-1]["value"] == 70.0, 30, "the level of 70")
        await poll_coil(modbus, True)
        await modbus.set_holding(0, [200])  # level 20.0: off again
        await poll_coil(modbus, False)
        assert changes([r["value"] for r in memory["tank"]]) == [10.0, 70.0, 20.0]
        assert all(r["name"] == "level" for r in memory["tank"])

        def flow_letters() -> list[dict[str, Any]]:
            return [orjson.loads(p) for t, p in observer.messages if t.startswith("spanedge/v1/plant/dlq/")]

        await poll(flow_letters, 30, "the dead letter of the flow register")
        letter = flow_letters()[0]
        assert letter["operator"] == "tank"
        assert letter["topic"] == f"modbus://127.0.0.1:{modbus.port} unit 1 holding register 2"
        assert "holds inf, not a finite number" in letter["reason"]
        assert agent.sinks.actuators.refused == 0
    finally:
        agent.stop()
        await asyncio.wait_for(task, 30)
        observer.close()
        await opcua.stop()
        await modbus.stop()


async def poll_coil(modbus: ModbusDevice, value: bool) -> None:
    deadline = time.monotonic() + 30
    while await modbus.coils(5) != [value]:
        if time.monotonic() > deadline:
            pytest.fail(f"coil 5 never became {value}")
        await asyncio.sleep(0.05)
