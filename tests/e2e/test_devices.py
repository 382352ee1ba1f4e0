"""Sensors that are OPC UA devices and commands that go to a Modbus device, in the simulator.

A field station reads four probes from a simulated OPC UA server (one node per probe, one record
per value change, the nodes' source timestamps as event times); its per-probe windows and the
valve commands made of them run at the gateway, the one spoke that declares the irrigation
controller (``devices: {valves: ...}``), which writes them to the controller's coils. The
results are checked against the reference, and the coils are read back at the end.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest
import yaml

from tests.conftest import missing_part
from tests.e2e.conftest import MODE, _require_parts

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

PROBES = [f"p{i}" for i in range(4)]

APP = '''
from spanedge import App, agg, sinks

VALVES = {f"p{i}": {"table": "coil", "address": 10 + i} for i in range(4)}


def command(stats: dict) -> dict:
    """Open a probe's valve when its mean over the window is below 25."""
    return {"probe": stats["name"], "open": stats["value"] < 25.0, "at": stats["window_end"]}


app = App("devices")
means = app.source("probes", time_field="ts").window(
    name="means", key="name", size="5s", aggs={"n": agg.count(), "value": agg.mean("value")}, scope="local"
)
means.sink(sinks.mqtt("field/means"), name="means_bus")
commands = means.map(command, name="commands")
commands.sink(sinks.modbus("device:valves", points=VALVES, key="probe", value="open"), name="valve_coils")
commands.sink(sinks.mqtt("field/commands"), name="command_bus")
'''

SITES: dict[str, Any] = {
    "sites": {
        "cloud": {"tier": "hub", "broker": "mqtt://localhost:1883", "cpu": 4},
        "gateway": {
            "tier": "spoke",
            "broker": "mqtt://localhost:1883",
            "cpu": 1,
            "devices": {"valves": {"url": "modbus://localhost:1502"}},
        },
        "field": {
            "tier": "spoke",
            "broker": "mqtt://localhost:1883",
            "cpu": 1,
            "streams": {
                "probes": {
                    "url": "opcua://localhost:4840/",
                    "nodes": {p: f"ns=2;s={p}" for p in PROBES},
                    "rate": 8,
                }
            },
        },
    },
    "links": [{"between": ["field", "gateway"], "latency_ms": 5}],
    "simulation": {
        "seed": 11,
        "duration": "45s",
        "settle": "8s",
        "sensors": {
            "field": {
                "probes": {
                    "count": 4,
                    "rate": 2,
                    "key": "p{i}",
                    "device": "opcua",
                    "value": {"moisture": {"normal": [25, 8], "round": 1}},
                    "disorder": "300ms",
                }
            }
        },
    },
}


@pytest.fixture(scope="module")
def device_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """45 s of OPC UA probe values into the field station, valve commands out to the Modbus controller."""
    _require_parts()
    for extra in ("asyncua", "pymodbus"):
        if importlib.util.find_spec(extra) is None:
            missing_part(f"needs {extra}: pip install 'spanedge[opcua,modbus]'")
    from simulate.runner import Options, run

    directory = tmp_path_factory.mktemp("devices")
    (directory / "app.py").write_text(APP)
    (directory / "sites.yaml").write_text(yaml.safe_dump(SITES, sort_keys=False))
    opts = Options(
        sites=directory / "sites.yaml",
        app=directory / "app.py",
        duration=45,
        mode=MODE,
        run_dir=directory / "run",
    )
    return asyncio.run(run(opts))


def _sink(outcome: Any, name: str) -> Any:
    return next(c for c in outcome.report.sinks if c.sink == name)


def test_the_opc_ua_records_give_the_references_results(device_run: Any) -> None:
    report = device_run.report
    for name in ("means_bus", "command_bus"):
        check = _sink(device_run, name)
        assert check.unchecked is None, check
        assert check.checked > 0, (name, device_run.run_dir)
        exact = (
            check.missing,
            check.duplicates,
            check.wrong,
            check.unexpected,
            check.lost_records,
            check.extra_records,
        )
        assert exact == (0, 0, 0, 0, 0, 0), (name, check.examples, device_run.run_dir)
    assert (report.lost, report.duplicates) == (0, 0), device_run.run_dir
    assert not report.problems, report.problems
    # one record per value change of a node: each probe's first value (0 at the server's start) and its changes
    sent = [s.message for s in device_run.sent]
    assert {m.key for m in sent} == set(PROBES)
    assert all(m.topic == m.key for m in sent)
    counts = {
        (w.value["name"], w.value["window_start"]): w.value["n"]
        for w in device_run.collector.results
        if w.sink == "means_bus"
    }
    assert sum(counts.values()) <= len(sent)
    assert any("OPC UA sensors of probes at field" in e for e in device_run.events)


def test_the_commands_run_where_the_device_is_and_the_coils_hold_the_predicted_values(device_run: Any) -> None:
    commands = [r for r in device_run.collector.results if r.sink == "command_bus"]
    assert commands
    assert {r.site for r in commands} == {"gateway"}  # the only spoke that declares the valves
    coils = _sink(device_run, "valve_coils")
    assert coils.unchecked is None, coils
    assert (coils.received, coils.expected) == (4, 4)
    assert coils.checked == 4, coils  # every probe had a command due before the cutoff
    assert coils.wrong == 0, (coils.examples, device_run.run_dir)
    assert any("Modbus device modbus://localhost:1502 simulated at" in e for e in device_run.events)
