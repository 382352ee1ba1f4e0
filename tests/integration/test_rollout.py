"""Staged rollouts on a real broker, a real hub process and three real agents fed by sensors.

One fleet for the module (two trucks and a van): a v2 that dead-letters every
record is rolled back at its canary, and so is one whose operator raises on
every record, stopped by the operator-error gate alone; a healthy v2 reaches
every site stage by stage, across a hub SIGKILLed while a stage holds; and a v2
that changes a window and dead-letters every record is rolled back with the
window's state kept, so that every window comes out once with exact values.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from hub.api.client import HubClient
from simulate.broker import Mosquitto, free_port, mosquitto_path
from spanedge.errors import InvalidRollout, SpanEdgeError
from spanedge.loader import source_hash
from tests.conftest import missing_part
from tests.integration.hubkit import CLI, api_status, hub_ca, mqtt_client, start_hub
from tests.keys import key_env
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "rollout-token-0123456789abcdef0123456789"
SPOKES = {"t1": "truck", "t2": "truck", "v1": "van"}

pytestmark = pytest.mark.timeout(300)

APP = """
from spanedge import App, agg, local, sinks

@local
def to_c(r):
    {body}

app = App("fleet-temp")
readings = app.source("readings", time_field="ts")
readings.map(to_c, name="to_c").window(
    name="unit_stats", key="unit", size="2s", scope="local", aggs={{{aggs}}}
).sink({sink}, name="stats_out", scope="local")
"""
AGGS = '"n": agg.count(), "peak": agg.max("temp_c")'
STATS_TOPIC = "fleet/stats"
MEMORY = 'sinks.memory("stats")'
PUBLISHED = f'sinks.mqtt("{STATS_TOPIC}")'
V1 = APP.format(body='return {**r, "temp_c": (r["temp_f"] - 32) / 1.8}', aggs=AGGS, sink=MEMORY)
V2_HEALTHY = APP.format(body='return {**r, "temp_c": round((r["temp_f"] - 32) / 1.8, 1)}', aggs=AGGS, sink=MEMORY)
V2_BROKEN = APP.format(body='raise ValueError("v2 cannot read " + str(r["unit"]))', aggs=AGGS, sink=MEMORY)
V2_RAISES = APP.format(  # KeyError on every record
    body='return {**r, "temp_c": (r["temp_k"] - 273.15)}', aggs=AGGS, sink=MEMORY
)
V1_PUBLISHED = APP.format(body='return {**r, "temp_c": (r["temp_f"] - 32) / 1.8}', aggs=AGGS, sink=PUBLISHED)
V2_CHANGED_BROKEN = APP.format(  # another window (one more aggregation) behind a map that always raises
    body='raise ValueError("v2 cannot read " + str(r["unit"]))',
    aggs=AGGS + ', "low": agg.min("temp_c")',
    sink=PUBLISHED,
)
UNITS = [f"{site}-{unit}" for site in SPOKES for unit in ("u0", "u1")]


def sites_yaml(url: str) -> str:
    spokes = "".join(
        f"""
  {name}:
    tier: spoke
    broker: "{url}"
    labels: {{kind: {kind}}}
    streams:
      readings: {{topic: "fleet/{name}/+/temp", rate: 10, qos: 1}}
"""
        for name, kind in SPOKES.items()
    )
    return f'sites:\n  cloud: {{tier: hub, broker: "{url}"}}\n{spokes}'


class Sensors:
    """Publishes a reading per unit and spoke every 0.1 s, stamped with the wall clock, until stopped; keeps them."""

    def __init__(self, url: str) -> None:
        self.client = mqtt_client(url)
        self.sent: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.wait(0.1):
            for site in SPOKES:
                for unit in ("u0", "u1"):
                    reading = {"unit": f"{site}-{unit}", "ts": time.time(), "temp_f": 35.0 + i % 10}
                    self.client.publish(f"fleet/{site}/{unit}/temp", orjson.dumps(reading), qos=1)
                    self.sent.append(reading)
            i += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.client.disconnect()
        self.client.loop_stop()


@dataclass
class Fleet:
    """The broker, the hub process, the agents and the files they use."""

    tmp: Path
    url: str
    port: int
    env: dict[str, str]
    sites_file: Path
    hub: subprocess.Popen[bytes]
    agents: dict[str, subprocess.Popen[bytes]]
    sensors: Sensors | None = None

    @property
    def api(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def client(self) -> HubClient:
        return HubClient(self.api, TOKEN, ca_file=hub_ca(self.tmp / "hub"), timeout=30)

    def start_hub(self) -> None:
        log = (self.tmp / "hub.log").open("ab")
        self.hub = start_hub(self.sites_file, self.tmp / "hub", self.port, self.env, output=log)
        wait_for(lambda: api_status(f"{self.api}/healthz", hub_ca(self.tmp / "hub")) == 200, 90, "the hub to answer")

    def app_file(self, name: str, source: str) -> Path:
        path = self.tmp / name
        path.write_text(source)
        return path

    def rollout(self) -> dict[str, Any]:
        return self.client().rollout("fleet-temp")

    def wait_status(self, *statuses: str, timeout: float = 120) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def reached() -> bool:
            try:
                seen.update(self.rollout())
            except SpanEdgeError:
                return False
            return seen["status"] in statuses

        wait_for(reached, timeout, f"the rollout to be {' or '.join(statuses)} (last: {seen.get('reason')})")
        return seen

    def agent_log(self, site: str) -> str:
        return (self.tmp / f"agent-{site}.log").read_text()


def _agent(tmp: Path, site: str, sites_file: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [*CLI, "agent", "--site", site, "--sites", str(sites_file), "--state-dir", str(tmp / f"agent-{site}")]
    command += ["--heartbeat-interval", "0.5", "--checkpoint-interval", "0.5", "--plan-wait", "0"]
    log = (tmp / f"agent-{site}.log").open("ab")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    tmp = tmp_path_factory.mktemp("rollout")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    env = {**base, "SPANEDGE_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", **key_env(tmp), "PYTHONPATH": str(ROOT)}
    with Mosquitto() as broker:
        sites_file = tmp / "sites.yaml"
        sites_file.write_text(sites_yaml(broker.url))
        fleet = Fleet(tmp, broker.url, free_port(), env, sites_file, None, {})  # type: ignore[arg-type]
        fleet.start_hub()
        fleet.agents = {site: _agent(tmp, site, sites_file, env) for site in SPOKES}
        sensors = fleet.sensors = Sensors(broker.url)
        try:
            fleet.client().deploy(fleet.app_file("app.py", V1), sites_file)
            wait_for(lambda: all(runs_app(fleet, s) for s in SPOKES), 90, "every agent to run v1")
            yield fleet
        finally:
            sensors.close()
            for proc in [*fleet.agents.values(), fleet.hub]:
                _stop(proc)


def runs_app(fleet: Fleet, site: str) -> bool:
    """Whether the agent of ``site`` reported running the app, as the hub's registry shows it."""
    return any(e.get("site") == site and "fleet-temp" in (e.get("apps") or []) for e in fleet.client().sites())


def on(view: dict[str, Any], version: str) -> list[str]:
    """The sites a rollout view says run ``version``: given it, and reporting it."""
    return sorted(s for s, v in view["sites"].items() if v["version"] == version and v["running"])


def test_a_version_that_dead_letters_everything_is_rolled_back_at_its_canary(fleet: Fleet) -> None:
    v1, v2 = source_hash(V1), source_hash(V2_BROKEN)
    staged = {"rollout": "kind=truck:1, *", "gates": "dead_letter_rate<0.01", "hold": "4s"}
    fleet.client().deploy(fleet.app_file("app_v2_broken.py", V2_BROKEN), fleet.sites_file, rollout=staged)
    started = fleet.rollout()
    (canary,) = started["stages"][0]["sites"]
    assert canary in ("t1", "t2")
    done = fleet.wait_status("rolled_back")
    failed = [s for s in done["steps"] if s["status"] == "failed"]
    assert len(failed) == 1
    assert failed[0]["stage"] == 0
    assert failed[0]["sites"] == [canary]
    (gate,) = failed[0]["gates"]
    assert gate["gate"] == "dead_letter_rate<0.01"
    assert not gate["passed"]
    assert gate["value"] == 1.0
    assert f"dead_letter_rate 100% at {canary}" in failed[0]["reason"]
    assert done["versions"][v2] == []
    assert on(done, v1) == sorted(SPOKES)
    assert fleet.client().app("fleet-temp")["source_sha256"] == v1
    history = fleet.client().placement("fleet-temp")["history"]
    assert any("failed: dead_letter_rate 100%" in h["reason"] for h in history)


def test_a_version_whose_operator_raises_is_stopped_by_the_error_gate_and_rolled_back(fleet: Fleet) -> None:
    v1, v2 = source_hash(V1), source_hash(V2_RAISES)
    staged = {"rollout": "kind=truck:1, *", "gates": "dead_letter_rate<=1, errors<5", "hold": "4s"}
    fleet.client().deploy(fleet.app_file("app_v2_raises.py", V2_RAISES), fleet.sites_file, rollout=staged)
    (canary,) = fleet.rollout()["stages"][0]["sites"]
    done = fleet.wait_status("rolled_back")
    (failed,) = [s for s in done["steps"] if s["status"] == "failed"]
    assert (failed["stage"], failed["sites"]) == (0, [canary])
    rate, errors = failed["gates"]
    assert (rate["gate"], rate["passed"], rate["value"], rate["note"]) == ("dead_letter_rate<=1", True, 1.0, "")
    assert (errors["gate"], errors["passed"], errors["site"]) == ("errors<5", False, canary)
    assert errors["value"] > 60  # two units at 10 readings/s each, every one raising
    assert f"/min at {canary} (limit < 5/min)" in failed["reason"]
    assert failed["reason"].startswith("stage 1/2 kind=truck:1 failed: errors ")
    assert on(done, v1) == sorted(SPOKES)
    assert done["versions"][v2] == []
    assert fleet.client().app("fleet-temp")["source_sha256"] == v1


def test_a_rollout_that_cannot_mix_or_starts_twice_is_refused(fleet: Fleet) -> None:
    with pytest.raises(InvalidRollout, match="no site has kind=bus"):
        fleet.client().deploy(
            fleet.app_file("app_v2.py", V2_HEALTHY), fleet.sites_file, rollout={"rollout": "kind=bus:1, *"}
        )
    answer = subprocess.run(
        [*CLI, "rollout", "rollback", "fleet-temp", "--hub-url", fleet.api, "--hub-ca", str(hub_ca(fleet.tmp / "hub"))],
        cwd=ROOT,
        env=fleet.env,
        capture_output=True,
        timeout=60,
    )
    assert answer.returncode != 0
    assert b"no rollout in progress" in answer.stdout + answer.stderr


def test_a_healthy_version_reaches_every_site_across_a_hub_killed_mid_rollout(fleet: Fleet) -> None:
    v2 = source_hash(V2_HEALTHY)
    command = [*CLI, "deploy", str(fleet.app_file("app_v2.py", V2_HEALTHY)), "--sites", str(fleet.sites_file)]
    command += [
        "--rollout",
        "kind=truck:1, kind=truck, *",
        "--gate",
        "dead_letter_rate<0.01, watermark_lag<30s",
        "--hold",
        "6s",
    ]
    command += ["--hub-url", fleet.api, "--hub-ca", str(hub_ca(fleet.tmp / "hub"))]
    deployed = subprocess.run(command, cwd=ROOT, env=fleet.env, capture_output=True, timeout=120)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert b"spanedge rollout status fleet-temp" in deployed.stdout
    holding = fleet.wait_status("holding")
    assert holding["stage"] == 0
    (canary,) = holding["versions"][v2]
    fleet.hub.send_signal(signal.SIGKILL)
    fleet.hub.wait(30)
    fleet.start_hub()
    resumed = fleet.rollout()
    assert any("the hub restarted" in s["reason"] for s in resumed["steps"])
    assert canary in resumed["versions"][v2]
    done = fleet.wait_status("passed", "rolled_back", timeout=180)
    assert done["status"] == "passed", done["reason"]
    passed_stages = [s["stage"] for s in done["steps"] if s["status"] == "passed"]
    assert passed_stages == [0, 1, 2]
    assert done["versions"][v2] == sorted(SPOKES)
    assert on(done, v2) == sorted(SPOKES)
    assert fleet.client().app("fleet-temp")["source_sha256"] == v2
    # v2 changed the map before the window: each site kept v1's window state while on trial, and drops it now
    dropped = "is no longer on trial here (its rollout passed): dropped the state kept to return to version"
    for site in SPOKES:
        wait_for(lambda s=site: dropped in fleet.agent_log(s), 60, lambda s=site: fleet.agent_log(s)[-3000:])
    status = subprocess.run(
        [*CLI, "rollout", "status", "fleet-temp", "--hub-url", fleet.api, "--hub-ca", str(hub_ca(fleet.tmp / "hub"))],
        cwd=ROOT,
        env=fleet.env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert b"passed at stage 3/3 *" in status.stdout


class Results:
    """Collects the window results the agents publish on :data:`STATS_TOPIC` (QoS 1)."""

    def __init__(self, url: str) -> None:
        self.got: list[dict[str, Any]] = []
        self._subscribed = threading.Event()
        self.client = mqtt_client(url)
        self.client.on_message = lambda _c, _u, msg: self.got.append(orjson.loads(msg.payload))
        self.client.on_subscribe = lambda *_: self._subscribed.set()
        self.client.subscribe(STATS_TOPIC, 1)
        assert self._subscribed.wait(30), "the results collector did not subscribe"

    def after(self, t: float) -> bool:
        """Whether every unit has a window result starting after ``t``."""
        return all(any(r["unit"] == unit and r["window_start"] > t for r in list(self.got)) for unit in UNITS)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def window_reference(sent: list[dict[str, Any]], size: float = 2.0) -> dict[tuple[str, float], dict[str, Any]]:
    """v1's window results for every reading sent: per unit and window start, the count and the peak."""
    out: dict[tuple[str, float], dict[str, Any]] = {}
    for r in sent:
        temp_c = (r["temp_f"] - 32) / 1.8
        w = out.setdefault((r["unit"], (r["ts"] // size) * size), {"n": 0, "peak": temp_c})  # as the window does
        w["n"] += 1
        w["peak"] = max(w["peak"], temp_c)
    return out


def test_a_changed_window_rolled_back_at_its_canary_resumes_from_its_state_and_loses_no_window(fleet: Fleet) -> None:
    assert fleet.sensors is not None
    results = Results(fleet.url)
    try:
        fleet.client().deploy(fleet.app_file("app_published.py", V1_PUBLISHED), fleet.sites_file)
        started = time.time()
        wait_for(lambda: results.after(started), 90, "every agent to publish results of v1")
        observed_from = time.time()  # every window starting from here on is v1's alone
        staged = {"rollout": "kind=truck:1, *", "gates": "dead_letter_rate<0.01", "hold": "4s"}
        fleet.client().deploy(fleet.app_file("app_v2_window.py", V2_CHANGED_BROKEN), fleet.sites_file, rollout=staged)
        (canary,) = fleet.rollout()["stages"][0]["sites"]
        done = fleet.wait_status("rolled_back")
        (failed,) = [s for s in done["steps"] if s["status"] == "failed"]
        assert f"dead_letter_rate 100% at {canary}" in failed["reason"]
        rolled_back_at = time.time()
        resumed = f"windows unit_stats@{canary} resume from their state at the upgrade and the "
        wait_for(lambda: resumed in fleet.agent_log(canary), 60, lambda: fleet.agent_log(canary)[-3000:])
        wait_for(lambda: results.after(rolled_back_at + 4), 60, "a window after the rollback from every unit")
        got = list(results.got)
    finally:
        results.close()
    seen: dict[tuple[str, float], dict[str, Any]] = {}
    for r in got:
        ident = (r["unit"], r["window_start"])
        assert ident not in seen, f"window {ident} came out twice"
        assert "low" not in r  # v2's window had no record to emit a result of
        seen[ident] = {"n": r["n"], "peak": r["peak"]}
    want = window_reference(list(fleet.sensors.sent))
    for unit in UNITS:
        last = max(start for u, start in seen if u == unit)
        # every window of the unit from the first one opened under v1 alone to the last one out
        span = sorted((u, t) for u, t in want if u == unit and observed_from <= t <= last)
        assert span[-1][1] > rolled_back_at  # the span covers the upgrade and the rollback
        assert {k: seen.get(k) for k in span} == {k: want[k] for k in span}, unit
