"""Helpers of the hub integration tests: the hub process and its HTTPS API, plans built by hand, MQTT publishers, references."""

from __future__ import annotations

import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

import orjson

from spanedge.app import App
from spanedge.operators import Kind
from spanedge.plan import Assignment, Flow, Plan, SolverInfo, Totals, replica_id
from spanedge.sites import Broker, Sites, parse_sites
from spanedge.wire.batch import Record, encode_batch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CLI = [sys.executable, "-c", "from spanedge.cli import main; main()"]


# -- the hub process, reached over HTTPS as a user would --------------------------------


def hub_ca(state_dir: Path) -> Path:
    """The CA certificate that ``spanedge hub --state-dir state_dir`` makes at its first start and clients trust."""
    return state_dir / "ca" / "ca.pem"


def start_hub(
    sites_file: Path,
    state_dir: Path,
    port: int,
    env: dict[str, str],
    *options: str,
    output: IO[bytes] | int | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``spanedge hub --no-spark`` on ``port`` (HTTPS, its CA in ``state_dir``), its output to ``output`` (a pipe)."""
    command = [*CLI, "hub", "--sites", str(sites_file), "--no-spark", "--port", str(port)]
    command += ["--state-dir", str(state_dir), *options]
    out = subprocess.PIPE if output is None else output
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def api_status(url: str, ca_file: Path, token: str | None = None) -> int:
    """The HTTP status of a GET of ``url``, verified against ``ca_file``; 0 if the hub (or its CA) is not there yet."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        context = ssl.create_default_context(cafile=ca_file)
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLCertVerificationError):
            raise  # a certificate that does not verify is a failure, not a hub still starting
        return 0
    except OSError:  # refused, or the CA certificate not written yet
        return 0


def sites_for(broker_url: str, path: Path | None = None) -> Sites:
    """The cold-chain sites with every broker pointing at ``broker_url``."""
    text = (path or EXAMPLES / "cold_chain" / "sites.yaml").read_text()
    return parse_sites(text.replace("mqtt://localhost:1883", broker_url))


def make_plan(app: App, sites: Sites, at_hub: set[str], singletons: set[str], version: int = 1) -> Plan:
    """A plan with one replica per source site of every non-singleton operator.

    Operators in ``at_hub`` run at the hub; the others at their source site.
    """
    graph = app.graph()
    hub = sites.hubs[0].name
    assignments: list[Assignment] = []
    replicas: dict[str, list[Assignment]] = {}
    for name in graph.order:
        op = graph.op(name)
        if name in singletons:
            groups: list[str | None] = [None]
        else:
            groups = [s.name for s in sites.sources_of(op.stream)] if op.kind is Kind.SOURCE else None  # type: ignore[assignment]
            if groups is None:
                groups = sorted({a.group for up in op.inputs for a in replicas[up] if a.group})  # type: ignore[misc]
        replicas[name] = []
        for group in groups:
            site = hub if name in at_hub else (group or hub)
            a = Assignment(replica_id(name, group), name, group, site, "test plan")
            replicas[name].append(a)
            assignments.append(a)
    flows: list[Flow] = []
    for u, v in graph.edges:
        for dst in replicas[v]:
            for src in replicas[u]:
                if dst.group is None or src.group == dst.group:
                    flows.append(Flow(src.replica, dst.replica, 1.0, 100.0))
    return Plan(
        app=app.name,
        version=version,
        hub=hub,
        assignments=tuple(assignments),
        flows=tuple(flows),
        totals=Totals(0.0, 0.0, 0.0, 0.0),
        solver=SolverInfo("test", "ok", 0.0),
    )


def mqtt_client(broker_url: str, client_id: str = "") -> Any:
    """A connected paho client with its network loop running."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    host, port = broker_url.split("//")[1].split(":")
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
    client.max_inflight_messages_set(100)
    client.connect(host, int(port))
    client.loop_start()
    return client


class Publisher:
    """Publishes record batches as an edge agent would (QoS 1)."""

    def __init__(self, broker_url: str, app: str) -> None:
        self.client = mqtt_client(broker_url)
        self.app = app

    def send(self, records: list[Record], batch: int = 50) -> None:
        from spanedge import topics

        infos = []
        for i in range(0, len(records), batch):
            chunk = records[i : i + batch]
            first = chunk[0]
            assert all((r.site, r.stream) == (first.site, first.stream) for r in chunk)
            topic = topics.data(self.app, first.stream, first.site)
            infos.append(self.client.publish(topic, encode_batch(self.app, chunk), qos=1))
        for info in infos:
            info.wait_for_publish(timeout=60)
            assert info.is_published(), "the broker did not acknowledge a batch"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Collector:
    """Collects the JSON payloads published on some topics."""

    def __init__(self, broker_url: str, *topic_filters: str) -> None:
        self.messages: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self.client = mqtt_client(broker_url)
        self.client.on_message = self._on_message
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *args: subscribed.set()
        self.client.subscribe([(topic, 1) for topic in topic_filters])
        assert subscribed.wait(30), "the broker did not acknowledge the subscription"

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        with self._lock:
            self.messages.setdefault(message.topic, []).append(orjson.loads(message.payload))

    def get(self, topic: str) -> list[Any]:
        with self._lock:
            return list(self.messages.get(topic, []))

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def broker_of(url: str) -> Broker:
    host, port = url.split("//")[1].split(":")
    return Broker(scheme="mqtt", host=host, port=int(port))


# -- the cold-chain example: data as the agents would send it, and the reference ----------

T0 = 1_700_000_000.0
COLD_CHAIN_SITES = ("truck-7", "truck-9", "warehouse-north")


def cold_chain_readings(seconds: int = 60, step: float = 0.5, seed: int = 7) -> dict[str, list[dict[str, Any]]]:
    """Raw sensor readings per site: two units per site, some out of the safe band, some implausible."""
    import random

    rng = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {}
    for s, site in enumerate(COLD_CHAIN_SITES):
        rows = []
        units = [f"{site}-u{i}" for i in range(2)]
        for i in range(int(seconds / step)):
            t = T0 + i * step
            for u, unit in enumerate(units):
                base_c = 4.0 if (s + u) % 2 == 0 else (4.0 if (i // 20) % 2 == 0 else 11.0)
                temp_c = base_c + rng.uniform(-1.5, 1.5)
                temp_f = temp_c * 9.0 / 5.0 + 32.0
                if rng.random() < 0.02:
                    temp_f = 500.0
                rows.append({"unit": unit, "ts": t, "temp_f": round(temp_f, 2), "door_open": rng.random() < 0.1})
        out[site] = rows
    return out


def to_celsius(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "unit": str(raw["unit"]),
        "ts": float(raw["ts"]),
        "temp_c": round((float(raw["temp_f"]) - 32.0) * 5.0 / 9.0, 3),
        "door_open": bool(raw.get("door_open", False)),
    }


def unit_stats(readings: list[dict[str, Any]], size: float = 10.0) -> list[dict[str, Any]]:
    """The reference of the cold chain's 10 s windows, in plain Python."""
    groups: dict[tuple[str, float], list[float]] = {}
    for raw in readings:
        r = to_celsius(raw)
        if not -60.0 <= r["temp_c"] <= 80.0:
            continue
        start = (r["ts"] // size) * size
        groups.setdefault((r["unit"], start), []).append(r["temp_c"])
    return [
        {
            "unit": unit,
            "window_start": start,
            "window_end": start + size,
            "n": len(temps),
            "mean_c": sum(temps) / len(temps),
            "max_c": max(temps),
        }
        for (unit, start), temps in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]


def is_anomaly(stats: dict[str, Any]) -> bool:
    return not 0.0 <= stats["mean_c"] <= 8.0


def raw_records(site: str, rows: list[dict[str, Any]], first_seq: int = 0) -> list[Record]:
    """Raw readings as the agent forwards them (stream = the source stream)."""
    return [Record(site, "readings", first_seq + i, r["ts"], None, r) for i, r in enumerate(rows)]


def stats_records(site: str, stats: list[dict[str, Any]], first_seq: int = 0) -> list[Record]:
    """Window results as the agent publishes them (stream = the window operator)."""
    return [
        Record(site, "unit_stats", first_seq + i, s["window_end"] - 0.001, s["unit"], s) for i, s in enumerate(stats)
    ]


def canon(stats: dict[str, Any]) -> tuple[Any, ...]:
    """A comparable form of a window result (floats rounded)."""
    return (
        stats["unit"],
        round(float(stats["window_start"]), 3),
        round(float(stats["window_end"]), 3),
        int(stats["n"]),
        round(float(stats["mean_c"]), 6),
        round(float(stats["max_c"]), 6),
    )


# -- the hub as a process ---------------------------------------------------------------------


def ingested(metrics: str, app: str, site: str, stream: str) -> int:
    """The records of ``site``'s ``stream`` in ``app``'s log, as the hub's ``GET /metrics`` text ``metrics`` counts them."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"app": app, "site": site, "stream": stream}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "spanedge_ingest_stream_records_total" and sample.labels == wanted:
                return int(sample.value)
    return 0


class HubProcess:
    """``spanedge hub`` in a subprocess, its output in a file, and its REST API."""

    def __init__(self, sites_file: Path, state_dir: Path, port: int, env: dict[str, str], *args: str) -> None:
        import subprocess
        import sys

        self.state_dir = state_dir
        self.url = f"https://127.0.0.1:{port}"
        self.ca_file = state_dir / "ca" / "ca.pem"  # made by the hub at its first start
        self.token = env["SPANEDGE_TOKEN"]
        self.log = state_dir.parent / f"{state_dir.name}-{port}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-c", "from spanedge.cli import main; main()", "hub", "--sites", str(sites_file)]
        command += ["--port", str(port), "--state-dir", str(state_dir), *args]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)

    @property
    def output(self) -> str:
        """Everything the hub printed so far."""
        return self.log.read_text(errors="replace")

    def get(self, path: str) -> tuple[int, bytes]:
        """``GET path`` with the admin token, verified against the hub's CA: the status (0: no answer) and the body."""
        import ssl
        import urllib.error
        import urllib.request

        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token}"})
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
        except OSError:  # the hub has not made its CA yet
            return 0, b""
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as answer:
                return int(answer.status), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except OSError:
            return 0, b""

    def ingesting(self) -> bool:
        """Whether the hub answers ``/healthz`` with its ingest subscribed to the broker."""
        status, body = self.get("/healthz")
        return status == 200 and bool(orjson.loads(body).get("ingest_connected"))

    def ingested(self, app: str, site: str, stream: str) -> int:
        """The records of ``site``'s ``stream`` the ingest wrote to ``app``'s log since the process started."""
        status, body = self.get("/metrics")
        return ingested(body.decode(), app, site, stream) if status == 200 else 0

    def wait(self, timeout: float = 120) -> int:
        """Wait for the process to end; its exit status."""
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the hub."""
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM the hub (SIGKILL if it does not end within 60 s)."""
        import subprocess

        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
