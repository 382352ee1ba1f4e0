"""Device bindings: ``devices:`` of a spoke, sinks given ``"device:NAME"``, their resolution, placement and dead letters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.checkpoint import Committed
from edge_agent.connectors.bindings import UnboundDevice, bind
from edge_agent.sinks import LocalSinks
from placement import solve
from placement.constraints import violations
from placement.latency import LatencyMatrix
from placement.problem import build_problem
from spanedge import App, sinks
from spanedge.errors import InfeasiblePlacement, InvalidDataflow, InvalidSites
from spanedge.runtime import SinkItem
from spanedge.sites import parse_sites
from tests.unit.fakes import FakeTransport

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://localhost:1883", cpu: 8}
  field: {tier: spoke, broker: "mqtt://localhost:1883", cpu: 1, streams: {probes: {topic: "p/+", rate: 10}}}
  barn:
    tier: spoke
    broker: "mqtt://localhost:1883"
    devices:
      valves: {url: "modbus://10.0.0.5:502", unit: 3}
      panel: {url: "opcua://10.0.0.6:4840/plc", username: op, password_env: PANEL_PW}
links:
  - {between: [field, barn], latency_ms: 5}
"""
POINTS = {"a": {"table": "coil", "address": 0}}


def _command(record: dict[str, Any]) -> dict[str, Any]:
    return {"point": "a", "value": bool(record)}


def _app(spec: Any) -> App:
    app = App("farm")
    app.source("probes").map(_command, name="command").sink(spec, name="coils")
    return app


def test_a_spoke_declares_devices_checked_like_stream_urls() -> None:
    sites = parse_sites(SITES)
    assert [s.name for s in sites.with_device("valves")] == ["barn"]
    assert sites.site("barn").devices["valves"].sink_options() == {"unit": 3}
    assert sites.site("barn").devices["panel"].sink_options() == {"username": "op", "password_env": "PANEL_PW"}
    with pytest.raises(InvalidSites, match=r"devices: only a spoke has devices"):
        parse_sites(SITES.replace("cpu: 8}", "cpu: 8, devices: {v: {url: 'modbus://h:502'}}}"))
    with pytest.raises(InvalidSites, match=r"not a connector URL"):
        parse_sites(SITES.replace("modbus://10.0.0.5:502", "10.0.0.5:502"))
    with pytest.raises(InvalidSites, match=r"MQTT stream is read"):
        parse_sites(SITES.replace("modbus://10.0.0.5:502", "mqtt://10.0.0.5:1883"))
    with pytest.raises(InvalidSites, match=r"devices\.Bad Name.*device name"):
        parse_sites(SITES.replace("valves:", "Bad Name:"))


def test_sinks_take_a_device_binding_instead_of_a_url() -> None:
    spec = sinks.modbus("device:valves", points=POINTS)
    assert (spec.device, spec.scheme) == ("valves", "modbus")
    assert sinks.opcua("device:panel", nodes={"a": "ns=2;i=7"}).scheme == "opcua"
    assert sinks.connector("device:x").device == "x"
    assert sinks.modbus("modbus://h:502", points=POINTS).device is None
    with pytest.raises(InvalidDataflow, match=r"device name 'no way'.*'device:NAME'"):
        sinks.modbus("device:no way", points=POINTS)
    with pytest.raises(InvalidDataflow, match=r"http:// or https://"):
        sinks.webhook("device:hook")


def test_bind_takes_the_sites_url_and_settings_and_names_the_fix_when_missing() -> None:
    devices = parse_sites(SITES).site("barn").devices
    bound = bind(sinks.modbus("device:valves", points=POINTS), "barn", devices)
    assert (bound.target, bound.scheme, bound.options["unit"], bound.device) == (
        "modbus://10.0.0.5:502",
        "modbus",
        3,
        None,
    )
    assert bind(sinks.modbus("modbus://h:502", points=POINTS), "barn", {}).target == "modbus://h:502"
    with pytest.raises(UnboundDevice, match=r"site 'field' .* device 'valves'.*devices: none.*under site 'field'"):
        bind(sinks.modbus("device:valves", points=POINTS), "field", {})
    with pytest.raises(UnboundDevice, match=r"device 'panel' is opcua://.*modbus:// connector"):
        bind(sinks.modbus("device:panel", points=POINTS), "barn", devices)


def test_placement_runs_a_device_sink_only_at_spokes_that_declare_the_device() -> None:
    sites = parse_sites(SITES)
    plan = solve(_app(sinks.modbus("device:valves", points=POINTS)), sites)
    assert plan.site_of("coils@field") == plan.site_of("command@field") == "barn"
    problem = build_problem(_app(sinks.modbus("device:valves", points=POINTS)), sites, LatencyMatrix.from_sites(sites))
    assert problem.replicas["coils@field"].candidates == ("barn",)
    wrong = {rid: "field" for rid in problem.replicas}
    assert any("coils@field at field, which lacks its device" in v for v in violations(problem, wrong))


def test_an_app_whose_device_no_spoke_declares_is_refused() -> None:
    sites = parse_sites(SITES)
    with pytest.raises(InfeasiblePlacement, match=r"writes to device 'pumps', but no spoke .* declares"):
        solve(_app(sinks.modbus("device:pumps", points=POINTS)), sites)
    with pytest.raises(InfeasiblePlacement, match=r"a modbus:// device"):
        solve(_app(sinks.modbus("device:panel", points=POINTS)), sites)


def test_a_site_without_the_binding_dead_letters_the_values(tmp_path: Path) -> None:
    hub = FakeTransport(None, "hub", "hub broker")
    local = LocalSinks("field", tmp_path, 2**20, hub, lambda: hub)  # type: ignore[arg-type]
    spec = sinks.modbus("device:valves", points=POINTS)
    done = Committed(sinks=[("farm", SinkItem("coils", spec, {"point": "a", "value": True}, 12.0))])
    local.serve(done)
    ((topic, body),) = hub.published
    dead = orjson.loads(body)
    assert topic.endswith("/field")
    assert "dlq" in topic
    assert "site 'field'" in dead["reason"]
    assert "device 'valves'" in dead["reason"]
    assert (dead["operator"], dead["ts"], local.dlq_count, local.opened_actuators) == ("coils", 12.0, 1, None)


def test_a_device_declared_only_out_of_reach_is_placed_anyway_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    far = parse_sites(SITES.replace("latency_ms: 5}", "latency_ms: 500}"))
    caplog.set_level("WARNING", "placement.problem")
    plan = solve(_app(sinks.modbus("device:valves", points=POINTS)), far)
    assert plan.assignments  # a site added out of the device's reach must not stop its app's re-plans
    assert "only barn declare(s), none within 100 ms of its source site field" in caplog.text
    assert "dead letters until the device is declared under field's devices:" in caplog.text
