r"""Many sites: simulated sites against a running hub (control plane, ingest and Spark).

    .venv/bin/python bench/hub_sites.py [--sites 200] [--seconds 60] [--heartbeat-every 3] \
        [--data-every 2] [--batch 10]

One process simulates ``--sites`` spokes over one MQTT connection: each sends
a heartbeat every ``--heartbeat-every`` seconds (with measured latencies to
the hub and to two neighbours, and its stream's rate) and a batch of
``--batch`` records every ``--data-every`` seconds, phases spread over the
interval. The hub runs as its own process (``spanedge hub``, Spark in local
mode) with an app whose source is at every site and whose pass-through
``@global_`` operator writes every record to Parquet at the hub. Measured:

* ``GET /sites`` and ``GET /apps/fleet/placement``: response times
  (p50/p99/max) while the load runs, and how many sites ``/sites`` shows
  alive;
* a re-plan over all sites: ``POST /apps`` with the same app (placement
  with the current measurements, the engine keeps its unchanged queries,
  plans signed and published to every site), p50 and max of three;
* ingest: records sent against distinct ``(site, seq)`` at the hub's sink
  (lost) and rows beyond them (duplicated);
* the hub's CPU (its process tree) and the heartbeats/s and records/s it
  took, from which the limit is estimated.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

APP = """
from spanedge import App, global_, sinks


@global_
def archive_row(reading: dict) -> dict:
    return reading


app = App("fleet")
app.source("readings", time_field="ts").map(archive_row).sink(sinks.file(OUT), name="archive")
"""

GOALS = {"GET": "< 100 ms", "replan": "< 1 s", "ingest": "0 lost, 0 duplicated"}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def site_names(n: int) -> list[str]:
    return [f"site-{i:03d}" for i in range(n)]


def sites_yaml(url: str, names: list[str]) -> str:
    lines = ["sites:", f'  cloud: {{tier: hub, broker: "{url}", cpu: 8}}']
    for i, name in enumerate(names):
        lines.append(f"  {name}:")
        lines.append("    tier: spoke")
        lines.append(f'    broker: "{url}"')
        lines.append("    cpu: 1")
        lines.append(f'    streams: {{readings: {{topic: "s/{i}/+", rate: 5, record_bytes: 80}}}}')
    lines.append("default_link: {latency_ms: 40, bandwidth_mbps: 10}")
    return "\n".join(lines) + "\n"


def timed_get(url: str, token: str) -> tuple[float, Any]:
    import orjson

    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as answer:
        body = answer.read()
    return time.perf_counter() - start, orjson.loads(body)


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its children."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


class Sites:
    """The simulated sites: heartbeats and data batches over one paho connection."""

    def __init__(self, url: str, names: list[str], args: argparse.Namespace) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        host, port = url.split("//")[1].split(":")
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="bench-sites")
        self.client.max_inflight_messages_set(200)
        self.client.max_queued_messages_set(0)
        self.client.connect(host, int(port))
        self.client.loop_start()
        self.names = names
        self.args = args
        self.seq = dict.fromkeys(names, 0)
        self.sent_records = 0
        self.heartbeats = 0
        self.stop = threading.Event()
        self.pending: list[Any] = []

    def heartbeat(self, i: int, name: str) -> None:
        """Publish site ``name``'s heartbeat, with latencies that vary a little from one to the next."""
        import orjson

        from spanedge import topics

        rng = (i * 7919 + int(time.time())) % 17
        peers = {"cloud": 40.0 + i % 30 + rng * 0.5}
        for j in (1, 2):
            peers[self.names[(i + j) % len(self.names)]] = 20.0 + (i + j) % 25
        latency = {p: {"rtt_ms": 2 * v, "p95_ms": 2.4 * v, "samples": 5} for p, v in peers.items()}
        rate = self.args.batch / self.args.data_every
        beat = {
            "site": name,
            "ts": time.time(),
            "apps": ["fleet"],
            "operators": {f"readings@{name}": {"rate_in": rate, "rate_out": rate}},
            "watermark_lag_s": 0.1,
            "outbox": {"fleet": 0},
            "dlq": 0,
            "late": 0,
            "overload_dropped": 0,
            "cpu_percent": 3.0,
            "rss_bytes": 40_000_000,
            "latency": latency,
            "clock_offset_ms": 0.0,
        }
        self.client.publish(topics.control(name, "heartbeat"), orjson.dumps(beat), qos=1)
        self.heartbeats += 1

    def data(self, name: str) -> None:
        """Publish a batch of records of site ``name`` (QoS 1), with the next seqs."""
        from spanedge import topics
        from spanedge.envelope import Record, encode_batch

        now = time.time()
        recs = []
        for _ in range(self.args.batch):
            seq = self.seq[name]
            recs.append(Record(name, "readings", seq, now, name, {"ts": now, "v": float(seq % 50)}))
            self.seq[name] = seq + 1
        info = self.client.publish(topics.data("fleet", "readings", name), encode_batch("fleet", recs), qos=1)
        self.pending.append(info)
        self.sent_records += len(recs)

    def run(self, data: bool) -> None:
        """Send until :attr:`stop`, each site on its own phase."""
        n = len(self.names)
        hb_every, data_every = self.args.heartbeat_every, self.args.data_every
        start = time.monotonic()
        next_hb = [start + hb_every * i / n for i in range(n)]
        next_data = [start + data_every * i / n for i in range(n)]
        while not self.stop.is_set():
            now = time.monotonic()
            for i, name in enumerate(self.names):
                if now >= next_hb[i]:
                    self.heartbeat(i, name)
                    next_hb[i] += hb_every
                if data and now >= next_data[i]:
                    self.data(name)
                    next_data[i] += data_every
            self.stop.wait(0.01)

    def close(self) -> None:
        """Wait for every data batch's acknowledgement, then disconnect."""
        for info in self.pending:
            info.wait_for_publish(timeout=60)
        self.client.disconnect()
        self.client.loop_stop()


def sink_rows(out: Path) -> list[tuple[str, int]]:
    import pyarrow.parquet as pq

    rows: list[tuple[str, int]] = []
    for path in sorted(out.glob("*.parquet")):
        table = pq.read_table(path, columns=["site", "seq"])
        rows.extend(zip(table["site"].to_pylist(), table["seq"].to_pylist(), strict=True))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured stretch under load")
    parser.add_argument("--heartbeat-every", type=float, default=3.0)
    parser.add_argument("--data-every", type=float, default=2.0)
    parser.add_argument("--batch", type=int, default=10, help="records per data batch")
    args = parser.parse_args()

    from hub.client import HubClient
    from simulate.broker import Mosquitto, free_port
    from spanedge.signing import PlanSigningKey

    names = site_names(args.sites)
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    with Mosquitto(name="bench-sites") as broker, tempfile.TemporaryDirectory(prefix="spanedge-bench-sites-") as tmp:
        work = Path(tmp)
        sites_file = work / "sites.yaml"
        sites_file.write_text(sites_yaml(broker.url, names))
        out = work / "archive"
        app_file = work / "fleet.py"
        app_file.write_text(APP.replace("OUT", repr(str(out))))
        key = work / "plan-key.pem"
        key.write_bytes(PlanSigningKey.generate().to_pem())
        key.chmod(0o600)
        token = secrets.token_hex(24)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
        env |= {"SPANEDGE_TOKEN": token, "SPANEDGE_PLAN_KEY_FILE": str(key), "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-c", "from spanedge.cli import main; main()", "hub", "--sites", str(sites_file)]
        command += ["--port", str(port), "--state-dir", str(work / "state")]
        log_path = work / "hub.log"
        hub = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
        client = HubClient(url, token, timeout=300)
        sim = Sites(broker.url, names, args)
        figures: dict[str, Any] = {}
        try:
            deadline = time.monotonic() + 240
            while True:
                try:
                    client.health(timeout=5)
                    break
                except Exception:
                    if hub.poll() is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            warm = threading.Thread(target=sim.run, args=(False,), daemon=True)
            warm.start()  # heartbeats first, so the first plan sees measurements
            time.sleep(args.heartbeat_every + 1)
            start = time.perf_counter()
            client.deploy(app_file, sites_file)
            figures["first deploy s"] = time.perf_counter() - start
            sim.stop.set()
            warm.join()
            sim.stop.clear()

            loader = threading.Thread(target=sim.run, args=(True,), daemon=True)
            cpu0, t0 = tree_cpu(hub.pid), time.monotonic()
            beats0 = sim.heartbeats
            loader.start()
            get_sites: list[float] = []
            get_placement: list[float] = []
            alive: list[int] = []
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                took, body = timed_get(f"{url}/sites", token)
                get_sites.append(took)
                alive.append(sum(1 for s in body["sites"] if s.get("alive")))
                took, _ = timed_get(f"{url}/apps/fleet/placement", token)
                get_placement.append(took)
                time.sleep(0.25)
            replans = []
            for _ in range(3):
                start = time.perf_counter()
                client.deploy(app_file, sites_file)
                replans.append(time.perf_counter() - start)
            sim.stop.set()
            loader.join()
            cpu1, t1 = tree_cpu(hub.pid), time.monotonic()
            figures["heartbeats/s"] = (sim.heartbeats - beats0) / (t1 - t0)
            figures["records/s"] = sim.sent_records / (t1 - t0)
            figures["hub cpu"] = (cpu1 - cpu0) / (t1 - t0)
            sim.close()
            sent = sim.sent_records
            deadline = time.monotonic() + 180
            rows = sink_rows(out)
            while len(set(rows)) < sent and time.monotonic() < deadline:
                time.sleep(1.0)
                rows = sink_rows(out)
            time.sleep(3.0)  # anything arriving late would be a duplicate
            rows = sink_rows(out)
            distinct = set(rows)
            expected = {(name, s) for name in names for s in range(sim.seq[name])}
            figures["lost"] = len(expected - distinct)
            figures["duplicated"] = len(rows) - len(distinct)
            figures["sent"] = sent
            figures["get_sites"] = get_sites
            figures["get_placement"] = get_placement
            figures["alive"] = alive
            figures["replans"] = replans
        finally:
            sim.stop.set()
            hub.terminate()
            try:
                hub.wait(timeout=60)
            except subprocess.TimeoutExpired:
                hub.kill()
                hub.wait(timeout=30)
            if "lost" not in figures:
                print(log_path.read_text()[-4000:])

    ms = 1000.0
    print(f"\nhub with {args.sites} simulated sites, {args.seconds:.0f} s under load ({load} at the start)")
    print(
        f"load: a heartbeat per site every {args.heartbeat_every:g} s ({figures['heartbeats/s']:.0f}/s), "
        f"{args.batch} records per site every {args.data_every:g} s ({figures['records/s']:.0f} records/s)"
    )
    print(f"{'measure':<34}{'p50':>10}{'p99':>10}{'max':>10}   goal")
    for label, values in (
        ("GET /sites", figures["get_sites"]),
        ("GET /apps/fleet/placement", figures["get_placement"]),
    ):
        print(
            f"{label:<34}{percentile(values, 0.5) * ms:>8.1f}ms{percentile(values, 0.99) * ms:>8.1f}ms"
            f"{max(values) * ms:>8.1f}ms   {GOALS['GET']}  ({len(values)} requests)"
        )
    r = figures["replans"]
    print(
        f"{'re-plan (POST /apps, same app)':<34}{statistics.median(r) * ms:>8.0f}ms{'':>10}{max(r) * ms:>8.0f}ms"
        f"   {GOALS['replan']}"
    )
    print(f"first deploy (plan, start the Spark query, publish): {figures['first deploy s']:.1f} s")
    print(
        f"sites alive in GET /sites: min {min(figures['alive'])}, max {max(figures['alive'])} of {args.sites}"
        f"; ingest: {figures['sent']} records sent, {figures['lost']} lost, {figures['duplicated']} duplicated"
        f"   goal {GOALS['ingest']}"
    )
    print(f"hub process tree CPU: {100 * figures['hub cpu']:.0f}% of one core (control plane, ingest, Spark)")


if __name__ == "__main__":
    main()
