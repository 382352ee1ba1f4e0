"""The data plane as a process: SIGKILL it mid-stream, restart it, nothing lost or repeated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hub.engine.publish_progress import PublishProgress
from spanedge.loader import load_app
from spanedge.mqtt import HUB_SINK
from spanedge.sites import parse_sites
from spanedge.wire.batch import Record
from tests.integration.hubkit import ROOT, T0, Collector, Publisher, make_plan
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

SITES = """
sites:
  cloud: {tier: hub, broker: "BROKER"}
  s1:
    tier: spoke
    broker: "BROKER"
    streams:
      readings: {topic: "r/#", rate: 100}
"""


class Dataplane:
    """``python -m hub.dataplane`` in its own process group."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self.ready = threading.Event()
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.ready.clear()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hub.dataplane", *self.args],
            stdout=subprocess.PIPE,
            stderr=self.log.open("a"),
            text=True,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._watch, args=(self.proc,), daemon=True).start()

    def _watch(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "dataplane ready":
                self.ready.set()

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self) -> int | None:
        """SIGTERM to the process group (Spark's JVM too), SIGKILL after a minute; the exit code (None: not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(timeout=30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def read_parquet(folder: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    files = sorted(folder.glob("*-batch-*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


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


PUBLISHING_APP = """
from spanedge import App, sinks

app = App("killpub")
app.source("readings", time_field="ts").sink(sinks.mqtt("killpub/readings"), name="readings_out")
"""


def acknowledged(state: Path) -> int:
    """How many messages of micro-batch 0 the broker has acknowledged to the hub's MQTT sink (its progress file)."""
    for path in state.glob("checkpoints/killpub/readings_out-*/sink.published"):
        latest = PublishProgress(path).latest()
        if latest is not None and latest[0] == 0:
            return latest[2]
    return 0


def test_sigkill_mid_publish_repeats_at_most_the_messages_in_flight(mosquitto: Any, tmp_path: Path) -> None:
    """The hub dies while its MQTT sink publishes a micro-batch of 12,000 results: the replay skips what the broker had."""
    app_file = tmp_path / "app.py"
    app_file.write_text(PUBLISHING_APP)
    sites_file = tmp_path / "sites.yaml"
    sites_file.write_text(SITES.replace("BROKER", mosquitto.url))
    app = load_app(app_file)
    plan_file = tmp_path / "plan.json"
    hub_ops = {"readings_out"}
    plan_file.write_text(
        make_plan(app, parse_sites(sites_file.read_text()), at_hub=hub_ops, singletons=hub_ops).to_json()
    )
    args = [
        "--sites", str(sites_file), "--state-dir", str(tmp_path / "state"), "--app", str(app_file),
        "--plan", str(plan_file), "--trigger", "10 seconds", "--client-id", "hub-publish-kill-test",
    ]  # fmt: skip
    log = tmp_path / "dataplane.log"
    dataplane = Dataplane(args, log)
    records = [
        Record("s1", "readings", i, T0 + i * 0.01, "u0", {"unit": f"u{i % 3}", "ts": T0 + i * 0.01, "temp": i % 17})
        for i in range(12_000)
    ]
    # killed while its sink publishes the one micro-batch: the records go in one MQTT message, which the ingest
    # appends in one piece, so no trigger splits them; the kill follows the sink's own progress, as a subscriber
    # lags the broker's acknowledgements (under load, by the whole batch, which was committed before the kill)
    collector = Collector(mosquitto.url, "killpub/readings")
    publisher = Publisher(mosquitto.url, app.name)
    state = tmp_path / "state"
    try:
        dataplane.start()
        wait_for(dataplane.ready.is_set, 240, "the data plane to start (see dataplane.log)")
        publisher.send(records, batch=len(records))  # one message, one append, one micro-batch
        wait_for(lambda: acknowledged(state) >= 2_000, 240, "the sink's first 2,000 acknowledgements", poll=0.005)
        dataplane.kill()
        assert acknowledged(state) < len(records), "the sink had published the whole batch before the kill"
        assert not dataplane.alive()
        dataplane.start()
        wait_for(dataplane.ready.is_set, 240, "the data plane to restart (see dataplane.log)")
        every = {r.event_time for r in records}
        wait_for(lambda: {v["ts"] for v in collector.get("killpub/readings")} >= every, 240, "every result")
        wait_for(lambda: "not published again" in log.read_text(), 60, "the replay's log line (see dataplane.log)")
    finally:
        publisher.close()
        collector.close()
        dataplane.terminate()
        print(log.read_text()[-5000:])  # shown if the test fails
    got = Counter(v["ts"] for v in collector.get("killpub/readings"))
    assert set(got) == every
    repeated = sum(got.values()) - len(got)
    # only what the broker had not acknowledged when the hub died: at most the sink client's in-flight window
    assert repeated <= HUB_SINK.max_inflight < 6_000, repeated
