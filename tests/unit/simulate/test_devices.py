"""The simulator's devices: Modbus controllers named under ``devices:``, their read-back, OPC UA sensors."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from simulate.config import parse_simulation
from simulate.devices.actuated import Devices, predicted
from simulate.devices.sensing import NodeSensors
from simulate.errors import InvalidOption, SimulationError
from simulate.reference import Item
from spanedge import App, sinks
from spanedge.errors import InvalidSites
from spanedge.sites import Sites

POINTS = {"a": {"table": "coil", "address": 0}, "b": {"table": "coil", "address": 1}, "c": {"address": 5}}


def _sites(probes: dict[str, Any] | None = None, sensor: dict[str, Any] | None = None) -> Sites:
    data = {
        "sites": {
            "cloud": {"tier": "hub", "broker": "mqtt://localhost:1883"},
            "gw": {
                "tier": "spoke",
                "broker": "mqtt://localhost:1883",
                "devices": {"valves": {"url": "modbus://localhost:1502"}},
            },
            "far": {
                "tier": "spoke",
                "broker": "mqtt://localhost:1883",
                "devices": {"valves": {"url": "modbus://10.1.1.1:502"}},
            },
            "field": {
                "tier": "spoke",
                "broker": "mqtt://localhost:1883",
                "streams": {
                    "probes": probes or {"url": "opcua://localhost:4840/", "rate": 2, "nodes": {"p0": "ns=2;s=p0"}}
                },
            },
        },
        "simulation": {
            "sensors": {
                "field": {
                    "probes": sensor
                    or {"count": 1, "rate": 1, "key": "p{i}", "device": "opcua", "value": {"m": {"const": 1}}}
                }
            }
        },
    }
    return Sites.of(yaml.safe_load(yaml.safe_dump(data)))


def _app() -> App:
    app = App("d")
    app.source("probes").sink(sinks.modbus("device:valves", points=POINTS), name="coils")
    return app


def test_local_modbus_devices_are_simulated_and_a_device_named_twice_differently_is_unchecked() -> None:
    sites = _sites()
    devices = Devices.of(sites, _app(), parse_simulation(sites))
    assert list(devices.urls) == ["modbus://localhost:1502"]  # 10.1.1.1 is not this machine
    assert devices.sinks == []
    assert "not one simulated Modbus device" in devices.unchecked["coils"]
    assert Devices.of(sites, _app(), parse_simulation(sites), loopback=False).urls == {}


def test_a_point_may_hold_the_last_due_command_or_a_later_one() -> None:
    spec = sinks.modbus("device:valves", points=POINTS)

    def cmd(point: str, t: float, value: Any) -> Item:
        return Item("gw", t, {"point": point, "value": value})

    items = [cmd("a", 3, False), cmd("a", 1, True), cmd("a", 12, True), cmd("b", 11, True), cmd("c", 2, 7)]
    allowed, due = predicted(spec, items, cutoff=10)
    assert allowed == {"a": [False, True], "b": [False, True], "c": [7]}  # b: no command due, so off or later
    assert due == {"a", "c"}


def test_opc_ua_sensors_need_an_opcua_stream_on_this_machine_with_a_node_per_key() -> None:
    sites = _sites()
    (stream,) = NodeSensors.of(sites, parse_simulation(sites)).streams
    assert (stream.site, stream.stream, stream.nodes) == ("field", "probes", {"p0": "ns=2;s=p0"})
    sensor = {"count": 2, "rate": 1, "key": "p{i}", "device": "opcua", "value": {"m": {"const": 1}}}
    wider = _sites(sensor=sensor)
    with pytest.raises(InvalidOption, match=r"needs a node in ns=2 .*p1: 'ns=2;s=p1'"):
        NodeSensors.of(wider, parse_simulation(wider))
    mqtt = _sites(probes={"topic": "p/+", "rate": 1})
    with pytest.raises(InvalidOption, match=r"needs its stream bound with url: opcua://localhost"):
        NodeSensors.of(mqtt, parse_simulation(mqtt))
    two = {"count": 1, "rate": 1, "device": "opcua", "value": {"m": {"const": 1}, "n": {"const": 2}}}
    two_values = _sites(sensor=two)
    with pytest.raises(InvalidSites, match=r"node holds one number"):
        parse_simulation(two_values)


def test_a_node_records_each_change_with_its_event_time() -> None:
    sites = _sites()
    (stream,) = NodeSensors.of(sites, parse_simulation(sites)).streams
    sent = stream.record("p0", 21.5, 100.25, 3)
    assert sent.message.value == {"name": "p0", "value": 21.5, "ts": 100.25}
    assert (sent.message.event_time, sent.message.key, sent.message.malformed) == (100.25, "p0", None)


def _modbus(points: dict[str, Any] | None = None, interval: float = 0.25, **sensor: Any) -> Sites:
    time = {"address": 2, "count": 4, "unit": "ms"}
    probes = {
        "url": "modbus://localhost:1503?unit=3",
        "rate": 2,
        "interval": interval,
        "points": points
        or {f"p{i}": {"address": 6 * i, "type": "float32", "time": {**time, "address": 6 * i + 2}} for i in range(2)},
    }
    spec = {"count": 2, "rate": 1, "key": "p{i}", "device": "modbus", "value": {"m": {"const": 1}}, **sensor}
    return _sites(probes=probes, sensor=spec)


def test_modbus_sensors_are_points_with_a_millisecond_time_read_with_them() -> None:
    sites = _modbus()
    (stream,) = NodeSensors.of(sites, parse_simulation(sites)).streams
    assert (stream.url, stream.unit) == ("modbus://localhost:1503?unit=3", 3)
    assert set(stream.points) == {"p0", "p1"}
    assert stream.nodes == {"p0": "holding register 0", "p1": "holding register 6"}
    cases = [
        (_modbus(rate=5), r"sample 5 times a second but the stream polls every 0.25s.*rate: at most 4"),
        (_modbus(rate=[1, 8]), r"sample 8 times a second"),
        (_modbus(keys=1), r"each device: modbus sensor is one point: leave keys: out"),
        (_modbus({"p0": {"address": 0, "time": {"address": 2, "count": 4, "unit": "ms"}}}), r"missing: p1"),
        (_modbus({f"p{i}": {"address": i} for i in range(2)}), r"point 'p0' needs time: \{address: N, count: 4"),
        (
            _modbus(
                {f"p{i}": {"address": i, "time": {"address": 200 + 4 * i, "count": 4, "unit": "ms"}} for i in range(2)}
            ),
            r"point 'p0' needs its time in its own table within 125 registers of it",
        ),
        (
            _modbus(
                {
                    f"p{i}": {"table": "coil", "address": i, "time": {"address": 4 * i, "count": 4, "unit": "ms"}}
                    for i in range(2)
                }
            ),
            r"point 'p0' is a coil 0; a sensor's value sits in holding or input registers",
        ),
    ]
    for wrong, message in cases:
        with pytest.raises(InvalidOption, match=message):
            NodeSensors.of(wrong, parse_simulation(wrong))
    mqtt = _sites(
        probes={"topic": "p/+", "rate": 1},
        sensor={"count": 1, "rate": 1, "device": "modbus", "value": {"m": {"const": 1}}},
    )
    with pytest.raises(InvalidOption, match=r"needs its stream bound with url: modbus://localhost:502 and points:"):
        NodeSensors.of(mqtt, parse_simulation(mqtt))


def test_a_modbus_sensor_stores_what_its_point_and_time_hold() -> None:
    from simulate.devices.polled import PolledDevice

    sites = _modbus(
        {
            f"p{i}": {"address": 6 * i, "scale": 0.1, "time": {"address": 6 * i + 1, "count": 4, "unit": "ms"}}
            for i in range(2)
        }
    )
    (stream,) = NodeSensors.of(sites, parse_simulation(sites)).streams
    device = PolledDevice(stream.points, stream.url, stream.unit)
    assert device.stored("p0", 21.54) == 21.5  # what a uint16 scaled by 0.1 holds
    assert device.stored_time("p0", 1_765_120_000.1234) == 1_765_120_000.123
    with pytest.raises(SimulationError, match=r"the simulated sensor 'p1' made -3.0, which its point does not hold"):
        device.stored("p1", -3.0)
    assert device.subscriptions() == 0  # not started, so not polled
