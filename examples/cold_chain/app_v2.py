"""Cold chain, a candidate version: app.py with a safe band of 0..12 °C instead of 0..8 °C.

Try it on a file of records beside the current version before rolling it out:
``spanedge preview examples/cold_chain/app_v2.py --input examples/cold_chain/records.jsonl
--compare examples/cold_chain/app.py``.
"""

from dataclasses import dataclass

from spanedge import App, agg, global_, local, sinks


@dataclass
class Reading:
    """One parsed sensor reading."""

    unit: str
    ts: float
    temp_c: float
    door_open: bool


@local(cost=1e-5)
def to_celsius(raw: dict) -> dict:
    """Parse a raw reading and convert Fahrenheit to Celsius."""
    return {
        "unit": str(raw["unit"]),
        "ts": float(raw["ts"]),
        "temp_c": round((float(raw["temp_f"]) - 32.0) * 5.0 / 9.0, 3),
        "door_open": bool(raw.get("door_open", False)),
    }


@local(selectivity=0.999)
def plausible(reading: dict) -> bool:
    """Drop readings outside the sensor's physical range."""
    return -60.0 <= reading["temp_c"] <= 80.0


@global_(selectivity=0.05)
def anomaly(stats: dict) -> bool:
    """Flag a unit whose 10 s mean leaves the safe band of 0..12 °C."""
    return not 0.0 <= stats["mean_c"] <= 12.0


app = App("cold-chain")

readings = app.source("readings", time_field="ts").map(to_celsius).schema(Reading).filter(plausible)
stats = readings.window(
    name="unit_stats",
    key="unit",
    size="10s",
    aggs={"n": agg.count(), "mean_c": agg.mean("temp_c"), "max_c": agg.max("temp_c")},
    scope="local",
    keys=20,
)
stats.sink(sinks.mqtt("cold-chain/unit-stats"), name="local_stats")
stats.filter(anomaly).sink(sinks.mqtt("cold-chain/alerts"), name="fleet_alerts")
