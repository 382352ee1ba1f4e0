"""The OPC UA and Modbus connectors against real servers: values, event times, dead letters, reconnects, writes."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
import pytest_asyncio

from edge_agent.connectors.actuators import Actuators
from edge_agent.connectors.api import make_source
from edge_agent.connectors.runner import SourceRunner
from edge_agent.mqtt.transport import Inbox, Message
from spanedge import sinks
from spanedge.sites import StreamBinding
from tests.conftest import missing_part
from tests.polling import poll

if not all(importlib.util.find_spec(m) for m in ("asyncua", "pymodbus")):
    missing_part("needs asyncua and pymodbus: pip install 'spanedge[opcua,modbus]'")

from .devices import ModbusDevice, OpcUaDevice

FAST = (0.1, 0.2, 0.5)
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def opcua_device() -> AsyncIterator[OpcUaDevice]:
    """One OPC UA server for the module (building its address space takes seconds), ``Temp`` at 20.0."""
    device = OpcUaDevice()
    await device.start(temp=20.0)
    yield device
    await device.stop()


class Collected:
    """Drains an inbox into a list of messages, acknowledging each as the agent would after its commit."""

    def __init__(self) -> None:
        self.inbox = Inbox(1000)
        self.inbox.bind(asyncio.get_running_loop())
        self.messages: list[Message] = []

    def take(self) -> list[Message]:
        for m in self.inbox.drain(1000):
            self.messages.append(m)
            m.source.ack(m.mid, m.qos)
        return self.messages

    def values(self, name: str) -> list[Any]:
        self.take()
        return [orjson.loads(m.payload)["value"] for m in self.messages if orjson.loads(m.payload)["name"] == name]


def runner(binding: StreamBinding, inbox: Inbox) -> SourceRunner:
    r = SourceRunner(make_source(binding, "s"), "site", "s", inbox, delays=FAST)
    r.start()
    return r


@pytest.mark.timeout(90)
async def test_opcua_values_carry_source_timestamps_and_survive_a_server_restart(opcua_device: OpcUaDevice) -> None:
    device = opcua_device
    got = Collected()
    nodes = {"temp": device.temp_id, "odd": device.odd_id}
    binding = StreamBinding(url=device.url, rate=10, nodes=nodes, publish_interval=0.05)
    source = runner(binding, got.inbox)
    try:
        await poll(lambda: source.subscribed.is_set() and got.values("temp") == [20.0], 30, "the initial value")
        start = math.floor(time.time()) - 100
        written = [20.5 + i for i in range(20)]
        for i, v in enumerate(written):
            await device.write(device.temp, v, start + i)
        await poll(lambda: got.values("temp")[-1:] == [written[-1]], 30, "the written values")
        assert got.values("temp") == [20.0, *written]
        temps = [m for m in got.messages if m.topic == f"node {device.temp_id}"]
        stamps = [orjson.loads(m.payload)["ts"] for m in temps[1:]]
        assert stamps == [start + i for i in range(20)]
        assert [m.arrival for m in temps[1:]] == stamps
        assert not any(m.problem for m in temps)
        odd = [m for m in got.messages if m.topic == f"node {device.odd_id}"]
        assert [m.problem for m in odd] == [
            f"node {device.odd_id}: a value of type list is not a number, boolean or string"
        ]
        assert orjson.loads(odd[0].payload)["value"] is None

        await device.stop()
        await poll(lambda: not source.connected, 30, "the source to notice the server is gone")
        await device.write(device.temp, 99.0, start + 40)  # changed while the server is unreachable
        await device.restart()
        await poll(lambda: got.values("temp")[-1:] == [99.0], 60, "the source to resubscribe")
        await device.write(device.temp, 100.0, start + 50)
        await poll(lambda: got.values("temp")[-1:] == [100.0], 30, "a value after the restart")
        assert got.values("temp") == [20.0, *written, 99.0, 100.0]
        assert source.sessions >= 2
    finally:
        source.stop()
        await source.wait_stopped()


@pytest.mark.timeout(90)
async def test_modbus_polls_scaled_registers_and_coils_and_dead_letters_what_does_not_fit() -> None:
    device = ModbusDevice()
    await device.start()
    nan = list(struct.unpack(">2H", struct.pack(">f", math.nan)))
    await device.set_holding(0, [215])  # level: 21.5 after scale 0.1
    await device.set_holding(1, [0xFFFE])  # int16 -2, then offset 100
    await device.set_holding(4, list(struct.unpack(">2H", struct.pack(">f", 1.25))))
    await device.set_holding(6, nan)
    got = Collected()
    binding = msgspec.convert(
        {
            "url": device.url,
            "rate": 10,
            "interval": 0.05,
            "points": {
                "level": {"table": "holding", "address": 0, "scale": 0.1},
                "delta": {"table": "holding", "address": 1, "type": "int16", "offset": 100},
                "flow": {"table": "holding", "address": 4, "type": "float32"},
                "broken": {"table": "holding", "address": 6, "type": "float32"},
                "pump": {"table": "coil", "address": 3},
                "missing": {"table": "input", "address": 900},
                "edge": {"table": "input", "address": 30},  # read with "over", which the device refuses ...
                "over": {"table": "input", "address": 31, "type": "uint32"},  # ... as it ends past register 31
            },
        },
        StreamBinding,
    )
    source = runner(binding, got.inbox)
    try:
        await poll(lambda: len(got.take()) >= 16, 30, "two polls")
        first = {orjson.loads(m.payload)["name"]: m for m in got.messages[:8]}
        assert {n: orjson.loads(m.payload)["value"] for n, m in first.items() if not m.problem} == {
            "level": 21.5,
            "delta": 98,
            "flow": 1.25,
            "pump": False,
            "edge": 0,
        }
        assert "refused the read" in first["over"].problem
        assert first["broken"].problem.endswith("holding register 6: holding register 6 holds nan, not a finite number")
        assert first["broken"].topic == f"modbus://127.0.0.1:{device.port} unit 1 holding register 6"
        assert "input register 900" in first["missing"].topic
        assert "refused the read" in first["missing"].problem

        await device.stop()
        await poll(lambda: not source.connected, 30, "the source to notice the device is gone")
        await device.start()
        await device.set_holding(0, [300])
        await poll(lambda: got.values("level")[-1:] == [30.0], 60, "a poll after the device came back")
    finally:
        source.stop()
        await source.wait_stopped()
        await device.stop()


def words(number: int, count: int) -> list[int]:
    return [(number >> (16 * i)) & 0xFFFF for i in reversed(range(count))]


@pytest.mark.timeout(90)
async def test_modbus_points_with_a_time_register_emit_each_sample_once_at_the_devices_time() -> None:
    device = ModbusDevice()
    await device.start()
    t0 = math.floor(time.time()) - 1000
    await device.set_holding(0, [215, *words(t0, 2)])  # level, its time in seconds next to it
    await device.set_holding(10, list(struct.unpack(">2H", struct.pack(">f", 1.5))))  # flow: its time is elsewhere
    await device.set_input(20, words(t0 * 1000 + 250, 4))  # in milliseconds, 64 bits
    binding = msgspec.convert(
        {
            "url": device.url,
            "rate": 10,
            "interval": 0.05,
            "points": {
                "level": {"address": 0, "scale": 0.1, "time": {"address": 1}},
                "flow": {
                    "address": 10,
                    "type": "float32",
                    "time": {"table": "input", "address": 20, "count": 4, "unit": "ms"},
                },
                "unset": {"address": 5, "time": {"address": 6}},  # its time holds 0: implausible
                "gone": {"address": 30, "time": {"address": 31}},  # ends past the device's 32 registers
            },
        },
        StreamBinding,
    )
    got = Collected()
    source = runner(binding, got.inbox)
    try:
        await poll(lambda: len(got.take()) >= 4, 30, "the first samples")

        def refusals() -> list[Message] | None:
            found = [m for m in got.take() if m.topic.endswith("holding register 30")]
            return found if len(found) >= 10 else None

        answered = device.answered
        await poll(lambda: device.answered > answered + 40, 30, "ten more polls")
        # no time known: dead-lettered at every poll, not once
        refused = await poll(refusals, 60, "ten refusals")
        assert "the device refused the read of it and its time, holding registers 31-32 (" in refused[0].problem
        got.messages = [m for m in got.messages if m not in refused]
        by_name = {orjson.loads(m.payload)["name"]: m for m in got.messages}
        assert len(got.messages) == 3  # each sample once, however many polls read it
        assert orjson.loads(by_name["level"].payload) == {"name": "level", "value": 21.5, "ts": t0}
        assert orjson.loads(by_name["flow"].payload) == {"name": "flow", "value": 1.5, "ts": t0 + 0.25}
        assert by_name["level"].arrival == t0
        assert not by_name["level"].problem
        assert not by_name["flow"].problem
        where = f"modbus://127.0.0.1:{device.port} unit 1 holding registers 6-7"
        assert by_name["unset"].topic == where
        assert by_name["unset"].problem.startswith(f"{where} (the time of holding register 5) holds 0.000")

        await device.set_holding(0, [215, *words(t0 + 1, 2)])  # the same value, a new sample
        await device.set_holding(0, [215, *words(t0 + 2, 2)])  # overwritten before a poll: lost
        await device.set_holding(6, words(t0 + 3 * 86400 + 1000, 2))  # three days ahead

        def kept() -> list[Message]:  # all but the refused point's dead letters
            return [m for m in got.take() if not m.topic.endswith("holding register 30")]

        await poll(lambda: len(kept()) >= 5, 30, "the new samples")
        answered = device.answered
        await poll(lambda: device.answered > answered + 40, 30, "ten more polls")
        after = kept()
        levels = [orjson.loads(m.payload) for m in after if m.topic.endswith("holding register 0")]
        assert [(r["value"], r["ts"]) for r in levels] == [(21.5, t0), (21.5, t0 + 2)]
        ahead = [m.problem for m in after[3:] if m.topic == where]
        assert len(ahead) == 1
        assert "not a plausible time: it must lie between 2000-01-01 and a day after this gateway's clock" in ahead[0]
        assert len(after) == 5
    finally:
        source.stop()
        await source.wait_stopped()
        await device.stop()


@pytest.mark.timeout(90)
async def test_opcua_writes_wait_for_a_server_that_is_down_and_the_last_value_wins(
    opcua_device: OpcUaDevice, tmp_path: Path
) -> None:
    device = opcua_device
    queue = Actuators(tmp_path / "actuators.db", delays=FAST)
    spec = sinks.opcua(device.url, nodes={"setpoint": device.setpoint_id})
    try:
        queue.put("app/sp", spec, {"point": "setpoint", "value": 42})
        await poll(lambda: queue.written == 1, 30, "the first write")
        assert await device.setpoint.read_value() == 42.0
        await device.stop()
        for value in (50, 55, 60.5):  # while the server is down: only the newest waits
            queue.put("app/sp", spec, {"point": "setpoint", "value": value})
        assert queue.pending("app/sp") == 1
        await device.restart()
        await poll(lambda: queue.pending() == 0, 60, "the write once the server is back")
        assert await device.setpoint.read_value() == 60.5
        assert queue.written == 2
    finally:
        queue.close()


@pytest.mark.timeout(60)
async def test_modbus_writes_scaled_registers_and_refuses_what_does_not_fit(tmp_path: Path) -> None:
    device = ModbusDevice()
    await device.start()
    queue = Actuators(tmp_path / "actuators.db", delays=FAST)
    spec = sinks.modbus(
        device.url,
        points={"speed": {"address": 10, "type": "int16", "scale": 0.5}, "gain": {"address": 12, "type": "float32"}},
        last_value_wins=False,
    )
    try:
        queue.put("app/drive", spec, {"point": "speed", "value": -20})
        queue.put("app/drive", spec, {"point": "gain", "value": 0.75})
        queue.put("app/drive", spec, {"point": "speed", "value": 10**6})  # does not fit an int16
        await poll(lambda: queue.pending() == 0, 30, "the writes")
        assert device.server is not None
        assert await device.server.async_getValues(1, 3, 10, 1) == [(-40) & 0xFFFF]
        assert await device.server.async_getValues(1, 3, 12, 2) == list(struct.unpack(">2H", struct.pack(">f", 0.75)))
        assert (queue.written, queue.refused) == (2, 1)
    finally:
        queue.close()
        await device.stop()


async def test_adjacent_modbus_points_of_a_table_are_read_in_one_request() -> None:
    from edge_agent.connectors.modbus import groups
    from spanedge.connectors.modbus import Point, Table, Type

    points = {
        "b": Point(address=1),
        "a": Point(address=0),
        "wide": Point(address=2, type=Type.FLOAT32),
        "gap": Point(address=5),
        "coil": Point(table=Table.COIL, address=4),
        "input": Point(table=Table.INPUT, address=5),
        **{f"r{i}": Point(address=100 + i) for i in range(130)},
    }
    runs = [[name for name, _ in run] for run in groups(points)]
    assert runs[:4] == [["coil"], ["a", "b", "wide"], ["gap"], [f"r{i}" for i in range(125)]]
    assert runs[4:] == [[f"r{i}" for i in range(125, 130)], ["input"]]
