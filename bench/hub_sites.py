r"""Many sites: simulated sites against a running hub (control plane, ingest and Spark).

    .venv/bin/python bench/hub_sites.py [--sites 200] [--seconds 60] [--heartbeat-every 3] \
        [--data-every 2] [--batch 10] [--ramp 3,1,0.3,0.1,0.05,0.025] [--ramp-seconds 15]

One process simulates ``--sites`` spokes over one MQTT connection: each sends
a heartbeat every ``--heartbeat-every`` seconds (with measured latencies to
the hub and to two neighbours, and its stream's rate) and a batch of
``--batch`` records every ``--data-every`` seconds, phases spread over the
interval. The hub runs as its own process (``spanedge hub``, Spark in local
mode) with an app whose source is at every site and whose pass-through
``@global_`` operator writes every record to Parquet at the hub. Measured:

* ``GET /sites`` and ``GET /apps/fleet/placement``: response times
  (p50/p99/max) while the load runs, next to ``GET /healthz`` in the same
  run (the floor: a route that does no work, under the same load), and how
  many sites ``/sites`` shows alive;
* a re-plan over all sites: ``POST /apps`` with the same app (placement
  with the current measurements, the engine keeps its unchanged queries,
  the record persisted, plans signed and published to the sites whose part
  changed), p50 and max of ``--replans``, timed around the request alone
  and inside the hub (its log line); ``spanedge deploy`` also parses the
  sites file before it posts, which is not the hub's time;
* a drift re-plan (``Coordinator.replan``, from the hub's check every 5 s;
  the hub runs with ``--min-replan-interval 5``): every site's measured
  latency to the hub is tripled, then restored, ``--drift`` times; the time
  each re-plan took is read from the hub's log;
* ingest: records sent against distinct ``(site, seq)`` at the hub's sink
  (lost) and rows beyond them (duplicated);
* the hub's CPU (its process tree) and the heartbeats/s and records/s it
  took;
* the limit: heartbeats are then sent ever more often (``--ramp``, seconds
  between a site's heartbeats, data batches unchanged), each rate for
  ``--ramp-seconds``, while ``GET /sites`` is read every half second. The
  status is current at a rate while every site stays alive and no heartbeat
  age exceeds the interval by more than a second; the highest such rate,
  times the default interval, is the number of sites the hub keeps current.
  The search stops at the first rate where the status goes stale, or where
  the broker acknowledged fewer heartbeats than asked for (then the load
  generator, not the hub, is the limit, and the figure is a lower bound).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import ssl
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

GOALS = {"GET": "< 100 ms", "snapshot": "<= 250 ms", "replan": "< 1 s", "ingest": "0 lost, 0 duplicated"}


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


def timed_get(url: str, token: str, context: ssl.SSLContext) -> tuple[float, Any]:
    """Seconds a GET of ``url`` over HTTPS took (a new TLS connection, as ``spanedge status`` makes), and its answer."""
    import orjson

    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30, context=context) as answer:
        body = answer.read()
    return time.perf_counter() - start, orjson.loads(body)


def timed_snapshot(url: str, token: str, context: ssl.SSLContext) -> float:
    """Seconds from opening ``/dashboard/events`` to the end of its first event (the snapshot a page draws first)."""
    request = urllib.request.Request(f"{url}/dashboard/events", headers={"Authorization": f"Bearer {token}"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30, context=context) as answer:
        for line in answer:
            if line.startswith(b"data:"):
                return time.perf_counter() - start
    msg = "the dashboard's event stream ended before its first snapshot"
    raise RuntimeError(msg)


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


def heartbeat(names: list[str], i: int, rate: float, hub_latency_factor: float = 1.0) -> dict[str, Any]:
    """Site ``names[i]``'s heartbeat: its stream's ``rate``, and latencies that vary a little from one to the next.

    Each site measures its link to the hub (scaled by ``hub_latency_factor``) and to its next two neighbours.
    """
    name = names[i]
    rng = (i * 7919 + int(time.time())) % 17
    peers = {"cloud": (40.0 + i % 30 + rng * 0.5) * hub_latency_factor}
    for j in (1, 2):
        peers[names[(i + j) % len(names)]] = 20.0 + (i + j) % 25
    latency = {p: {"rtt_ms": 2 * v, "p95_ms": 2.4 * v, "samples": 5} for p, v in peers.items()}
    return {
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


class Sites:
    """The simulated sites: data batches and heartbeats, each over its own paho connection.

    Two connections, so that a flood of heartbeats (each QoS 1 message holds one
    of paho's 65,535 message ids until acknowledged) never keeps a data batch
    from being queued; :attr:`acked_heartbeats` counts the broker's acknowledgements.
    """

    def __init__(self, url: str, names: list[str], args: argparse.Namespace) -> None:
        host, port = url.split("//")[1].split(":")
        self.client = self._connect("bench-sites-data", host, int(port))
        self.beats = self._connect("bench-sites-beats", host, int(port))
        self.beats.on_publish = self._acked
        self.names = names
        self.args = args
        self.seq = dict.fromkeys(names, 0)
        self.sent_records = 0
        self.heartbeats = 0
        self.acked_heartbeats = 0
        self.stop = threading.Event()
        self.pending: list[Any] = []
        self.hub_latency_factor = 1.0  # the drift phase scales every site's latency to the hub

    @staticmethod
    def _connect(client_id: str, host: str, port: int) -> Any:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
        client.max_inflight_messages_set(200)
        client.max_queued_messages_set(0)
        client.connect(host, port)
        client.loop_start()
        return client

    def _acked(self, *_: Any) -> None:
        self.acked_heartbeats += 1  # paho's network thread is the only writer

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until the broker acknowledged every heartbeat sent; False if it did not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.acked_heartbeats < self.heartbeats and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.acked_heartbeats >= self.heartbeats

    def heartbeat(self, i: int, name: str) -> None:
        """Publish site ``name``'s heartbeat (:func:`heartbeat`)."""
        import orjson

        from spanedge import topics

        beat = heartbeat(self.names, i, self.args.batch / self.args.data_every, self.hub_latency_factor)
        self.beats.publish(topics.control(name, "heartbeat"), orjson.dumps(beat), qos=1)
        self.heartbeats += 1

    def data(self, name: str) -> None:
        """Publish a batch of records of site ``name`` (QoS 1), with the next seqs."""
        from spanedge import topics
        from spanedge.wire.batch import Record, encode_batch

        now = time.time()
        recs = []
        for _ in range(self.args.batch):
            seq = self.seq[name]
            recs.append(Record(name, "readings", seq, now, name, {"ts": now, "v": float(seq % 50)}))
            self.seq[name] = seq + 1
        info = self.client.publish(topics.data("fleet", "readings", name), encode_batch("fleet", recs), qos=1)
        self.pending.append(info)
        self.sent_records += len(recs)

    def run(self, data: bool, heartbeat_every: float | None = None) -> None:
        """Send until :attr:`stop`, each site on its own phase (a heartbeat every ``heartbeat_every`` s)."""
        n = len(self.names)
        hb_every, data_every = heartbeat_every or self.args.heartbeat_every, self.args.data_every
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
        for client in (self.client, self.beats):
            client.disconnect()
            client.loop_stop()


def ramp_stage(
    sim: Sites, pid: int, url: str, token: str, context: ssl.SSLContext, every: float, seconds: float
) -> dict[str, Any]:
    """Send heartbeats every ``every`` s (data unchanged) for ``seconds``; how current ``GET /sites`` stays.

    Returns the heartbeats/s sent and acknowledged by the broker, the oldest heartbeat
    age and fewest sites alive that ``GET /sites`` showed, its p50 response time and
    the hub's CPU. A rate the load generator itself could not keep up says nothing
    about the hub, and is marked so.
    """
    sim.stop.clear()
    loader = threading.Thread(target=sim.run, args=(True, every), daemon=True)
    loader.start()
    time.sleep(max(2 * every, 2.0))  # every site has sent at this rate at least once
    beats0, acked0, cpu0, t0 = sim.heartbeats, sim.acked_heartbeats, tree_cpu(pid), time.monotonic()
    oldest, fewest, took = 0.0, len(sim.names), []
    while time.monotonic() < t0 + seconds:
        elapsed, body = timed_get(f"{url}/sites", token, context)
        took.append(elapsed)
        spokes = [s for s in body["sites"] if s["site"] in sim.seq]
        fewest = min(fewest, sum(1 for s in spokes if s.get("alive")))
        oldest = max([oldest, *(s["last_heartbeat_age_s"] or 0.0 for s in spokes)])
        time.sleep(0.5)
    t1 = time.monotonic()
    acked, cpu = sim.acked_heartbeats - acked0, tree_cpu(pid) - cpu0
    sim.stop.set()
    loader.join()
    drained = sim.drain()
    target = len(sim.names) / every
    kept_up = drained and acked / (t1 - t0) >= 0.95 * target
    current = fewest == len(sim.names) and oldest <= every + 1.0
    return {
        "every": every,
        "beats/s": (sim.heartbeats - beats0) / (t1 - t0),
        "acked/s": acked / (t1 - t0),
        "target/s": target,
        "oldest": oldest,
        "alive": fewest,
        "get_sites": percentile(took, 0.5),
        "cpu": cpu / (t1 - t0),
        "status": "current" if current and kept_up else "STALE" if kept_up else "load generator behind",
    }


def hub_times(log_path: Path, pattern: str) -> list[float]:
    """The milliseconds in the hub log's lines matching ``pattern`` (one group), in seconds."""
    return [int(m) / 1000 for m in re.findall(pattern, log_path.read_text())]


def drift_replans(sim: Sites, log_path: Path, count: int, timeout: float = 40.0) -> list[float]:
    """Make every site's latency to the hub drift (x3, then back) ``count`` times; each re-plan's time in the hub."""
    pattern = r"'fleet' re-planned \(.*\): v\d+ \((\d+) ms\)"
    took: list[float] = []
    for k in range(count):
        sim.hub_latency_factor = 3.0 if k % 2 == 0 else 1.0
        seen, deadline = len(hub_times(log_path, pattern)), time.monotonic() + timeout
        while len(hub_times(log_path, pattern)) == seen and time.monotonic() < deadline:
            time.sleep(0.5)
        found = hub_times(log_path, pattern)
        if len(found) == seen:
            print(f"no drift re-plan within {timeout:.0f} s of drift {k + 1}; see the hub log")
            break
        took.append(found[-1])
    sim.hub_latency_factor = 1.0
    return took


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
    parser.add_argument(
        "--ramp",
        type=lambda v: [float(x) for x in v.split(",") if x],
        default=[3.0, 1.0, 0.3, 0.1, 0.05, 0.025],
        help="seconds between a site's heartbeats in each stage of the limit search (empty: none)",
    )
    parser.add_argument("--ramp-seconds", type=float, default=15.0, help="length of each stage of the limit search")
    parser.add_argument("--replans", type=int, default=5, help="same-app POST /apps timed after the stretch")
    parser.add_argument("--drift", type=int, default=3, help="drift re-plans timed after those (0: none)")
    parser.add_argument("--hub-log", type=Path, default=None, help="keep a copy of the hub's log here")
    args = parser.parse_args()

    from hub.api.client import HubClient
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
        url = f"https://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
        env |= {"SPANEDGE_TOKEN": token, "SPANEDGE_PLAN_KEY_FILE": str(key), "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-c", "from spanedge.cli import main; main()", "hub", "--sites", str(sites_file)]
        command += ["--port", str(port), "--state-dir", str(work / "state"), "--min-replan-interval", "5"]
        log_path = work / "hub.log"
        hub = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
        client = HubClient(url, token, timeout=300, ca_file=work / "state" / "ca" / "ca.pem")
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
            get_health: list[float] = []
            get_snapshot: list[float] = []
            alive: list[int] = []
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                took, body = timed_get(f"{url}/sites", token, client.context())
                get_sites.append(took)
                alive.append(sum(1 for s in body["sites"] if s.get("alive")))
                took, _ = timed_get(f"{url}/apps/fleet/placement", token, client.context())
                get_placement.append(took)
                took, _ = timed_get(f"{url}/healthz", token, client.context())
                get_health.append(took)
                get_snapshot.append(timed_snapshot(url, token, client.context()))
                time.sleep(0.25)
            replans = []
            source, filename = app_file.read_text(), str(app_file.resolve())
            for _ in range(args.replans):
                start = time.perf_counter()
                client.post_app(source, filename)
                replans.append(time.perf_counter() - start)
            figures["replans in hub"] = hub_times(log_path, r"'fleet' redeployed: plan v\d+ \((\d+) ms\)")
            figures["drift"] = drift_replans(sim, log_path, args.drift)
            sim.stop.set()
            loader.join()
            cpu1, t1 = tree_cpu(hub.pid), time.monotonic()
            figures["heartbeats/s"] = (sim.heartbeats - beats0) / (t1 - t0)
            figures["records/s"] = sim.sent_records / (t1 - t0)
            figures["hub cpu"] = (cpu1 - cpu0) / (t1 - t0)
            figures["ramp"] = []
            for every in args.ramp:  # until the status goes stale or the load generator falls behind
                figures["ramp"].append(ramp_stage(sim, hub.pid, url, token, client.context(), every, args.ramp_seconds))
                if figures["ramp"][-1]["status"] != "current":
                    break
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
            figures["get_health"] = get_health
            figures["get_snapshot"] = get_snapshot
            figures["alive"] = alive
            figures["replans"] = replans
            figures["replans in hub"] = figures["replans in hub"][-args.replans :]
        finally:
            sim.stop.set()
            hub.terminate()
            try:
                hub.wait(timeout=60)
            except subprocess.TimeoutExpired:
                hub.kill()
                hub.wait(timeout=30)
            if args.hub_log is not None:
                args.hub_log.write_bytes(log_path.read_bytes())
            if "lost" not in figures:
                print(log_path.read_text()[-4000:])

    ms = 1000.0
    print(f"\nhub with {args.sites} simulated sites, {args.seconds:.0f} s under load ({load} at the start)")
    print(
        f"load: a heartbeat per site every {args.heartbeat_every:g} s ({figures['heartbeats/s']:.0f}/s), "
        f"{args.batch} records per site every {args.data_every:g} s ({figures['records/s']:.0f} records/s)"
    )
    print(f"{'measure':<34}{'p50':>10}{'p99':>10}{'max':>10}   goal")
    floor = percentile(figures["get_health"], 0.5)
    for label, values in (
        ("GET /sites", figures["get_sites"]),
        ("GET /apps/fleet/placement", figures["get_placement"]),
        ("GET /healthz (baseline: no work)", figures["get_health"]),
        ("dashboard: first snapshot", figures["get_snapshot"]),
    ):
        ratio = f"{percentile(values, 0.5) / floor:.1f}x the baseline" if floor > 0 else ""
        goal = GOALS["snapshot"] if "snapshot" in label else GOALS["GET"] if "healthz" not in label else ""
        print(
            f"{label:<34}{percentile(values, 0.5) * ms:>8.1f}ms{percentile(values, 0.99) * ms:>8.1f}ms"
            f"{max(values) * ms:>8.1f}ms   {goal:<10}{ratio}  ({len(values)} requests)"
        )
    for label, r in (
        ("re-plan (POST /apps, same app)", figures["replans"]),
        ("  of which inside the hub", figures["replans in hub"]),
        ("drift re-plan (in the hub)", figures["drift"]),
    ):
        if r:
            print(
                f"{label:<34}{statistics.median(r) * ms:>8.0f}ms{'':>10}{max(r) * ms:>8.0f}ms"
                f"   {GOALS['replan']:<10}({len(r)} re-plans)"
            )
    print(f"first deploy (plan, start the Spark query, publish): {figures['first deploy s']:.1f} s")
    print(
        f"sites alive in GET /sites: min {min(figures['alive'])}, max {max(figures['alive'])} of {args.sites}"
        f"; ingest: {figures['sent']} records sent, {figures['lost']} lost, {figures['duplicated']} duplicated"
        f"   goal {GOALS['ingest']}"
    )
    print(f"hub process tree CPU: {100 * figures['hub cpu']:.0f}% of one core (control plane, ingest, Spark)")
    if figures["ramp"]:
        print(
            f"\nlimit search: {args.sites} sites, data unchanged, heartbeats ever more often "
            f"({args.ramp_seconds:g} s each, until the status goes stale or the load generator falls behind)"
        )
        print(
            f"{'heartbeat every':>16}{'sent/s':>9}{'acked/s':>9}{'target/s':>10}{'oldest age':>12}{'alive min':>11}"
            f"{'GET /sites':>12}{'hub CPU':>9}   status"
        )
        for r in figures["ramp"]:
            print(
                f"{r['every']:>15g}s{r['beats/s']:>9.0f}{r['acked/s']:>9.0f}{r['target/s']:>10.0f}{r['oldest']:>11.2f}s"
                f"{r['alive']:>11}{r['get_sites'] * ms:>10.1f}ms{100 * r['cpu']:>8.0f}%   {r['status']}"
            )
        kept = [r for r in figures["ramp"] if r["status"] == "current"]
        last = figures["ramp"][-1]
        if kept:
            best = max(kept, key=lambda r: r["acked/s"])
            sites = best["acked/s"] * args.heartbeat_every
            if last["status"] == "STALE":
                where = f"; it goes stale at {last['acked/s']:.0f}/s"
            else:
                where = " (at least: the load generator, not the hub, stopped the search)"
            print(
                f"status stays current at {best['acked/s']:.0f} heartbeats/s{where}: about {sites:.0f} sites "
                f"at a heartbeat every {args.heartbeat_every:g} s"
            )


if __name__ == "__main__":
    main()
