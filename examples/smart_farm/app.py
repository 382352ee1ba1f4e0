"""Smart farm: soil probes in the fields, a barn gateway nearby, a cloud far away.

Parsing, cleaning and the valve logic are not pinned, and the per-probe
windows are ``local`` (one per field station, at that station or another
spoke): where each runs is the placement's choice. The field stations are too small to run them at
their rate, so the plan offloads them to the nearest spoke with room (the
barn, a few milliseconds away) instead of shipping raw readings over the
farm's thin uplink to the cloud; when the barn's link degrades, a re-plan
moves them to the machine shed. Irrigation valves are driven from the
per-probe means: the farm's irrigation controller is one Modbus TCP device on
the farm LAN, with a coil per probe, which every spoke of the farm reaches
(``devices: {valves: ...}`` in sites.yaml), so the valve commands are written
wherever the placement runs them, the same app at every site. The cloud keeps a farm-wide view of the dry spots per zone, and only dry
readings need to cross the uplink for it.
"""

from dataclasses import dataclass

from spanedge import App, agg, sinks


@dataclass
class Probe:
    """One soil-moisture reading."""

    probe: str
    zone: str
    ts: float
    moisture: float
    temp_c: float


def parse(raw: dict) -> dict:
    """Keep the fields the dataflow needs, with their types."""
    return {
        "probe": str(raw["probe"]),
        "zone": str(raw["zone"]),
        "ts": float(raw["ts"]),
        "moisture": float(raw["moisture"]),
        "temp_c": float(raw["temp_c"]),
    }


def plausible(reading: dict) -> bool:
    """Drop readings of a probe that is out of the ground or shorted."""
    return 0.0 < reading["moisture"] < 100.0


def valve_command(stats: dict) -> dict:
    """Open a zone's valve when a probe's mean moisture falls below 25 %."""
    zone = stats["probe"].split("/", 1)[0]  # probes are named <zone>/<id>
    return {"probe": stats["probe"], "zone": zone, "open": stats["moisture"] < 25.0, "at": stats["window_end"]}


#: The irrigation controller's coils: east probes e00..e39 on coils 0..39, west w00..w39 on 40..79.
VALVES = {
    f"{zone}/{side}{i:02d}": {"table": "coil", "address": base + i}
    for zone, side, base in (("east", "e", 0), ("west", "w", 40))
    for i in range(40)
}


def too_dry(reading: dict) -> bool:
    """Keep the readings of soil drier than 15 %: rare, and all the cloud needs to see."""
    return reading["moisture"] < 15.0


app = App("smart-farm")

readings = (
    app.source("probes", time_field="ts")
    .map(parse, cost=4e-4)
    .schema(Probe)
    .filter(plausible, selectivity=0.97, cost=5e-5)
)
minute = readings.window(
    name="probe_means",
    key="probe",
    size="10s",
    aggs={"n": agg.count(), "moisture": agg.mean("moisture"), "temp_c": agg.mean("temp_c")},
    scope="local",
    keys=40,
    cost=1e-4,
)
valves = minute.map(valve_command, name="valves", cost=1e-5)
valves.sink(sinks.modbus("device:valves", points=VALVES, key="probe", value="open"), name="valve_coils")
valves.sink(sinks.mqtt("farm/valves"), name="valve_bus")  # the commands, for the farm's dashboard
(
    readings.filter(too_dry, selectivity=0.05)
    .window(
        name="dry_spots",
        key="zone",
        size="30s",
        aggs={"readings": agg.count(), "driest": agg.min("moisture")},
        scope="global",
    )
    .sink(sinks.mqtt("farm/dry-spots"), name="farm_dashboard")
)
