"""The connector API with stand-in connectors: reconnects, back-pressure, acknowledgements, durable sink writes."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from edge_agent.connectors import api
from edge_agent.connectors.actuators import Actuators
from edge_agent.connectors.api import MissingConnector, Reading, make_sink, make_source, register_sink
from edge_agent.connectors.runner import SourceRunner
from edge_agent.connectors.status import connector_states
from edge_agent.mqtt.transport import Inbox
from spanedge import sinks
from spanedge.errors import MissingExtra
from spanedge.sites import StreamBinding
from tests.polling import poll

FAST = (0.01, 0.02)


class FlakySource:
    """Yields two batches per session, then fails; remembers what was acknowledged."""

    name = "flaky://device"

    def __init__(self) -> None:
        self.sessions = 0
        self.acked: list[Any] = []

    async def session(self) -> AsyncIterator[list[Reading]]:
        self.sessions += 1
        for i in range(2):
            n = self.sessions * 10 + i
            yield [Reading("x", n, 1000.0 + n, f"register {n}", token=n)]
        raise ConnectionError("device gone")

    def acknowledge(self, tokens: list[Any]) -> None:
        self.acked.extend(tokens)


async def test_a_source_reconnects_after_a_failed_session_and_is_acknowledged_after_the_commit() -> None:
    inbox = Inbox(1000)
    inbox.bind(asyncio.get_running_loop())
    source = FlakySource()
    runner = SourceRunner(source, "site", "s", inbox, delays=FAST)
    runner.start()
    try:
        await poll(lambda: len(inbox) >= 6, 10, "three sessions")
        messages = inbox.drain(6)
        assert [orjson.loads(m.payload) for m in messages[:2]] == [
            {"name": "x", "value": 10, "ts": 1010.0},
            {"name": "x", "value": 11, "ts": 1011.0},
        ]
        assert [m.arrival for m in messages[:2]] == [1010.0, 1011.0]
        assert [m.topic for m in messages[:2]] == ["register 10", "register 11"]
        assert all(m.qos == 1 and m.source is runner for m in messages)
        assert source.acked == []  # nothing is acknowledged before its commit
        for m in messages[:3]:
            m.source.ack(m.mid, m.qos)
        assert source.acked == [10, 11, 20]
        assert runner.failures >= 1
        assert runner.error == "ConnectionError: device gone"
        state = connector_states("site", [runner], None)["s"]
        assert state["server"] == "flaky://device"
        assert state["reconnects"] >= 2
        assert state["last_error"] == "ConnectionError: device gone"
        other = SourceRunner(source, "other-site", "s", inbox)
        assert connector_states("site", [other], None) == {
            "s@other-site": {"server": "flaky://device", "up": False, "reconnects": 0}
        }
    finally:
        runner.stop()
        await runner.wait_stopped()


class Endless:
    name = "endless://device"

    async def session(self) -> AsyncIterator[list[Reading]]:
        n = 0
        while True:
            n += 1
            yield [Reading("x", n, float(n), "r")]
            await asyncio.sleep(0)

    def acknowledge(self, tokens: list[Any]) -> None:
        pass


async def test_a_source_stops_reading_while_the_inbox_is_over_half_full() -> None:
    inbox = Inbox(100)
    inbox.bind(asyncio.get_running_loop())
    runner = SourceRunner(Endless(), "site", "s", inbox, delays=FAST)
    runner.start()
    try:
        await poll(lambda: len(inbox) >= 50, 10, "the inbox half full")
        await asyncio.sleep(0.2)
        assert len(inbox) == 50  # paused: not one more reading
        inbox.drain(30)  # down to a quarter of the bound: reading resumes
        await poll(lambda: len(inbox) >= 50, 10, "reading to resume")
        assert runner.read > 50
    finally:
        runner.stop()
        await runner.wait_stopped()


def test_an_unknown_scheme_or_a_missing_extra_says_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    binding = StreamBinding(url="nosuch://host", rate=1)
    with pytest.raises(MissingConnector, match=r"no connector for nosuch:// source .*register_source\('nosuch'"):
        make_source(binding, "s")
    real_import = builtins.__import__

    def no_pymodbus(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("pymodbus"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(api._SINKS, "modbus", raising=False)
    monkeypatch.delitem(__import__("sys").modules, "edge_agent.connectors.modbus", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_pymodbus)
    spec = sinks.modbus("modbus://plc", points={"v": {"table": "coil"}})
    with pytest.raises(MissingExtra, match=r"^pymodbus is not installed; .* run pip install 'spanedge\[modbus\]'$"):
        make_sink(spec)


class Device:
    """A stand-in device: fails while ``down``, refuses negative values, records the writes it took."""

    name = "fake://device"
    down = False
    writes: ClassVar[list[tuple[str, Any]]] = []

    def __init__(self, spec: Any) -> None:
        pass

    async def connect(self) -> None:
        if Device.down:
            raise ConnectionError("unreachable")

    async def write(self, key: str, value: Any) -> None:
        if Device.down:
            raise ConnectionError("unreachable")
        if isinstance(value, int) and value < 0:
            raise ValueError(f"{key} cannot take {value}")
        Device.writes.append((key, value))

    async def close(self) -> None:
        pass


@pytest.fixture
def device() -> type[Device]:
    register_sink("fake", Device)
    Device.down, Device.writes = False, []
    return Device


async def test_last_value_wins_keeps_the_newest_command_per_point_while_the_device_is_down(
    device: type[Device], tmp_path: Path
) -> None:
    device.down = True
    queue = Actuators(tmp_path / "actuators.db", delays=FAST)
    spec = sinks.connector("fake://device")
    try:
        for value in (1, 2, 3):
            queue.put("app/valves", spec, {"point": "v1", "value": value})
        queue.put("app/valves", spec, {"point": "v2", "value": 7})
        assert queue.pending() == 2
        await poll(lambda: queue.up.get("app/valves") is False, 10, "a failed attempt")
        device.down = False
        await poll(lambda: queue.pending() == 0, 10, "the writes")
        assert device.writes == [("v1", 3), ("v2", 7)]
        queue.put("app/valves", spec, {"point": "v1", "value": 3})  # repeated: harmless, the same state
        await poll(lambda: queue.pending() == 0, 10, "the repeated write")
        queue.put("app/valves", spec, {"point": "v1", "value": -1})  # never writable: dropped and counted
        queue.put("app/valves", spec, {"valve": "v1"})  # no point/value fields: refused at once
        await poll(lambda: queue.pending() == 0 and queue.refused == 2, 10, "the last writes")
        assert device.writes == [("v1", 3), ("v2", 7), ("v1", 3)]
    finally:
        queue.close()


async def test_without_last_value_wins_every_value_is_written_in_order_even_after_a_restart(
    device: type[Device], tmp_path: Path
) -> None:
    device.down = True
    spec = sinks.connector("fake://device", last_value_wins=False)
    queue = Actuators(tmp_path / "actuators.db", delays=FAST)
    for value in (1, 2, 3):
        queue.put("app/log", spec, {"point": "p", "value": value})
    queue.close()  # the agent stops with the values unwritten
    device.down = False
    again = Actuators(tmp_path / "actuators.db", delays=FAST)
    try:
        assert again.pending("app/log") == 3
        again.resume({"app/log": spec})
        await poll(lambda: again.pending() == 0, 10, "the values left from before")
        assert device.writes == [("p", 1), ("p", 2), ("p", 3)]
    finally:
        again.close()


async def test_the_queue_of_a_sink_is_bounded_dropping_the_oldest(device: type[Device], tmp_path: Path) -> None:
    device.down = True
    queue = Actuators(tmp_path / "actuators.db", delays=(5.0,), max_pending=3)
    spec = sinks.connector("fake://device", last_value_wins=False)
    try:
        for value in range(5):
            queue.put("app/log", spec, {"point": "p", "value": value})
        assert (queue.pending("app/log"), queue.dropped) == (3, 2)
        rows = queue.db.execute("SELECT value FROM pending ORDER BY id").fetchall()
        assert [orjson.loads(v) for (v,) in rows] == [2, 3, 4]
    finally:
        queue.close()
