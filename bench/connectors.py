"""The edge agent's connector sources beside its MQTT intake, in one run: records/s and records per CPU-second.

    .venv/bin/python bench/connectors.py [--records 50000] [--device-records 5000] [--only mqtt,file,http,modbus,opcua]
        [--sink-records 50000]

Each source feeds the agent's inbox as the agent runs it (a ``SourceRunner``, or for MQTT the
agent's paho connection, QoS 1), and a drain loop acknowledges every message as the agent does
after its commit, so what is measured is the intake up to the pipeline: reading, decoding,
acknowledging. The pipeline and the commit are the same for every source and are left out.
The reader is this process; whatever feeds it runs in another one (Mosquitto and
``mosquitto_pub -l`` for MQTT, an HTTP client, a pymodbus server, an asyncua server writing
value changes), so the CPU seconds (user + system of this process, from the first record to the
last) are the reader's own: records per CPU-second is records/s per core.

* ``mqtt``: QoS 1 messages of 100 bytes from ``mosquitto_pub -l``, the baseline;
* ``file``: a file of 100-byte JSON lines, followed by a ``file:///`` stream;
* ``http``: POSTs of 100 JSON records each to an ``http://`` push endpoint, one client with
  keep-alive, each answered after its records are acknowledged;
* ``modbus``: 50 holding registers polled every 10 ms (one request per point);
* ``opcua``: 10 variables whose values the server changes as fast as it can, one subscription.

The devices set the pace of the last two (``--device-records`` each): their records/s are the
device's, and their records per CPU-second what reading it costs the agent.

``--sink-records`` (0: skipped) also times the hub's PostgreSQL sink (``spanedge[postgres]``, a server
from ``tests/postgres.py``): ``PostgresWriter`` upserting window results by their primary key, in
batches of 1,000 each written in one transaction with its batch id, beside a bare psycopg
``executemany`` of the same upserts in the same batches, in the same run. The server runs in its
own processes, so for the sink records/s (wall) is the figure; the CPU seconds are the client's.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edge_agent.connectors.api import make_source  # noqa: E402
from edge_agent.connectors.runner import SourceRunner  # noqa: E402
from edge_agent.mqtt.transport import Inbox  # noqa: E402
from simulate.ports import free_port  # noqa: E402
from spanedge.sites import StreamBinding, parse_sites  # noqa: E402

TOKEN_ENV = "SPANEDGE_BENCH_PUSH_TOKEN"
RECORD = b'{"probe": "east/e01", "zone": "east", "ts": 1767225600.125, "moisture": 23.4, "temp_c": 14.2, "x": "'
BATCH = 100
POINTS = 50
VARIABLES = 10


def record(i: int) -> bytes:
    """A 100-byte JSON record."""
    tail = f'{i:08d}"}}'.encode()
    return RECORD[: 100 - len(tail)] + tail


def cpu() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def drain(inbox: Inbox, count: int, timeout: float = 600.0) -> tuple[float, float]:
    """Take and acknowledge ``count`` messages; return the wall and CPU seconds from the first to the last."""
    taken = 0
    first_wall = first_cpu = 0.0
    async with asyncio.timeout(timeout):
        while taken < count:
            messages = inbox.drain(5000)
            if not messages:
                await inbox.wait(0.05)
                continue
            if not taken:
                first_wall, first_cpu = time.perf_counter(), cpu()
            for m in messages:
                m.source.ack(m.mid, m.qos)
            taken += len(messages)
            await asyncio.sleep(0)  # let the source read on
    return time.perf_counter() - first_wall, cpu() - first_cpu


async def run_source(
    url: str, count: int, feeder: subprocess.Popen[bytes] | None = None, **settings: Any
) -> tuple[float, float]:
    """Read ``count`` records from a connector stream with ``url`` and ``settings`` (then wait for ``feeder``)."""
    binding = msgspec.convert({"url": url, "rate": 1000, **settings}, StreamBinding)
    inbox = Inbox(maxsize=20_000)
    inbox.bind(asyncio.get_running_loop())
    runner = SourceRunner(make_source(binding, "bench"), "bench", "bench", inbox)
    runner.start()
    try:
        figures = await drain(inbox, count)
        if feeder is not None:
            await asyncio.to_thread(feeder.wait, 60)
        return figures
    finally:
        runner.stop()
        await runner.wait_stopped()


async def bench_file(count: int, workdir: Path) -> tuple[float, float]:
    """A file written beforehand, followed from its start."""
    log = workdir / "bench.jsonl"
    log.write_bytes(b"".join(record(i) + b"\n" for i in range(count)))
    return await run_source(f"file://{log}", count, options={"poll_s": 0.05})


async def bench_http(count: int, workdir: Path) -> tuple[float, float]:
    """POSTs of :data:`BATCH` records from a client in another process."""
    port = free_port()
    os.environ[TOKEN_ENV] = "bench-token"
    feeder = subprocess.Popen(
        [sys.executable, __file__, "--feed", "http", "--port", str(port), "--records", str(count)]
    )
    try:
        return await run_source(f"http://127.0.0.1:{port}/ingest", count, feeder, options={"token_env": TOKEN_ENV})
    finally:
        feeder.kill()
        feeder.wait()


async def bench_modbus(count: int, workdir: Path) -> tuple[float, float]:
    """:data:`POINTS` holding registers of a pymodbus server in another process, polled every 10 ms."""
    port = free_port()
    feeder = subprocess.Popen(
        [sys.executable, __file__, "--feed", "modbus", "--port", str(port)], stdout=subprocess.PIPE
    )
    try:
        assert feeder.stdout is not None
        feeder.stdout.readline()  # listening
        points = {f"p{i}": {"table": "holding", "address": i} for i in range(POINTS)}
        return await run_source(f"modbus://127.0.0.1:{port}", count, interval=0.01, points=points)
    finally:
        feeder.kill()
        feeder.wait()


async def bench_opcua(count: int, workdir: Path) -> tuple[float, float]:
    """:data:`VARIABLES` variables of an asyncua server in another process, changed as fast as it can."""
    port = free_port()
    feeder = subprocess.Popen(
        [sys.executable, __file__, "--feed", "opcua", "--port", str(port)], stdout=subprocess.PIPE
    )
    try:
        assert feeder.stdout is not None
        nodes = orjson.loads(feeder.stdout.readline())
        return await run_source(f"opcua://127.0.0.1:{port}/spanedge/sim/", count, nodes=nodes, publish_interval=0.05)
    finally:
        feeder.kill()
        feeder.wait()


async def bench_mqtt(count: int, workdir: Path) -> tuple[float, float]:
    """QoS 1 messages from ``mosquitto_pub -l`` through a Mosquitto broker to the agent's paho connection."""
    from edge_agent.mqtt.paho_transport import PahoTransport
    from simulate.broker import Mosquitto

    with Mosquitto(workdir=workdir / "broker") as broker:
        site = parse_sites(f"sites:\n  hub: {{tier: hub, broker: '{broker.url}'}}\n").site("hub")
        inbox = Inbox(maxsize=20_000)
        inbox.bind(asyncio.get_running_loop())
        transport = PahoTransport(site.mqtt(), "bench-reader", "bench broker", inbox=inbox)
        transport.subscribe([("bench/#", 1)])
        transport.start()
        try:
            assert transport.wait_connected(30), "the benchmark's broker did not answer"
            while True:  # wait until the subscription is in place: a marker message comes back
                subprocess.run(["mosquitto_pub", "-p", str(broker.port), "-q", "1", "-t", "bench/mark", "-m", "{}"])
                await inbox.wait(0.5)
                marks = inbox.drain(100)
                for m in marks:
                    transport.ack(m.mid, m.qos)
                if marks:
                    break
            lines = b"".join(record(i) + b"\n" for i in range(count))
            pub = ["mosquitto_pub", "-p", str(broker.port), "-q", "1", "-t", "bench/probes", "-l"]
            feeder = subprocess.Popen(pub, stdin=subprocess.PIPE)
            assert feeder.stdin is not None
            feeder.stdin.write(lines)
            feeder.stdin.close()
            result = await drain(inbox, count)
            feeder.wait(60)
            return result
        finally:
            transport.stop()


PG_BATCH = 1000
PG_TABLE = """CREATE TABLE {name} (unit text NOT NULL, window_start timestamptz NOT NULL, window_end timestamptz,
    n integer NOT NULL, mean_c double precision, site text, PRIMARY KEY (unit, window_start))"""


def bench_postgres(count: int) -> dict[str, tuple[int, float, float]]:
    """The PostgreSQL sink's writer and a bare psycopg upsert, ``count`` window results each."""
    import psycopg

    from hub.engine.connectors.postgres import PostgresWriter, Result
    from tests.postgres import postgres_server

    results = []
    for i in range(count):
        value = {"unit": f"u{i % 100:03d}", "window_start": 1.7e9 + 10 * (i // 100), "n": i % 50, "mean_c": 4.5}
        value["window_end"] = value["window_start"] + 10
        record = {
            "site": "truck-7",
            "stream": "stats",
            "seq": i,
            "event_time": value["window_end"],
            "key": value["unit"],
        }
        results.append(Result({**record, "value": value}, orjson.dumps(value).decode()))
    out = {}
    with postgres_server() as server, server.database() as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(PG_TABLE.format(name="windows"))
            conn.execute(PG_TABLE.format(name="bare"))
        writer = PostgresWriter(dsn, "windows", None, "bench", "q-1", "to_db", "'to_db'", lambda: "run-1")
        wall, used = time.perf_counter(), cpu()
        for batch in range(0, count, PG_BATCH):
            writer.write(results[batch : batch + PG_BATCH], batch // PG_BATCH, lambda letters: None)
        out["postgres"] = (count, time.perf_counter() - wall, cpu() - used)
        writer.close()
        upsert = (
            "INSERT INTO bare VALUES (%s, to_timestamp(%s), to_timestamp(%s), %s, %s, %s) ON CONFLICT (unit, window_start) "
            "DO UPDATE SET window_end = EXCLUDED.window_end, n = EXCLUDED.n, mean_c = EXCLUDED.mean_c, site = EXCLUDED.site"
        )
        rows = [
            (v["unit"], v["window_start"], v["window_end"], v["n"], v["mean_c"], r.record["site"])
            for r in results
            for v in [r.record["value"]]
        ]
        wall, used = time.perf_counter(), cpu()
        with psycopg.connect(dsn) as conn:
            for batch in range(0, count, PG_BATCH):
                with conn.transaction(), conn.cursor() as cursor:
                    cursor.executemany(upsert, rows[batch : batch + PG_BATCH])
        out["psycopg"] = (count, time.perf_counter() - wall, cpu() - used)
        with psycopg.connect(dsn) as conn:
            written = conn.execute("SELECT count(*) FROM windows").fetchone()
            bare = conn.execute("SELECT count(*) FROM bare").fetchone()
        assert written == bare == (count,), (
            f"rows: the sink wrote {written}, the bare upsert {bare}; both should be {count}"
        )
    return out


BENCHES = {"mqtt": bench_mqtt, "file": bench_file, "http": bench_http, "modbus": bench_modbus, "opcua": bench_opcua}


def feed_http(port: int, count: int) -> None:
    """POST ``count`` records in batches once the endpoint listens."""
    deadline = time.monotonic() + 60
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            connection.connect()
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    headers = {"Authorization": "Bearer bench-token", "Content-Type": "application/x-ndjson"}
    for start in range(0, count, BATCH):
        body = b"\n".join(record(i) for i in range(start, min(count, start + BATCH)))
        connection.request("POST", "/ingest", body, headers)
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            sys.exit(f"the endpoint answered {answer.status}")


async def feed_modbus(port: int) -> None:
    """Serve :data:`POINTS` holding registers until killed."""
    from simulate.devices.modbus import ModbusDevice

    device = ModbusDevice(port, size=POINTS)
    await device.start()
    await device.set_holding(0, list(range(POINTS)))
    print("listening", flush=True)
    await asyncio.Event().wait()


async def feed_opcua(port: int) -> None:
    """Change :data:`VARIABLES` variables as fast as possible until killed."""
    from simulate.devices.opcua import OpcUaDevice

    device = OpcUaDevice({f"v{i}": 0.0 for i in range(VARIABLES)}, port=port)
    await device.start()
    print(orjson.dumps(device.node_ids()).decode(), flush=True)
    value = 0.0
    while True:
        value += 1.0
        for var in device.nodes:
            await device.write(var, value, time.time())
        await asyncio.sleep(0)


def main() -> None:
    """Run the chosen sources, one after the other, and print their figures beside MQTT's."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000, help="records of mqtt, file and http")
    parser.add_argument("--device-records", type=int, default=5_000, help="records of modbus and opcua")
    parser.add_argument("--only", default=",".join(BENCHES))
    parser.add_argument("--sink-records", type=int, default=0, help="results of the PostgreSQL sink (0: skipped)")
    parser.add_argument("--feed", choices=("http", "modbus", "opcua"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.feed == "http":
        feed_http(args.port, args.records)
        return
    if args.feed:
        asyncio.run(feed_modbus(args.port) if args.feed == "modbus" else feed_opcua(args.port))
        return
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(chosen) - set(BENCHES)
    if unknown:
        parser.error(f"--only: unknown source(s) {', '.join(sorted(unknown))}; choose from {', '.join(BENCHES)}")
    figures: dict[str, tuple[int, float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="spanedge-bench-connectors-") as tmp:
        for name in chosen:
            count = args.device_records if name in ("modbus", "opcua") else args.records
            wall, used = asyncio.run(BENCHES[name](count, Path(tmp)))
            figures[name] = (count, wall, used)
            print(f"  {name}: {count / wall:,.0f} records/s", file=sys.stderr, flush=True)
    if args.sink_records:
        figures.update(bench_postgres(args.sink_records))
    base = figures.get("mqtt")
    base_per_cpu = base[0] / base[2] if base and base[2] > 0 else None
    print("\nreader CPU: this process's user + system seconds from the first record to the last\n")
    print(
        f"{'source':<8} {'records':>8} {'wall s':>8} {'records/s':>11} {'CPU s':>7} {'records/CPU-s':>14} {'vs MQTT':>8}"
    )
    for name, (count, wall, used) in figures.items():
        if name in ("postgres", "psycopg"):
            continue
        per_cpu = count / used if used > 0 else float("inf")
        ratio = f"{per_cpu / base_per_cpu:.2f}x" if base_per_cpu else "-"
        print(f"{name:<8} {count:>8} {wall:>8.2f} {count / wall:>11,.0f} {used:>7.2f} {per_cpu:>14,.0f} {ratio:>8}")
    if "postgres" in figures:
        bare_rate = figures["psycopg"][0] / figures["psycopg"][1]
        print(f"\n{'sink':<8} {'results':>8} {'wall s':>8} {'results/s':>11} {'CPU s':>7} {'vs psycopg':>11}")
        for name in ("postgres", "psycopg"):
            count, wall, used = figures[name]
            print(
                f"{name:<8} {count:>8} {wall:>8.2f} {count / wall:>11,.0f} {used:>7.2f} {count / wall / bare_rate:>10.2f}x"
            )


if __name__ == "__main__":
    main()
