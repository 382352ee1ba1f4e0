"""The simulation: section of sites.yaml and the sensor generators it describes."""

from __future__ import annotations

import orjson
import pytest

from simulate.config import parse_simulation, resolve_links
from simulate.sensors import device_topic, devices_of, schedule
from spanedge.errors import InvalidSites
from spanedge.sites import Sites, load_sites, parse_sites
from tests.conftest import EXAMPLES

BASE = """
sites:
  cloud: {tier: hub, broker: "mqtt://localhost:1883"}
  edge:
    tier: spoke
    broker: "mqtt://localhost:1883"
    streams:
      readings: {topic: "plant/+/temp", rate: 10}
default_link: {latency_ms: 30, bandwidth_mbps: 8}
"""


def _sites(simulation: str) -> Sites:
    return parse_sites(BASE + simulation)


def test_cold_chain_example_parses() -> None:
    sites = load_sites(EXAMPLES / "cold_chain" / "sites.yaml")
    sim = parse_simulation(sites)
    assert set(sim.sensors) == {"truck-7", "truck-9", "warehouse-north"}
    spec = sim.sensors["warehouse-north"]["readings"]
    assert spec.count == 20
    assert spec.rate == (2.0, 5.0)
    assert spec.time_field() == "ts"
    links = {frozenset((w.a, w.b)): w for w in resolve_links(sites, sim)}
    truck = links[frozenset(("truck-7", "cloud"))]
    assert (truck.delay_ms, truck.bandwidth_mbps, truck.jitter_ms) == (80.0, 2.0, 10.0)
    assert len(links) == 6  # every pair of the four sites


def test_links_fall_back_to_sites_yaml_and_take_overrides() -> None:
    sites = _sites(
        """
simulation:
  wan: {jitter_ms: 3}
  links: [{between: [edge, cloud], delay_ms: 12.5}]
  sensors: {edge: {readings: {count: 2, rate: 1}}}
"""
    )
    (link,) = resolve_links(sites, parse_simulation(sites))
    assert (link.delay_ms, link.jitter_ms, link.bandwidth_mbps) == (12.5, 3.0, 8.0)


@pytest.mark.parametrize(
    ("simulation", "fragment"),
    [
        ("", "has no simulation: section"),
        ("simulation: {sensors: {}}", "simulation.sensors is empty"),
        ("simulation: {sensors: {edge: {speed: {count: 1, rate: 1}}}}", "does not source stream 'speed'"),
        ("simulation: {sensors: {elsewhere: {readings: {count: 1, rate: 1}}}}", "unknown site 'elsewhere'"),
        ("simulation: {sensors: {edge: {readings: {count: 0, rate: 1}}}}", "simulation.sensors.edge.readings.count"),
        ("simulation: {sensors: {edge: {readings: {count: 1, rate: [5, 1]}}}}", "min <= max"),
        ("simulation: {sensors: {edge: {readings: {count: 1, rate: 1, value: {t: $now}}}}}", "unknown '$now'"),
        (
            "simulation: {sensors: {edge: {readings: {count: 1, rate: 1, value: {t: {uniform: [0, 1], const: 2}}}}}}",
            "exactly one of",
        ),
        ("simulation: {duration: soon, sensors: {edge: {readings: {count: 1, rate: 1}}}}", "simulation.duration"),
        ("simulation: {links: [{between: [edge, moon]}], sensors: {edge: {readings: {count: 1, rate: 1}}}}", "moon"),
    ],
)
def test_errors_name_the_field(simulation: str, fragment: str) -> None:
    with pytest.raises(InvalidSites) as info:
        parse_simulation(_sites(simulation))
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("simulation", "message"),
    [
        (
            "simulation: {sensors: {edge: {readings: {count: 0, rate: 1}}}}",
            "s.yaml: simulation.sensors.edge.readings.count: Expected `int` >= 1 (got 0)",
        ),
        (
            "simulation: {sensors: {edge: {readings: {count: 1, rate: [5, 1]}}}}",
            "s.yaml: simulation.sensors.edge.readings.rate: rate must be positive, and [min, max] with min <= max "
            "(got [5, 1])",
        ),
        (
            "simulation: {sensors: {edge: {readings: {count: 1, rate: 1, value: {t: {walk: {start: 1, step: -1}}}}}}}",
            "s.yaml: simulation.sensors.edge.readings.value.t.walk.step: Expected `float` >= 0.0 (got -1)",
        ),
        (
            "simulation: {sensors: {edge: {readings: {count: 1, rate: 1, value: {t: {choice: []}}}}}}",
            "s.yaml: simulation.sensors.edge.readings.value.t.choice: choice needs at least one option (got [])",
        ),
        (
            "simulation: {sensors: {edge: {readings: {count: 1, rate: 1, disorder: soon}}}}",
            "s.yaml: simulation.sensors.edge.readings.disorder: expected a duration such as '10s', '500ms' or '5m', "
            "got 'soon'",
        ),
        (
            "simulation: {wan: {jitter: 1}, sensors: {edge: {readings: {count: 1, rate: 1}}}}",
            "s.yaml: simulation.wan.jitter: unknown field (got 1); remove it or fix its spelling (fields here: jitter_ms)",
        ),
    ],
)
def test_errors_say_what_where_and_the_fix(simulation: str, message: str) -> None:
    with pytest.raises(InvalidSites) as info:
        parse_simulation(_sites(simulation), "s.yaml")
    assert str(info.value) == f"invalid simulation section:\n  {message}"


def test_durations_are_plain_seconds_and_copies_keep_them() -> None:
    sites = _sites(
        """
simulation:
  duration: 2m
  settle: 0
  sensors: {edge: {readings: {count: 1, rate: [1, 2], disorder: 500ms, clock_skew: -1s}}}
"""
    )
    sim = parse_simulation(sites)
    spec = sim.sensors["edge"]["readings"]
    assert [(type(v), v) for v in (sim.duration, sim.settle, sim.warmup, spec.disorder, spec.clock_skew)] == [
        (float, 120.0),
        (float, 0.0),
        (float, 0.0),
        (float, 0.5),
        (float, -1.0),
    ]
    assert orjson.loads(orjson.dumps({"duration": sim.duration})) == {"duration": 120.0}
    reseeded = sim.replace(seed=9)
    assert (reseeded.seed, reseeded.duration, reseeded.sensors) == (9, 120.0, sim.sensors)


def test_devices_are_seeded_and_fill_the_topic() -> None:
    sites = _sites(
        """
simulation:
  sensors:
    edge:
      readings:
        count: 3
        rate: [1, 4]
        key: "m{i}"
        value: {unit: $key, ts: $event_time, temp: {walk: {start: [10, 20], step: 1, min: 0, max: 30}, round: 1},
                door: {bernoulli: 0.5}, kind: {choice: [a, b]}, fixed: {const: 7}, seg: {format: "z/{key}"}}
        disorder: 2s
        clock_skew: -1s
        malformed: 0.2
"""
    )
    spec = parse_simulation(sites).sensors["edge"]["readings"]
    run1 = schedule(devices_of("edge", "readings", spec, "plant/+/temp", seed=5, start=1000.0), until=30)
    run2 = schedule(devices_of("edge", "readings", spec, "plant/+/temp", seed=5, start=1000.0), until=30)
    other = schedule(devices_of("edge", "readings", spec, "plant/+/temp", seed=6, start=1000.0), until=30)
    assert [m.payload for m in run1] == [m.payload for m in run2]
    assert [m.payload for m in run1] != [m.payload for m in other]
    assert [m.offset for m in run1] == sorted(m.offset for m in run1)
    assert {m.topic for m in run1} == {"plant/m0/temp", "plant/m1/temp", "plant/m2/temp"}
    good = [m for m in run1 if m.malformed is None]
    bad = [m for m in run1 if m.malformed is not None]
    assert good
    assert bad
    for m in good:
        value = orjson.loads(m.payload)
        assert value == m.value
        assert value["unit"] == m.key
        assert value["fixed"] == 7
        assert value["seg"] == f"z/{m.key}"
        assert 0 <= value["temp"] <= 30
        assert value["kind"] in ("a", "b")
        assert m.event_time is not None
        assert 1000.0 + m.offset - 2.0 - 1.0 <= m.event_time <= 1000.0 + m.offset - 1.0
    for m in bad:
        if m.malformed == "not-json":
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(m.payload)
        else:
            assert "ts" not in orjson.loads(m.payload)


def test_device_topic() -> None:
    assert device_topic("trucks/7/+/temp", "u1") == "trucks/7/u1/temp"
    assert device_topic("plant/#", "u1") == "plant/u1"
    assert device_topic("plant/all", "u1") == "plant/all"
