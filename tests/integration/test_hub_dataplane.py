"""The data plane as a process: SIGKILL it mid-stream, restart it, nothing lost or repeated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spanedge.loader import load_app
from spanedge.sites import parse_sites
from spanedge.wire.batch import Record
from tests.integration.dataplanekit import SITES, Dataplane, read_parquet
from tests.integration.hubkit import T0, Publisher, make_plan
from tests.polling import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

APP = '''
from spanedge import App, agg, sinks


def tag(reading: dict) -> dict:
    """Add the temperature in Fahrenheit."""
    return {**reading, "temp_f": reading["temp"] * 9 / 5 + 32}


app = App("killtest")
readings = app.source("readings", time_field="ts")
readings.map(tag).sink(sinks.file("OUT/tagged"), name="tagged_out")
readings.window(key="unit", size="5s", aggs={"n": agg.count(), "total": agg.sum("temp")}, name="w").sink(
    sinks.file("OUT/windows"), name="windows_out"
)
'''

#: ``spanedge hub --conf`` settings of each state store the hub's windows are checked with
STATE_STORES = {
    "default": [],
    "rocksdb": [
        "--conf",
        "spark.sql.streaming.stateStore.providerClass="
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    ],
}


@pytest.mark.parametrize("state_store", list(STATE_STORES))
def test_sigkill_mid_stream_loses_and_repeats_nothing(mosquitto: Any, tmp_path: Path, state_store: str) -> None:
    out = tmp_path / "out"
    app_file = tmp_path / "app.py"
    app_file.write_text(APP.replace("OUT", str(out)))
    sites_file = tmp_path / "sites.yaml"
    sites_file.write_text(SITES.replace("BROKER", mosquitto.url))
    app = load_app(app_file)
    sites = parse_sites(sites_file.read_text())
    hub_ops = {"tag", "tagged_out", "w", "windows_out"}
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(make_plan(app, sites, at_hub=hub_ops, singletons=hub_ops).to_json())
    args = [
        "--sites", str(sites_file), "--state-dir", str(tmp_path / "state"), "--app", str(app_file),
        "--plan", str(plan_file), "--trigger", "250 milliseconds", "--client-id", "hub-kill-test",
        "--log-level", "WARNING", *STATE_STORES[state_store],
    ]  # fmt: skip
    dataplane = Dataplane(args, tmp_path / "dataplane.log")
    units = ("u0", "u1", "u2")
    records = [
        Record(
            "s1", "readings", i, T0 + i * 0.1, units[i % 3], {"unit": units[i % 3], "ts": T0 + i * 0.1, "temp": i % 17}
        )
        for i in range(3000)
    ]  # 300 s of event time
    flush = Record("s1", "readings", 3000, T0 + 400, "u0", {"unit": "u0", "ts": T0 + 400, "temp": 0})
    publisher = Publisher(mosquitto.url, app.name)
    try:
        dataplane.start()
        wait_for(dataplane.ready.is_set, 240, "the data plane to start (see dataplane.log)")
        publisher.send(records[:1000], batch=50)
        wait_for(lambda: len(read_parquet(out / "tagged")) >= 200, 240, "the first results")
        publisher.send(records[1000:2000], batch=50)
        dataplane.kill()  # mid-stream: Spark has not caught up with what was just sent
        publisher.send(records[2000:2500], batch=50)  # queued by the broker for the hub's session
        dataplane.start()
        wait_for(dataplane.ready.is_set, 240, "the data plane to restart (see dataplane.log)")
        publisher.send(records[1500:2500], batch=50)  # an agent resending unacknowledged batches
        publisher.send([*records[2500:], flush], batch=50)
        wait_for(lambda: len(read_parquet(out / "tagged")) >= len(records) + 1, 240, "every tagged record")
        expected_windows: dict[tuple[str, float], tuple[int, float]] = {}
        for r in records:
            key = (r.value["unit"], (r.event_time // 5) * 5)
            n, total = expected_windows.get(key, (0, 0.0))
            expected_windows[key] = (n + 1, total + r.value["temp"])
        wait_for(lambda: len(read_parquet(out / "windows")) >= len(expected_windows), 240, "every window")
        assert dataplane.alive()
        assert dataplane.terminate() == 0, "the stop signal reached Spark's JVM too: the data plane still ends cleanly"
    finally:
        publisher.close()
        dataplane.terminate()
        print((tmp_path / "dataplane.log").read_text()[-5000:])  # shown if the test fails
    import orjson

    tagged = [orjson.loads(r["value"]) for r in read_parquet(out / "tagged")]
    seen = sorted((v["unit"], v["ts"]) for v in tagged)
    assert len(seen) == len(set(seen)), "a record reached the sink twice"
    assert len(seen) == len(records) + 1
    assert all(v["temp_f"] == v["temp"] * 9 / 5 + 32 for v in tagged)
    windows = [orjson.loads(r["value"]) for r in read_parquet(out / "windows")]
    got = {(w["unit"], w["window_start"]): (w["n"], w["total"]) for w in windows}
    assert len(got) == len(windows), "a window reached the sink twice"
    assert got == expected_windows
