"""Hub data plane: MQTT ingest, the ingest log into Spark, and publish-to-sink latency.

    .venv/bin/python bench/hub.py [--records 300000] [--seconds 10] [--rate 2000]

Measured in one run, against a real Mosquitto and Spark in local mode:

* ingest: records/s from a QoS 1 publisher through ``Ingest`` (dedupe,
  append, fsync, ack) into the log, batches of 500 records;
* log -> Spark: records/s through a query with no Python operator (log
  source, filter, Parquet sink) and through a keyed 1 s tumbling window
  (count, mean), both over the backlog the ingest phase wrote;
* MQTT -> Spark live: records/s from the first publish until the 1 s
  window query (then the window and a pass-through query together) has
  committed the last record, with publisher, ingest and Spark running at
  once;
* latency, for triggers of 100 ms, 250 ms, 470 ms (the window queries'
  default; once more as the hub runs by default, the stateless query at
  230 ms), 500 ms (a divisor of the windows' second, the default before)
  and 1 s, each for both queries:
  publish -> memory sink of each record of a stateless query
  (p50/p99), and window end -> window result at
  the sink for the windowed query (p50/p99), at a steady ``--rate``, with the
  hub's default ``--window-close watermark`` (the sink writes each window in
  the micro-batch that moved the watermark past it), and again with
  ``--window-close next-batch`` (Spark's append mode, a micro-batch later),
  and at the default trigger once more with the ingest's regular seal only
  (every 0.1 s: not just before each micro-batch nor at a window's end);
  each latency row also gives the CPU this process and the JVM used over
  its measured stretch (the publisher included), what a busy hub pays
  for a trigger;
* the floor, for each trigger: the same pass-through and window queries in
  bare Spark, fed files at the same rate without MQTT, ingest or SpanEdge
  (:func:`spark_floor`), the baseline of the latency figures;
* idle: the CPU share of one core used by this process and its children
  (Spark's JVM, Python workers; not the broker) over ``--idle-seconds``
  with both apps deployed and no records arriving: first in a session
  that has just started (the JVM still compiling Spark's code), at the
  hub's default triggers (``--idle-trigger`` and ``--idle-stateless-trigger``
  change them), and at the end, warm: with the default triggers (the
  pass-through query at 230 ms, the window query at 470 ms), and with one
  trigger for both at 470 ms, 500 ms and 250 ms.

The goals are printed beside the figures, and the machine's load average.

The baseline in the same run is the publisher alone: how fast a paho client
gets QoS 1 acknowledgements from Mosquitto for the same batches when nobody
writes them anywhere.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hub.engine.session import (  # noqa: E402  (after the path)
    DEFAULT_STATELESS_TRIGGER,
    DEFAULT_TRIGGER,
    batch_intervals,
    stateless_trigger_of,
)

PASS_APP = """
from spanedge import App, sinks

app = App("bench-pass")
app.source("readings", time_field="ts").sink(SINK, name="pass_out")
"""

WINDOW_APP = """
from spanedge import App, agg, sinks

app = App("bench-window")
app.source("readings", time_field="ts").window(
    name="per_key", key="k", size="1s", aggs={"n": agg.count(), "mean_v": agg.mean("v")}
).sink(sinks.memory("windows"), name="win_out")
"""

SITES = """
sites:
  cloud: {{tier: hub, broker: "{url}"}}
  edge:
    tier: spoke
    broker: "{url}"
    streams:
      readings: {{topic: "bench/+", rate: 10000}}
"""
KEYS = 10
BATCH = 500
SPACING_S = 1e-4
"""Event seconds between two consecutive records of a path."""
LIVE_TRIGGER = "250 milliseconds"
"""The trigger of the live throughput runs."""
LATENCY_TRIGGERS = ("100 milliseconds", "250 milliseconds", DEFAULT_TRIGGER, "500 milliseconds", "1 second")
IDLE_TRIGGERS = (DEFAULT_TRIGGER, "500 milliseconds", "250 milliseconds")
"""Triggers (one for both queries) of the idle runs at the end, on a warm JVM, after one with the hub's defaults."""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def plan_for(app: Any) -> Any:
    """The source at the edge site, every other operator at the hub."""
    from spanedge.plan import Assignment, Flow, Plan, SolverInfo, Totals

    graph = app.graph()
    assignments = [Assignment("readings@edge", "readings", "edge", "edge")]
    flows = []
    for name in graph.order:
        if name == "readings":
            continue
        assignments.append(Assignment(name, name, None, "cloud"))
    for u, v in graph.edges:
        flows.append(Flow("readings@edge" if u == "readings" else u, v, 1, 1))
    return Plan(
        app.name, 1, "cloud", tuple(assignments), tuple(flows), Totals(0, 0, 0, 0), SolverInfo("bench", "ok", 0)
    )


class Publisher:
    """A QoS 1 paho publisher of record batches, as an edge agent sends them."""

    def __init__(self, url: str, app: str) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        host, port = url.split("//")[1].split(":")
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2)
        self.client.max_inflight_messages_set(100)
        self.client.max_queued_messages_set(0)
        self.client.connect(host, int(port))
        self.client.loop_start()
        self.app = app
        self.seq = 0

    def batches(self, n: int, t0: float, spacing: float) -> list[bytes]:
        """Encode ``n`` records in batches of :data:`BATCH`, event times from ``t0``."""
        from spanedge.wire.batch import Record, encode_batch

        out = []
        for start in range(0, n, BATCH):
            recs = []
            for i in range(start, min(n, start + BATCH)):
                t = t0 + i * spacing
                value = {"k": f"k{i % KEYS}", "ts": t, "v": float(i % 100)}
                recs.append(Record("edge", "readings", self.seq, t, value["k"], value))
                self.seq += 1
            out.append(encode_batch(self.app, recs))
        return out

    def send(self, payloads: list[bytes], stream: str = "readings") -> None:
        """Publish the batches (QoS 1) and wait for every acknowledgement."""
        from spanedge import topics

        topic = topics.data(self.app, stream, "edge")
        infos = [self.client.publish(topic, p, qos=1) for p in payloads]
        for info in infos:
            info.wait_for_publish(timeout=120)

    def close(self) -> None:
        """Disconnect."""
        self.client.disconnect()
        self.client.loop_stop()


def deploy(engine: Any, ingest: Any, app: Any, early_seals: bool = True) -> None:
    """Deploy ``app`` as the hub does: its log sealed at once when a record can close a hub window.

    ``early_seals=False``: only the log's regular seal (the release before).
    """
    from hub.ingest.seal_points import closing_points

    plan = plan_for(app)
    engine.deploy(app, plan)
    ingest.close_at(app.name, closing_points(app, plan) if early_seals else None)


def wait(predicate: Any, timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.02)
    msg = f"timed out waiting for {what}"
    raise TimeoutError(msg)


def caught_up(engine: Any, app: str, replica: str, tail: int) -> bool:
    """True once the query of ``replica`` has committed every log segment up to ``tail``."""
    from hub.engine.checkpoints import unprocessed
    from hub.ingest import log as ingest_log

    q = engine._apps[app].queries[replica]
    error = q.handle.exception()
    if error is not None:
        raise RuntimeError(str(error))
    log_dir = engine.log_dir(app)
    if ingest_log.sealed_tail(log_dir) < tail or not q.handle.lastProgress:
        return False
    return not unprocessed(log_dir, q.reader, q.checkpoint) and not q.handle.status.get("isDataAvailable")


def apps(work: Path) -> list[Any]:
    from spanedge.loader import load_app_source

    return [
        load_app_source(PASS_APP.replace("SINK", f'sinks.file("{work / "parquet"}")'), "bench_pass.py"),
        load_app_source(WINDOW_APP, "bench_window.py"),
    ]


def throughput(args: argparse.Namespace, url: str, spark: Any, work: Path, cpu: dict[str, float]) -> dict[str, float]:
    """Records/s of each path, by label; ``cpu`` receives the CPU-seconds each path spent per 100k records."""
    from hub.engine.engine import Engine
    from hub.ingest.consumer import Ingest
    from spanedge.sites import parse_sites

    sites = parse_sites(SITES.format(url=url))
    out: dict[str, float] = {}
    n = args.records
    # Baseline: the publisher against the broker alone (nobody subscribed).
    pub = Publisher(url, "bench-base")
    start, cpu0 = time.monotonic(), cpu_seconds()
    pub.send(pub.batches(n, 1_700_000_000.0, SPACING_S))  # encoding included, as an edge agent's outbox does it
    out["publish only (baseline)"] = n / (time.monotonic() - start)
    cpu["publish only (baseline)"] = (cpu_seconds() - cpu0) / n * 1e5
    pub.close()

    pass_app, window_app = apps(work)
    state = work / "throughput"
    ingest = Ingest(ingest_log_broker(url), state / "ingest", client_id="bench-ingest")
    ingest.start()
    ingest.wait_connected()
    pubs = {a.name: Publisher(url, a.name) for a in (pass_app, window_app)}
    t0 = time.time() - 3600
    payloads = {name: p.batches(n, t0, SPACING_S) for name, p in pubs.items()}
    start, cpu0 = time.monotonic(), cpu_seconds()
    for name, p in pubs.items():
        p.send(payloads[name])
    done = wait(lambda: ingest.stats()["records"] >= 2 * n, 300, "the ingest")
    out["MQTT -> ingest log"] = 2 * n / (done - start)
    # the publisher's sends are in it too (its batches were encoded before): a few hundredths
    cpu["MQTT -> ingest log"] = (cpu_seconds() - cpu0) / (2 * n) * 1e5
    ingest.stop()

    # The backlog through each query alone, with an availableNow trigger; the second run is warm.
    batch_engine = Engine(state, sites, spark=spark, trigger="availableNow")
    try:
        for app, label in ((pass_app, "log -> Spark, no Python op"), (window_app, "log -> Spark, 1 s window")):
            for attempt in ("cold", "warm"):
                start, cpu0 = time.monotonic(), cpu_seconds()
                batch_engine.deploy(app, plan_for(app))
                handles = [q.handle for q in batch_engine._apps[app.name].queries.values()]
                done = wait(lambda h=handles: not any(x.isActive for x in h), 300, label)
                for h in handles:
                    if h.exception() is not None:
                        raise RuntimeError(str(h.exception()))
                out[f"{label} ({attempt})"] = n / (done - start)
                cpu[f"{label} ({attempt})"] = (cpu_seconds() - cpu0) / n * 1e5
                progress = [p for h in handles for p in h.recentProgress if p.get("numInputRows")]
                busy_ms = sum(p["durationMs"]["triggerExecution"] for p in progress)
                if attempt == "warm" and busy_ms:
                    out[f"{label}, in micro-batches"] = sum(p["numInputRows"] for p in progress) / busy_ms * 1000
                batch_engine.undeploy(app.name)
    finally:
        batch_engine.stop()

    # Live: the apps deployed and warm; publisher, ingest and Spark all running at once. Each run's
    # records follow the last run's in event time, so none falls behind the window query's watermark.
    span = n * SPACING_S + 2.0
    t_live = t0 + span
    for label, live_apps in (
        ("MQTT -> Spark live, 1 s window", [window_app]),
        ("MQTT -> Spark live, window + pass-through", [window_app, pass_app]),
    ):
        out[label], cpu[label] = live(url, spark, state, sites, live_apps, pubs, n, t_live)
        t_live += span
    for p in pubs.values():
        p.close()
    return out


def live(
    url: str, spark: Any, state: Path, sites: Any, live_apps: list[Any], pubs: dict[str, Any], n: int, t0: float
) -> tuple[float, float]:
    """Records/s from the first publish until every query of ``live_apps`` committed the last record.

    Also the CPU-seconds per 100k records of the whole run (publisher, ingest and Spark).
    """
    from hub.engine.engine import Engine
    from hub.ingest import log as ingest_log
    from hub.ingest.consumer import Ingest

    ingest = Ingest(
        ingest_log_broker(url), state / "ingest", client_id="bench-ingest", batch_every=batch_intervals(LIVE_TRIGGER)
    )
    ingest.start()
    ingest.wait_connected()
    engine = Engine(state, sites, spark=spark, trigger=LIVE_TRIGGER)
    try:
        for app in live_apps:
            deploy(engine, ingest, app)
        for app in live_apps:
            tail = ingest_log.tail(engine.log_dir(app.name))
            wait(lambda a=app, t=tail: all_caught_up(engine, a.name, t), 300, "the warm-up")
        payloads = {a.name: pubs[a.name].batches(n, t0, SPACING_S) for a in live_apps}
        before = ingest.stats()["records"]
        start, cpu0 = time.monotonic(), cpu_seconds()
        senders = [threading.Thread(target=pubs[name].send, args=(batch,)) for name, batch in payloads.items()]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()
        total = n * len(live_apps)
        wait(lambda: ingest.stats()["records"] >= before + total, 300, "the ingest")
        for app in live_apps:
            tail = ingest_log.tail(engine.log_dir(app.name))
            wait(lambda a=app, t=tail: all_caught_up(engine, a.name, t), 300, "the live run")
        figures = total / (time.monotonic() - start), (cpu_seconds() - cpu0) / total * 1e5
        dropped = sum(
            int(op.get("numRowsDroppedByWatermark", 0))
            for app in live_apps
            for q in engine._apps[app.name].queries.values()
            for p in q.handle.recentProgress
            for op in p.get("stateOperators", [])
        )
        if dropped:
            print(f"warning: the live run's window dropped {dropped} rows behind its watermark", file=sys.stderr)
        return figures
    finally:
        engine.stop()
        ingest.stop()


def cpu_seconds(exclude: tuple[str, ...] = ("mosquitto",)) -> float:
    """User + system CPU seconds of this process and its children (the JVM, Python workers), brokers excluded."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            if proc.name() in exclude:
                continue
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def idle_cpu(
    args: argparse.Namespace, url: str, spark: Any, work: Path, trigger: str, tag: str, stateless: str | None = None
) -> dict[str, float]:
    """The CPU share of one core the hub's data plane uses with both apps deployed and no records arriving.

    The pass-through query runs every ``stateless`` if given, else as the hub's default has it
    (:func:`hub.engine.session.stateless_trigger_of`).
    """
    from hub.engine.engine import Engine
    from hub.ingest.consumer import Ingest
    from spanedge.loader import load_app_source
    from spanedge.sites import parse_sites

    sites = parse_sites(SITES.format(url=url))
    pass_app = load_app_source(PASS_APP.replace("SINK", 'sinks.memory("idle")'), "bench_idle.py")
    window_app = load_app_source(WINDOW_APP, "bench_window.py")
    state = work / f"idle-{tag}"
    ingest = Ingest(
        ingest_log_broker(url),
        state / "ingest",
        client_id=f"bench-ingest-idle-{tag}",
        batch_every=batch_intervals(trigger, stateless),
    )
    ingest.start()
    ingest.wait_connected()
    engine = Engine(state, sites, spark=spark, trigger=trigger, stateless_trigger=stateless)
    try:
        for app in (pass_app, window_app):
            engine.deploy(app, plan_for(app))
        time.sleep(5.0)  # past the queries' first batches
        batches_before = sum(len(q.handle.recentProgress) for a in engine._apps.values() for q in a.queries.values())
        cpu0, t0 = cpu_seconds(), time.monotonic()
        time.sleep(args.idle_seconds)
        cpu1, t1 = cpu_seconds(), time.monotonic()
        batches_after = sum(len(q.handle.recentProgress) for a in engine._apps.values() for q in a.queries.values())
        return {"share": (cpu1 - cpu0) / (t1 - t0), "progress events": float(batches_after - batches_before)}
    finally:
        engine.stop()
        ingest.stop()


def all_caught_up(engine: Any, app: str, tail: int) -> bool:
    return all(caught_up(engine, app, replica, tail) for replica in engine._apps[app].queries)


def ingest_log_broker(url: str) -> Any:
    from spanedge.sites import Broker

    host, port = url.split("//")[1].split(":")
    return Broker(scheme="mqtt", host=host, port=int(port))


def latency(
    args: argparse.Namespace,
    url: str,
    spark: Any,
    work: Path,
    trigger: str,
    close_windows: bool = True,
    early_seals: bool = True,
    stateless: str | None = None,
) -> dict[str, float]:
    """Stateless and window latency at ``trigger`` (:func:`latency_figures`), the hub's way unless told otherwise.

    The stateless query runs every ``stateless`` if given, else as the hub's default has it
    (:func:`hub.engine.session.stateless_trigger_of`).
    """
    from hub.engine.engine import Engine
    from hub.ingest.consumer import Ingest
    from spanedge.loader import load_app_source
    from spanedge.sites import parse_sites

    sites = parse_sites(SITES.format(url=url))
    pass_app = load_app_source(PASS_APP.replace("SINK", 'sinks.memory("passed")'), "bench_latency.py")
    window_app = load_app_source(WINDOW_APP, "bench_window.py")
    tag = f"{trigger.split()[0]}{'' if close_windows else '-next-batch'}{'' if early_seals else '-regular-seal'}"
    tag += f"-stateless-{stateless.split()[0]}" if stateless else ""
    state = work / f"latency-{tag}"
    every = batch_intervals(trigger, stateless) if early_seals else []
    ingest = Ingest(ingest_log_broker(url), state / "ingest", client_id=f"bench-ingest-{tag}", batch_every=every)
    ingest.start()
    ingest.wait_connected()
    engine = Engine(
        state, sites, spark=spark, trigger=trigger, stateless_trigger=stateless, close_windows=close_windows
    )
    pub = Publisher(url, pass_app.name)
    stop = threading.Event()
    try:
        deploy(engine, ingest, pass_app)
        deploy(engine, ingest, window_app, early_seals)
        per_tick = max(1, int(args.rate / 50))

        def run() -> None:
            from spanedge import topics
            from spanedge.wire.batch import Record, encode_batch

            names = (pass_app.name, window_app.name)
            nxt = time.monotonic()
            while not stop.is_set():
                now = time.time()
                recs = []
                for _ in range(per_tick):
                    value = {"k": f"k{pub.seq % KEYS}", "ts": now, "v": 1.0, "sent": now}
                    recs.append(Record("edge", "readings", pub.seq, now, value["k"], value))
                    pub.seq += 1
                for name in names:
                    pub.client.publish(topics.data(name, "readings", "edge"), encode_batch(name, recs), qos=1)
                nxt += 0.02
                time.sleep(max(0.0, nxt - time.monotonic()))

        def warmed() -> bool:
            return len(engine.memory("windows")) > 0 and len(engine.memory("passed")) > 0

        begin, end_send, cpu = steady_stretch(run, stop, warmed, args.seconds)
        passed = [
            arrived - row["value"]["sent"]
            for arrived, row in engine._memory.timed("passed")
            if begin <= row["value"]["sent"] <= end_send
        ]
        windows = [
            arrived - row["value"]["window_end"]
            for arrived, row in engine._memory.timed("windows")
            if begin <= row["value"]["window_start"] and row["value"]["window_end"] <= end_send
        ]
        batch_ms = [m.get("batch_ms") or 0 for a in engine.metrics().values() for m in a["queries"].values()]
        return latency_figures(passed, windows, statistics.fmean(batch_ms), cpu)
    finally:
        stop.set()
        engine.stop()
        pub.close()
        ingest.stop()


def spark_floor(args: argparse.Namespace, spark: Any, work: Path, trigger: str) -> dict[str, float]:
    """The same two queries in bare Spark: what Spark alone allows on this machine, the latency baseline.

    A thread writes the records straight into a folder as JSON-lines files, one
    every :data:`hub.ingest.log.SEAL_INTERVAL_S` like sealed segments, at the same rate
    and tick as :func:`latency`; a pass-through query and a keyed 1 s window
    (count, mean; from_json, watermark 0, append) read it with Spark's file
    source and collect each batch as Arrow in ``foreachBatch``. No MQTT, no
    ingest, no SpanEdge operator, counting or sink.
    """
    import orjson
    from pyspark.sql import functions as F

    from hub.engine.source import LINE_DDL
    from hub.ingest.log import SEAL_INTERVAL_S

    folder = work / f"floor-{trigger.split()[0]}"
    inbox = folder / "inbox"
    inbox.mkdir(parents=True)
    stop = threading.Event()
    per_tick = max(1, int(args.rate / 50))

    def feed() -> None:
        lines: list[bytes] = []
        seq, n = 0, 0
        nxt = sealed = time.monotonic()
        while not stop.is_set():
            now = time.time()
            for _ in range(per_tick):
                value = {"k": f"k{seq % KEYS}", "ts": now, "v": 1.0, "sent": now}
                line = {"site": "edge", "stream": "readings", "seq": seq, "event_time": now, "key": value["k"]}
                lines.append(orjson.dumps({**line, "value": orjson.dumps(value).decode()}))
                seq += 1
            if time.monotonic() - sealed >= SEAL_INTERVAL_S:
                tmp = folder / f".{n:09d}.tmp"
                tmp.write_bytes(b"\n".join(lines) + b"\n")
                tmp.rename(inbox / f"{n:09d}.jsonl")
                lines, n, sealed = [], n + 1, time.monotonic()
            nxt += 0.02
            time.sleep(max(0.0, nxt - time.monotonic()))

    arrivals: dict[str, list[tuple[float, dict[str, Any]]]] = {"passed": [], "windows": []}

    def collect(name: str) -> Any:
        def sink(df: Any, _batch: int) -> None:
            values = df.toArrow().column("value").to_pylist()
            now = time.time()
            arrivals[name].extend((now, orjson.loads(v)) for v in values)

        return sink

    lines = spark.readStream.schema(LINE_DDL).json(str(inbox))
    parsed = lines.withColumn("_r", F.from_json("value", "k STRING, v DOUBLE")).withColumn(
        "_ts", F.timestamp_seconds("event_time")
    )
    windows = (
        parsed.withWatermark("_ts", "0 milliseconds")
        .groupBy(F.window("_ts", "1 second").alias("_w"), F.col("_r.k").alias("k"))
        .agg(F.count(F.lit(1)).alias("n"), F.avg("_r.v").alias("mean_v"))
        .select(
            F.to_json(
                F.struct(
                    "k",
                    (F.unix_micros(F.col("_w.start")) / 1e6).alias("window_start"),
                    (F.unix_micros(F.col("_w.end")) / 1e6).alias("window_end"),
                    "n",
                    "mean_v",
                )
            ).alias("value")
        )
    )
    queries = [
        frame.writeStream.foreachBatch(collect(name))
        .option("checkpointLocation", str(folder / f"checkpoint-{name}"))
        .trigger(processingTime=trigger)
        .start()
        for name, frame in (("passed", lines.select("value")), ("windows", windows))
    ]
    try:
        begin, end_send, cpu = steady_stretch(feed, stop, lambda: all(arrivals.values()), args.seconds)
        batches = [p["durationMs"]["triggerExecution"] for q in queries for p in q.recentProgress]
    finally:
        stop.set()
        for query in queries:
            query.stop()
    passed = [at - v["sent"] for at, v in arrivals["passed"] if begin <= v["sent"] <= end_send]
    closed = [
        at - v["window_end"]
        for at, v in arrivals["windows"]
        if begin <= v["window_start"] and v["window_end"] <= end_send
    ]
    return latency_figures(passed, closed, statistics.median(batches) if batches else 0.0, cpu)


def steady_stretch(send: Any, stop: threading.Event, warmed: Any, seconds: float) -> tuple[float, float, float]:
    """Run ``send`` in a thread until results flow, then ``seconds`` more.

    Returns the measured stretch (wall times) and the share of a core this
    process and its children (the JVM; the broker excluded) used in it.
    ``stop`` ends the sending; the results of the stretch get 3 s more to arrive.
    """
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    wait(warmed, 180, "the first results")
    time.sleep(1.0)
    begin, cpu0, t0 = time.time(), cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    end_send, share = time.time(), (cpu_seconds() - cpu0) / (time.monotonic() - t0)
    stop.set()
    thread.join()
    time.sleep(3.0)
    return begin, end_send, share


def latency_figures(passed: list[float], windows: list[float], batch_ms: float, cpu: float) -> dict[str, float]:
    """The latency row of one run: stateless and window p50/p99 in ms, the samples, a typical batch's ms, CPU share."""
    return {
        "stateless p50 ms": 1000 * percentile(passed, 0.5),
        "stateless p99 ms": 1000 * percentile(passed, 0.99),
        "window p50 ms": 1000 * percentile(windows, 0.5),
        "window p99 ms": 1000 * percentile(windows, 0.99),
        "samples": float(len(passed)),
        "windows": float(len(windows)),
        "mean batch ms": batch_ms,
        "cpu share": cpu,
    }


GOALS = {
    "MQTT -> Spark live, 1 s window": ">= 100,000 rec/s",
    "stateless": "p50 <= 300 ms",
    "window": "p50 <= 500 ms",
    "idle": "<= 5% of one core",
}


def print_budget(cpu: dict[str, float]) -> None:
    """What 100k records/s would take of the machine's cores: the ingest and the window query, from the figures above."""
    import os

    ingest = cpu.get("MQTT -> ingest log")
    spark = cpu.get("log -> Spark, 1 s window (warm)")
    if ingest is None or spark is None:
        return
    cores = os.cpu_count() or 1
    print(
        f"CPU budget at 100k records/s: ingest {ingest:.2f} + Spark window {spark:.2f} = {ingest + spark:.2f} cores "
        f"of the {cores} (the publisher, standing in for the edge sites, comes on top: "
        f"{cpu['publish only (baseline)']:.2f} with its encoding)"
    )


def machine_load() -> str:
    """The 1-minute load average against the cores, as printed next to the figures."""
    import os

    load = os.getloadavg()[0]
    return f"load average {load:.1f} on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records",
        type=int,
        default=300_000,
        help="records per path and app (fewer make the live runs as short as a few micro-batches: latency, not rate)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured stretch of each latency run")
    parser.add_argument("--rate", type=float, default=2000.0, help="records/s during the latency runs")
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="measured stretch of the idle run")
    parser.add_argument("--idle-trigger", default=DEFAULT_TRIGGER, help="trigger of the idle run (the hub's)")
    parser.add_argument(
        "--idle-stateless-trigger",
        help="trigger of the idle run's query without a window (default: the hub's, 230 milliseconds "
        "or --idle-trigger if shorter)",
    )
    parser.add_argument("--spark-master", default="local[2]")
    args = parser.parse_args()

    import pyspark

    from hub.engine.session import build_session
    from simulate.broker import Mosquitto

    started = time.monotonic()
    load_before = machine_load()
    with Mosquitto(name="bench-hub") as broker, tempfile.TemporaryDirectory(prefix="spanedge-bench-hub-") as tmp:
        work = Path(tmp)
        spark = build_session(args.spark_master, app_name="spanedge-bench-hub")
        try:
            idle = idle_cpu(args, broker.url, spark, work, args.idle_trigger, "started", args.idle_stateless_trigger)
            cpu: dict[str, float] = {}
            rates = throughput(args, broker.url, spark, work, cpu)
            lat: dict[str, dict[str, float]] = {}
            later: dict[str, dict[str, float]] = {}
            floor: dict[str, dict[str, float]] = {}
            for i, t in enumerate(LATENCY_TRIGGERS):  # the two modes back to back, each first every other time
                for close in (True, False) if i % 2 else (False, True):
                    (lat if close else later)[t] = latency(args, broker.url, spark, work, t, close, stateless=t)
                if t == DEFAULT_TRIGGER:
                    regular = latency(args, broker.url, spark, work, t, early_seals=False, stateless=t)
                    split = latency(args, broker.url, spark, work, t)  # the hub's default: two intervals
                floor[t] = spark_floor(args, spark, work, t)
            split_idle = idle_cpu(args, broker.url, spark, work, DEFAULT_TRIGGER, "warm")
            warm = {f"{DEFAULT_TRIGGER} (no window: {DEFAULT_STATELESS_TRIGGER}, the default)": split_idle}
            warm |= {
                f"{t} for both": idle_cpu(args, broker.url, spark, work, t, f"warm-{t.split()[0]}", t)
                for t in IDLE_TRIGGERS
            }
        finally:
            spark.stop()
    print(f"\nhub data plane — pyspark {pyspark.__version__}, {args.spark_master}, {args.records} records of ~80 bytes")
    print(f"machine: {load_before} at the start, {machine_load()} at the end")
    print(f"{'path':<46}{'records/s':>12}{'vs publish only':>18}{'CPU-s/100k':>12}   goal")
    base = rates["publish only (baseline)"]
    for label, value in rates.items():
        spent = f"{cpu[label]:>12.2f}" if label in cpu else f"{'':>12}"
        print(f"{label:<46}{value:>12,.0f}{value / base:>17.2f}x{spent}   {GOALS.get(label, '')}")
    print_budget(cpu)
    print(f"\nlatency at {args.rate:.0f} records/s ({args.seconds:.0f} s measured per trigger)")
    print(
        f"{'trigger':<18}{'stateless p50':>14}{'p99':>9}{'window p50':>12}{'p99':>9}{'batch ms':>10}{'samples':>9}"
        f"{'CPU':>7}"
    )
    for trigger in LATENCY_TRIGGERS:
        rows = [(trigger, lat[trigger]), ("  next batch", later[trigger]), ("  bare Spark", floor[trigger])]
        if trigger == DEFAULT_TRIGGER:
            rows[1:1] = [(f"  no window {DEFAULT_STATELESS_TRIGGER.split()[0]} ms", split), ("  regular seal", regular)]
        for label, m in rows:
            print(
                f"{label:<18}{m['stateless p50 ms']:>12.0f}ms{m['stateless p99 ms']:>7.0f}ms"
                f"{m['window p50 ms']:>10.0f}ms{m['window p99 ms']:>7.0f}ms{m['mean batch ms']:>10.0f}"
                f"{m['samples']:>9.0f}{100 * m['cpu share']:>6.0f}%"
            )
    print(f"goals: stateless {GOALS['stateless']}, window close -> result {GOALS['window']}")
    print(f"\nidle hub (2 apps deployed, no records, {args.idle_seconds:.0f} s)   goal {GOALS['idle']}")
    own = f" (no window: {stateless_trigger_of(args.idle_trigger, args.idle_stateless_trigger)})"
    print(
        f"  trigger {args.idle_trigger}{own}, session just started: {100 * idle['share']:.1f}% of one core, "
        f"{idle['progress events']:.0f} progress events"
    )
    for t, m in warm.items():
        print(
            f"  trigger {t}, after the runs above (the JVM warm, as in a hub that has run a while): "
            f"{100 * m['share']:.1f}% of one core"
        )
    print("cold/warm: deploy to last record, first query of its kind in the session / run again;")
    print("in micro-batches: rows over the time Spark spent in the warm run's batches (no query start)")
    print("(window latency: from the window's end in wall time to its result at the sink)")
    print(
        "regular seal: the log sealed every 0.1 s only (the hub's own also seals just before each micro-batch, "
        "and at once after a record that can close a window)"
    )
    print("next batch: the hub with --window-close next-batch (Spark's append mode: a window a micro-batch later)")
    print(
        f"no window {DEFAULT_STATELESS_TRIGGER}: the hub's default, the stateless query at {DEFAULT_STATELESS_TRIGGER} "
        f"and the window's at {DEFAULT_TRIGGER} (the other rows: one trigger for both, "
        "spanedge hub --stateless-trigger set to --trigger)"
    )
    print("bare Spark: the same queries without MQTT, ingest or SpanEdge, fed files at the same rate (the floor)")
    print("CPU: this process and the JVM over the measured stretch, in % of one core (the publisher included)")
    print(f"total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
