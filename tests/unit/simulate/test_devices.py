"""The simulator's devices: Modbus controllers named under ``devices:``, their read-back, OPC UA sensors."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from simulate.config import parse_simulation
from simulate.devices.actuated import Devices, predicted
from simulate.devices.sensing import NodeSensors
from simulate.errors import InvalidOption
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
