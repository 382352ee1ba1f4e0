"""The data plane as a process: SIGKILL it while its MQTT sink publishes, restart it, repeat at most what was in flight."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hub.engine.publish_progress import PublishProgress
from spanedge.loader import load_app
from spanedge.mqtt import HUB_SINK
from spanedge.sites import parse_sites
from spanedge.wire.batch import Record
from tests.integration.dataplanekit import SITES, Dataplane
from tests.integration.hubkit import T0, Collector, Publisher, make_plan
from tests.polling import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


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
