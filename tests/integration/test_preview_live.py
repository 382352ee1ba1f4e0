"""``spanedge preview --site --for``: a site's live input read from a real Mosquitto, subscribing only.

A sensor publishes known cold-chain readings to truck-7's topics (and one to truck-9's) while the preview
runs as the command would, in its own process; the report must equal an offline preview of the file it saved,
and a watcher subscribed to ``#`` must see nothing on any topic but the sensors'.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from tests.conftest import EXAMPLES, ROOT
from tests.integration.agentkit import Sensor, client
from tests.polling import wait_for

APP = EXAMPLES / "cold_chain" / "app.py"
APP_V2 = EXAMPLES / "cold_chain" / "app_v2.py"
#: Six readings of truck-7: two windows of t7-a, one of t7-b (10.5 °C: an alert of app.py, not of app_v2.py),
#: and one without a temperature, a dead letter of to_celsius.
READINGS = [
    {"unit": "t7-a", "ts": 1700000001.0, "temp_f": 38.3},
    {"unit": "t7-b", "ts": 1700000002.0, "temp_f": 50.0},
    {"unit": "t7-a", "ts": 1700000004.0, "temp_f": 39.2},
    {"unit": "t7-b", "ts": 1700000006.0, "temp_f": 52.0},
    {"unit": "t7-c", "ts": 1700000007.0},
    {"unit": "t7-a", "ts": 1700000012.0, "temp_f": 40.1},
]


class Watcher:
    """Subscribes to ``#`` on the broker and keeps the topic of every message."""

    def __init__(self, port: int) -> None:
        self.topics: list[str] = []
        self._lock = threading.Lock()
        subscribed = threading.Event()
        self.client = client(port)
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.subscribe("#", 1)
        assert subscribed.wait(30), "the watcher did not subscribe to #"

    def _on_message(self, _c: Any, _u: Any, msg: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.topics.append(msg.topic)

    def seen(self) -> list[str]:
        with self._lock:
            return list(self.topics)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Preview:
    """``spanedge preview`` in its own process, its standard error read line by line as it comes."""

    def __init__(self, *args: str | Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("SPANEDGE_HUB_URL", None)
        command = [sys.executable, "-c", "from spanedge.cli import main; main()", "preview", *map(str, args)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.errors: list[str] = []
        self.out: list[str] = []
        assert self.proc.stderr is not None
        assert self.proc.stdout is not None
        self._readers = [
            threading.Thread(target=self.errors.extend, args=(self.proc.stderr,), daemon=True),
            threading.Thread(target=self.out.extend, args=(self.proc.stdout,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def said(self, text: str) -> bool:
        return any(text in line for line in list(self.errors))

    def finish(self) -> tuple[int, str]:
        code = self.proc.wait(timeout=180)
        for reader in self._readers:
            reader.join(30)
        return code, "".join(self.out)


def write_sites(tmp: Path, port: int) -> Path:
    broker = f"mqtt://127.0.0.1:{port}"
    path = tmp / "sites.yaml"
    path.write_text(
        f"""
sites:
  cloud: {{tier: hub, broker: "{broker}"}}
  truck-7:
    tier: spoke
    broker: "{broker}"
    streams:
      readings: {{topic: "trucks/7/+/temp", rate: 10, qos: 1}}
  truck-9:
    tier: spoke
    broker: "{broker}"
    streams:
      readings: {{topic: "trucks/9/+/temp", rate: 10, qos: 1}}
"""
    )
    return path


def offline(*args: str | Path) -> dict[str, Any]:
    from click.testing import CliRunner

    from spanedge.cli import cli

    result = CliRunner().invoke(cli, ["preview", *map(str, args), "--json", "--limit", "0"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.output)
    return doc


def without_cpu_and_input(doc: dict[str, Any]) -> dict[str, Any]:
    """A run's report without what differs between runs over the same records: CPU times and the input's name."""
    return {k: v for k, v in doc.items() if k not in ("cpu_seconds", "cpu_per_record_s", "input")}


def test_a_live_preview_reads_the_sites_topics_and_publishes_nothing(mosquitto: Any, tmp_path: Path) -> None:
    sites = write_sites(tmp_path, mosquitto.port)
    saved = tmp_path / "captured.jsonl"
    watcher = Watcher(mosquitto.port)
    sensor = Sensor(mosquitto.port)
    other = client(mosquitto.port)
    try:
        preview = Preview(
            APP_V2, "--site", "truck-7", "--for", "10m", "--sites", sites, "--compare", APP,
            "--save", saved, "--max-lines", len(READINGS), "--json", "--limit", "0",
        )  # fmt: skip
        wait_for(lambda: preview.said("reading site truck-7") or preview.proc.poll() is not None, 120, "the reading")
        assert preview.proc.poll() is None, preview.errors
        other.publish("trucks/9/t9-a/temp", json.dumps(READINGS[0]), qos=1).wait_for_publish(30)
        sensor.send([b"not json"])
        sensor.send(READINGS)
        code, out = preview.finish()
        assert code == 0, preview.errors
        other.publish("trucks/7/sentinel/temp", b"{}", qos=1).wait_for_publish(30)
        wait_for(lambda: "trucks/7/sentinel/temp" in watcher.seen(), 30, "the sentinel at the watcher")
    finally:
        other.disconnect()
        other.loop_stop()
        sensor.close()
        watcher.close()
    # the preview put nothing on the broker: every message the watcher saw is one a sensor sent
    sent = {"trucks/9/t9-a/temp", "trucks/7/x/temp", "trucks/7/sentinel/temp"}
    sent |= {f"trucks/7/{r['unit']}/temp" for r in READINGS}
    assert set(watcher.seen()) <= sent, watcher.seen()
    assert preview.said("stopped reading site truck-7 after"), preview.errors
    assert preview.said(f"{len(READINGS)} records were read (--max-lines)"), preview.errors
    assert preview.said("skipped 1 message of site truck-7: not a JSON object"), preview.errors
    # the saved file holds truck-7's readings only, in the --input format
    lines = [json.loads(line) for line in saved.read_text().splitlines()]
    assert lines == [{"stream": "readings", "site": "truck-7", "value": r} for r in READINGS]
    live = json.loads(out)
    again = offline(APP_V2, "--input", saved, "--compare", APP)
    for side in ("baseline", "candidate"):
        assert without_cpu_and_input(live[side]) == without_cpu_and_input(again[side])
        assert live[side]["records"] == len(READINGS)
        assert live[side]["cpu_seconds"] > 0
    assert live["differences"] == again["differences"]
    # app.py alerts on t7-b's mean of 10.5 °C, app_v2.py does not
    (difference,) = live["differences"]
    assert difference["sink"] == "fleet_alerts"
    assert [d["value"]["unit"] for d in difference["only_in_baseline"]] == ["t7-b"]
    ops = {op["name"]: op for op in live["candidate"]["operators"]}
    assert (ops["readings"]["in"], ops["to_celsius"]["dead_letters"]) == (len(READINGS), 1)


def test_a_live_preview_runs_for_its_time_and_stops(mosquitto: Any, tmp_path: Path) -> None:
    sites = write_sites(tmp_path, mosquitto.port)
    preview = Preview(APP, "--site", "truck-9", "--for", "1s", "--sites", sites, "--json")
    code, out = preview.finish()
    assert code == 0, preview.errors
    assert preview.said("reading site truck-9"), preview.errors
    doc = json.loads(out)
    assert doc["records"] == 0
    assert doc["input"].startswith("site truck-9 (live, ")


def test_an_unreachable_broker_is_one_line_naming_the_site_and_the_fix(tmp_path: Path) -> None:
    from simulate.broker import free_port

    sites = write_sites(tmp_path, free_port())
    preview = Preview(APP, "--site", "truck-7", "--for", "5s", "--sites", sites)
    code, _ = preview.finish()
    assert code == 2
    (line,) = preview.errors
    assert line.startswith("error: cannot reach broker mqtt://127.0.0.1:"), line
    assert "of site truck-7" in line
    assert "check broker: of the site in sites.yaml" in line
