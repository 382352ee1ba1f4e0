"""Traffic: road sensors at intersections report passing vehicles.

At the edge, detections are validated and averaged per road segment every
30 s; at the hub, segments are rated for congestion and counted per district
every minute, city-wide.
"""

from dataclasses import dataclass

from spanedge import App, agg, global_, local, sinks


@dataclass
class Detection:
    """One vehicle passing a loop detector."""

    segment: str
    district: str
    ts: float
    speed_kmh: float


@local(cost=1e-5)
def parse(raw: dict) -> dict:
    """Keep the fields the dataflow needs, with their types."""
    return {
        "segment": str(raw["segment"]),
        "district": str(raw["district"]),
        "ts": float(raw["ts"]),
        "speed_kmh": float(raw["speed_kmh"]),
    }


@local(selectivity=0.98)
def valid(det: dict) -> bool:
    """Drop detector glitches."""
    return 0.0 < det["speed_kmh"] < 250.0


@global_
def rate_congestion(stats: dict) -> dict:
    """Label a segment's 30 s window by its mean speed."""
    speed = stats["mean_kmh"]
    level = "jam" if speed < 15 else "slow" if speed < 35 else "free"
    return {**stats, "district": stats["segment"].split("/")[0], "congested": 1.0 if level != "free" else 0.0}


app = App("traffic")

segments = (
    app.source("detections", time_field="ts")
    .map(parse)
    .schema(Detection)
    .filter(valid)
    .window(
        name="segment_speed",
        key="segment",
        size="30s",
        aggs={"vehicles": agg.count(), "mean_kmh": agg.mean("speed_kmh"), "min_kmh": agg.min("speed_kmh")},
        scope="local",
        keys=30,
    )
)
segments.sink(sinks.mqtt("traffic/segments"), name="signal_controllers")
(
    segments.map(rate_congestion)
    .schema(
        "segment STRING, district STRING, window_start DOUBLE, window_end DOUBLE, vehicles DOUBLE, mean_kmh DOUBLE, min_kmh DOUBLE, congested DOUBLE"
    )
    .window(
        name="district_congestion",
        key="district",
        size="60s",
        aggs={"segments": agg.count(), "congested": agg.sum("congested"), "mean_kmh": agg.mean("mean_kmh")},
        scope="global",
        keys=10,
    )
    .sink(sinks.mqtt("traffic/city"), name="city_dashboard")
)
