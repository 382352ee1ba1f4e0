"""Helpers of the edge agent integration tests: sites, plans, sensors, a hub observer, references."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from spanedge import signing
from spanedge.loader import load_app
from spanedge.plan import Plan
from spanedge.signing import PlanSigningKey
from spanedge.sites import Sites, parse_sites
from spanedge.testing import local_plan
from spanedge.wire.batch import Record, decode_batch
from tests.keys import KEY
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
APP_FILE = ROOT / "examples" / "cold_chain" / "app.py"
_ids = itertools.count()


def write_setup(tmp: Path, hub_url: str, site_url: str) -> tuple[Path, Path, Sites]:
    """Write sites.yaml (hub ``cloud``, spoke ``truck-7``) and a cold-chain plan.json; return their paths."""
    text = f"""
sites:
  cloud: {{tier: hub, broker: "{hub_url}"}}
  truck-7:
    tier: spoke
    broker: "{site_url}"
    streams:
      readings: {{topic: "trucks/7/+/temp", rate: 100, qos: 1}}
"""
    sites_path = tmp / "sites.yaml"
    sites_path.write_text(text)
    sites = parse_sites(text)
    plan = dataclasses.replace(local_plan(load_app(APP_FILE), sites), app_source=APP_FILE.read_text())
    plan_path = tmp / "plan.json"
    plan_path.write_text(plan.to_json())
    return sites_path, plan_path, sites


def signed_plan(
    plan: Plan, source: str, version: int, key: PlanSigningKey = KEY, site: str = "truck-7", apps: bool = True
) -> bytes:
    """The hub's signed plan message for ``site``: ``plan`` with the app ``source`` (no apps if not ``apps``)."""
    entry = {
        "app": plan.app,
        "plan": dataclasses.replace(plan, app_source="").to_dict(),
        "source": source,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
    }
    body = {"site": site, "version": version, "issued_at": time.time(), "apps": [entry] if apps else []}
    return signing.sign_plan(body, key)


def client(port: int, persistent: bool = False) -> mqtt.Client:
    """A connected paho client with its network thread running."""
    c = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=f"test-{os.getpid()}-{next(_ids)}",
        clean_session=not persistent,
        protocol=mqtt.MQTTv311,
    )
    c.reconnect_delay_set(0.2, 1)  # type: ignore[arg-type]
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


class HubObserver:
    """Subscribes to everything on the hub broker (persistent session) and keeps it."""

    def __init__(self, port: int) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = client(port, persistent=True)
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, *_: c.subscribe("spanedge/v1/#", 1)
        self.client.on_subscribe = lambda *_: self._subscribed.set()
        self.client.subscribe("spanedge/v1/#", 1)
        assert self._subscribed.wait(30), "observer did not subscribe"

    def _on_message(self, _c: Any, _u: Any, msg: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.messages.append((msg.topic, bytes(msg.payload)))

    def _of(self, part: str) -> list[bytes]:
        with self._lock:
            return [p for t, p in self.messages if part in t]

    def batches(self, stream: str = "unit_stats") -> list[Record]:
        """Every record received on ``stream`` (duplicates included)."""
        out: list[Record] = []
        for payload in self._of(f"/cold-chain/{stream}/"):
            out.extend(decode_batch(payload)[1])
        return out

    def deduped(self, stream: str = "unit_stats") -> dict[int, Record]:
        """Records by seq after dropping duplicates; a seq with two different contents fails."""
        seen: dict[int, Record] = {}
        for r in self.batches(stream):
            if r.seq in seen:
                assert seen[r.seq] == r, f"seq {r.seq} carried two different records"
            seen[r.seq] = r
        return seen

    def dlq(self) -> list[dict[str, Any]]:
        """Dead letters (and late records) published by the agent."""
        return [orjson.loads(p) for p in self._of("/cold-chain/dlq/")]

    def heartbeats(self) -> list[dict[str, Any]]:
        """Heartbeats published by the agent."""
        return [orjson.loads(p) for p in self._of("/control/truck-7/heartbeat")]

    def close(self) -> None:
        """Disconnect."""
        self.client.disconnect()
        self.client.loop_stop()


class Sensor:
    """Publishes readings (QoS 1) to the site broker and waits for the broker's acknowledgements."""

    def __init__(self, port: int) -> None:
        self.client = client(port)
        self.published: list[dict[str, Any]] = []

    def send(self, readings: list[Any], unit_topic: bool = True) -> None:
        """Publish and wait until the broker acknowledged every message."""
        infos = []
        for r in readings:
            unit = r.get("unit", "x") if isinstance(r, dict) else "x"
            payload = orjson.dumps(r) if isinstance(r, dict) else r
            infos.append(self.client.publish(f"trucks/7/{unit}/temp", payload, qos=1))
            if isinstance(r, dict):
                self.published.append(r)
        for info in infos:
            info.wait_for_publish(10)

    def close(self) -> None:
        """Disconnect."""
        self.client.disconnect()
        self.client.loop_stop()


def readings(t0: float, n: int, units: int = 3, step: float = 0.1, start: int = 0) -> list[dict[str, Any]]:
    """``n`` readings from ``units`` units, ``step`` seconds apart from ``t0``."""
    return [
        {"unit": f"u{i % units}", "ts": round(t0 + i * step, 3), "temp_f": 30.0 + (i * 7) % 20}
        for i in range(start, start + n)
    ]


def reference(records: list[dict[str, Any]], closed_before: float) -> dict[tuple[str, float], dict[str, Any]]:
    """The cold chain's 10 s window results, in plain Python, for windows ending by ``closed_before``."""
    groups: dict[tuple[str, float], list[float]] = {}
    for r in records:
        temp = round((float(r["temp_f"]) - 32.0) * 5.0 / 9.0, 3)
        if not -60.0 <= temp <= 80.0:
            continue
        start = (r["ts"] // 10) * 10.0
        groups.setdefault((r["unit"], start), []).append(temp)
    return {
        key: {"n": len(v), "mean_c": sum(v) / len(v), "max_c": max(v)}
        for key, v in groups.items()
        if key[1] + 10.0 <= closed_before
    }


def results(records: dict[int, Record] | list[Record]) -> dict[tuple[str, float], dict[str, Any]]:
    """Window results received at the hub, keyed like :func:`reference`."""
    values = records.values() if isinstance(records, dict) else records
    out = {}
    for r in values:
        v = r.value
        key = (v["unit"], v["window_start"])
        assert key not in out, f"window {key} emitted twice"
        out[key] = {"n": v["n"], "mean_c": v["mean_c"], "max_c": v["max_c"]}
    return out


def same(got: dict[tuple[str, float], dict[str, Any]], want: dict[tuple[str, float], dict[str, Any]]) -> bool:
    """True if both hold the same windows with the same results (means to 1e-6)."""
    if got.keys() != want.keys():
        return False
    return all(
        got[k]["n"] == want[k]["n"]
        and abs(got[k]["mean_c"] - want[k]["mean_c"]) < 1e-6
        and got[k]["max_c"] == want[k]["max_c"]
        for k in want
    )


class AgentProcess:
    """``spanedge agent`` as a subprocess, logging to a file."""

    def __init__(self, tmp: Path, sites: Path, plan: Path, *extra: str) -> None:
        self.tmp = tmp
        self.args = [
            sys.executable,
            "-c",
            "from spanedge.cli import main; main()",
            "agent",
            "--site",
            "truck-7",
            "--sites",
            str(sites),
            "--plan",
            str(plan),
            "--state-dir",
            str(tmp / "state"),
            "--heartbeat-interval",
            "1",
            "--checkpoint-interval",
            "0.2",
            *extra,
        ]
        self.log = tmp / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        """Start and wait until the agent subscribed to the site broker."""
        before = self.log.read_text().count("subscribed to trucks") if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.args, stderr=log, stdout=log, cwd=self.tmp)
        self.starts += 1
        wait_for(
            lambda: self.log.read_text().count("subscribed to trucks") > before,
            20,
            f"the agent to subscribe (log: {self.log})",
        )

    def kill(self) -> None:
        """SIGKILL the agent."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        """SIGTERM the agent and return its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)
