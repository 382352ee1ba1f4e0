"""Helpers of the model integration tests: an app that predicts at a gateway, labelled data, Spark's answers."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path
from typing import Any

from hub.models.training import VECTOR, train
from spanedge.loader import load_app
from spanedge.sites import parse_sites
from spanedge.testing import local_plan
from spanedge.wire.batch import decode_batch

from .agentkit import HubObserver

FEATURES = ("rms", "peak", "temp_c")

APP_SOURCE = """
from spanedge import App, agg, global_, sinks

@global_
def to_hub(record: dict) -> bool:
    return True

app = App("plant")
labelled = app.source("labelled", time_field="t")
features = app.source("features", time_field="t")
wear = app.model("wear", algorithm="logistic_regression", features=["rms", "peak", "temp_c"], label="failed",
                 train_on=labelled, min_rows=500)
scored = features.predict(wear, output="p_fail", name="score")
stats = scored.window(name="stats", key="unit", size="10s", aggs={"n": agg.count(), "p_sum": agg.sum_("p_fail")},
                      scope="local")
scored.filter(to_hub, name="scored_at_hub").sink(sinks.memory("scored"), name="scored_out")
stats.filter(to_hub, name="stats_at_hub").sink(sinks.memory("stats"), name="stats_out")
"""


def failed(rms: float, peak: float, temp: float, shift: float, rnd: random.Random) -> float:
    """Whether a machine failed: likelier with more vibration, relative to the machines' usual level ``shift``."""
    margin = 1.5 * rms - 0.8 * peak + 0.05 * (temp - 40) - 1.5 * shift
    return 1.0 if rnd.random() < 1 / (1 + math.exp(-margin)) else 0.0


def labelled(n: int, seed: int, shift: float) -> list[dict[str, float]]:
    """``n`` labelled records, vibration (``rms``) around ``shift``, event times 0, 1, 2, ..."""
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        rms, peak, temp = rnd.gauss(shift, 1.0), rnd.gauss(0.0, 1.0), rnd.gauss(40.0, 5.0)
        label = failed(rms, peak, temp, shift, rnd)
        rows.append({"rms": rms, "peak": peak, "temp_c": temp, "failed": label, "event_time": float(i)})
    return rows


def fit(spark: Any, spec: Any, number: int, shift: float) -> Any:
    """Version ``number`` of ``spec`` trained on Spark on labelled records around ``shift``."""
    rows = labelled(1500, seed=number, shift=shift)
    df = spark.createDataFrame(rows, "rms double, peak double, temp_c double, failed double, event_time double")
    return train(spark, spec, df, app="plant", version=number, reason=f"test {number}")


def spark_p(spark: Any, fitted: Any, records: list[dict[str, Any]]) -> dict[float, float]:
    """Spark's probability of label 1 for each record, by event time."""
    from pyspark.ml.feature import VectorAssembler

    df = spark.createDataFrame(
        [(r["t"], r["rms"], r["peak"], r["temp_c"]) for r in records],
        "t double, " + ", ".join(f"{f} double" for f in FEATURES),
    )
    assembled = VectorAssembler(inputCols=list(FEATURES), outputCol=VECTOR).transform(df)
    return {row["t"]: float(row["probability"][1]) for row in fitted.transform(assembled).collect()}


def records_between(
    t0: float, start: float, stop: float, seed: int, shift: float | None = None
) -> list[dict[str, Any]]:
    """Records to score every 0.25 s from ``t0 + start`` to ``t0 + stop``; with ``shift``, drifted and labelled."""
    rnd = random.Random(seed)
    out, t = [], start
    while t < stop:
        rms, peak, temp = rnd.gauss(0.5 if shift is None else shift, 1.0), rnd.gauss(0.0, 1.0), rnd.gauss(40.0, 5.0)
        record: dict[str, Any] = {"unit": f"m{int(t * 10) % 3}", "t": round(t0 + t, 3), "rms": rms, "peak": peak}
        record["temp_c"] = temp
        if shift is not None:
            record["failed"] = failed(rms, peak, temp, shift, rnd)
        out.append(record)
        t += 0.25
    return out


def setup(tmp_path: Path, hub_url: str, site_url: str, source: str = APP_SOURCE) -> tuple[Any, Any]:
    """The sites (hub ``cloud``, gateway ``truck-7``) and the app (``source``) with its plan."""
    text = f"""
sites:
  cloud: {{tier: hub, broker: "{hub_url}"}}
  truck-7:
    tier: spoke
    broker: "{site_url}"
    streams:
      features: {{topic: "plant/7/features", rate: 50, qos: 1}}
"""
    sites = parse_sites(text)
    app_file = tmp_path / "plant.py"
    app_file.write_text(source)
    app = load_app(app_file)
    plan = dataclasses.replace(local_plan(app, sites), app_source=source)
    return sites, (app, plan)


def scored(observer: HubObserver) -> dict[float, dict[str, Any]]:
    """The records the gateway scored, as the hub broker got them, by event time."""
    out: dict[float, dict[str, Any]] = {}
    for payload in observer._of("/plant/score/"):
        for r in decode_batch(payload)[1]:
            out[r.value["t"]] = r.value
    return out


def windows(observer: HubObserver) -> dict[tuple[str, float], dict[str, Any]]:
    """The gateway's window results, as the hub broker got them, by unit and window start."""
    out: dict[tuple[str, float], dict[str, Any]] = {}
    for payload in observer._of("/plant/stats/"):
        for r in decode_batch(payload)[1]:
            key = (r.value["unit"], r.value["window_start"])
            assert key not in out or out[key] == r.value, f"window {key} emitted twice, differently"
            out[key] = r.value
    return out


def write_labelled(log_dir: Path, rows: list[dict[str, float]], t0: float, first: int = 0) -> None:
    """Write ``rows`` to an app's ingest log as records of stream ``labelled`` from ``truck-7``, as the hub does.

    Their ``seq`` starts at ``first``; the rows become one sealed segment of the log.
    """
    from hub.ingest.log import AppLog
    from spanedge.wire.log_line import LogLine, encode_lines

    lines = [
        LogLine(
            site="truck-7", stream="labelled", seq=first + i, event_time=t0 + r["event_time"], key=None, value=dict(r)
        )
        for i, r in enumerate(rows)
    ]
    log = AppLog(log_dir)
    log.append(encode_lines(lines), latest=lines[-1].event_time, earliest=lines[0].event_time)
    log.flush()
    log.seal()
    log.close()
