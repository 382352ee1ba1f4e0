"""The pure runtime against a bare Python loop and bytewax, on the same pipeline and data, in one run.

    .venv/bin/python bench/runtime.py [--records 1000000] [--rounds 3] [--only runtime,harness,loop,bytewax]

Pipeline: parse 50-byte JSON records -> map (a new dict with the value
scaled) -> filter (about 10% dropped) -> 100-key 10 s tumbling window with
count, mean and max, event time from the records (one record per event-time
millisecond, in order). Each contender runs over the same list of raw
records and its window results are checked equal to the runtime's:

* ``runtime``: :class:`spanedge.runtime.Pipeline` fed message by message, as
  the agent feeds it, then flushed;
* ``harness``: :func:`spanedge.testing.run_edge` over the same messages;
* ``loop``: a bare, hand-written Python loop doing the same work with
  ``orjson`` and a dict per window (no dead letters, late records, snapshots
  or handovers): the floor of pure Python;
* ``bytewax``: the same dataflow on bytewax (``pip install bytewax``; skipped
  with a note if it is missing), one worker, ``fold_window`` on an event clock.

Each contender runs ``--rounds`` times, alternating, in this one process; the
best CPU time of each counts (records per CPU-second: per core), beside the
wall time, with the goals of issue 46 part 5 next to them.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spanedge import App, agg
from spanedge.runtime import edge_part
from spanedge.testing import run_edge

KEYS = 100
SIZE_S = 10.0
T0 = 1_700_000_000.0
RECORD_BYTES = 50
GOAL_PER_CORE = 250_000

Result = tuple[str, float, float, int, float, float]
"""One fired window: ``(key, window_start, window_end, n, mean_v, max_v)``."""


def scale(r: dict[str, Any]) -> dict[str, Any]:
    """The map: a new record with the value scaled."""
    return {"k": r["k"], "ts": r["ts"], "v": r["v"] * 0.1}


def valid(r: dict[str, Any]) -> bool:
    """The filter: drops about one record in ten."""
    return bool(r["v"] >= 10.0)


def build_app() -> App:
    """The app every SpanEdge contender runs."""
    app = App("bench")
    (
        app.source("readings", time_field="ts")
        .map(scale, name="scale")
        .filter(valid, name="valid")
        .window(
            name="per_key",
            key="k",
            size=SIZE_S,
            aggs={"n": agg.count(), "mean_v": agg.mean("v"), "max_v": agg.max("v")},
            scope="local",
        )
        .transform(lambda df: df, name="at_hub")
    )
    return app


def records(n: int) -> list[bytes]:
    """``n`` JSON records of ``RECORD_BYTES`` bytes: 100 keys, one per event-time millisecond."""
    out = []
    for i in range(n):
        body = {"k": f"k{i % KEYS:03d}", "ts": round(T0 + i * 0.001, 3), "v": (i * 37) % 1000, "p": ""}
        pad = RECORD_BYTES - len(orjson.dumps(body))
        body["p"] = "x" * max(0, pad)
        out.append(orjson.dumps(body))
    return out


def _rows(values: list[dict[str, Any]]) -> list[Result]:
    rows = [(v["k"], v["window_start"], v["window_end"], v["n"], v["mean_v"], v["max_v"]) for v in values]
    return sorted(rows, key=lambda r: (r[1], r[0]))


def _clean(name: str, dlq: list[Any], late: list[Any]) -> None:
    if dlq or late:
        msg = f"{name}: {len(dlq)} dead letters and {len(late)} late records on clean data, e.g. {(dlq + late)[:2]}"
        raise SystemExit(msg)


def run_runtime(data: list[bytes]) -> list[Result]:
    """The pure runtime, one message at a time, then a flush."""
    pipeline = edge_part(build_app(), "edge", max_future_skew=float("inf"))
    (source,) = pipeline.sources
    process = pipeline.process
    for payload in data:
        process(source, payload)
    pipeline.flush()
    out = pipeline.take()
    _clean("runtime", out.dlq, out.late)
    return _rows([r.value for r in out.to_hub])


def run_harness(data: list[bytes]) -> list[Result]:
    """:func:`spanedge.testing.run_edge` over the same messages."""
    result = run_edge(build_app(), {"readings": data})
    _clean("harness", result.dlq, result.late)
    return _rows(result.values("per_key"))


def run_loop(data: list[bytes]) -> list[Result]:
    """A bare Python loop: parse, map, filter, and a dict of accumulators per open window."""
    loads = orjson.loads
    open_: dict[float, dict[str, list[Any]]] = {}
    fired: list[Result] = []
    watermark = -float("inf")

    def fire(limit: float) -> None:
        for start in sorted(s for s in open_ if s + SIZE_S <= limit):
            for key, (n, total, top) in open_.pop(start).items():
                fired.append((key, start, start + SIZE_S, n, total / n, float(top)))

    for payload in data:
        r = loads(payload)
        t = float(r["ts"])
        if t > watermark:  # the watermark follows every record with an event time, as in the runtime
            watermark = t
            if len(open_) > 1 or (open_ and next(iter(open_)) + SIZE_S <= t):
                fire(watermark)
        r = scale(r)
        if not valid(r):
            continue
        start = (t // SIZE_S) * SIZE_S
        window = open_.get(start)
        if window is None:
            window = open_[start] = {}
        acc = window.get(r["k"])
        v = r["v"]
        if acc is None:
            window[r["k"]] = [1, float(v), v]
        else:
            acc[0] += 1
            acc[1] += v
            if v > acc[2]:
                acc[2] = v
    fire(float("inf"))
    return sorted(fired, key=lambda r: (r[1], r[0]))


def run_bytewax(data: list[bytes]) -> list[Result]:
    """The same dataflow on bytewax: one worker, an event clock with no system-time drift."""
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, TumblingWindower, fold_window
    from bytewax.testing import TestingSink, TestingSource, run_main

    align = datetime.fromtimestamp(T0 // SIZE_S * SIZE_S, UTC)
    fixed_now = datetime.fromtimestamp(0, UTC)
    flow = Dataflow("bench")
    parsed = op.map("parse", op.input("in", flow, TestingSource(data)), orjson.loads)
    kept = op.filter("valid", op.map("scale", parsed, scale), valid)
    keyed = op.key_on("key", kept, lambda r: r["k"])
    clock = EventClock(
        ts_getter=lambda r: datetime.fromtimestamp(r["ts"], UTC),
        wait_for_system_duration=timedelta(0),
        now_getter=lambda: fixed_now,  # the watermark follows the records alone, as in SpanEdge
        to_system_utc=lambda _t: None,
    )

    def fold(acc: list[Any], r: dict[str, Any]) -> list[Any]:
        v = r["v"]
        acc[0] += 1
        acc[1] += v
        acc[2] = v if acc[2] is None or v > acc[2] else acc[2]
        return acc

    def merge(a: list[Any], b: list[Any]) -> list[Any]:
        return [a[0] + b[0], a[1] + b[1], b[2] if a[2] is None else a[2] if b[2] is None else max(a[2], b[2])]

    windows = fold_window(
        "per_key", keyed, clock, TumblingWindower(timedelta(seconds=SIZE_S), align), lambda: [0, 0.0, None], fold, merge
    )
    out: list[tuple[str, tuple[int, list[Any]]]] = []
    op.output("out", windows.down, TestingSink(out))
    run_main(flow)
    base = align.timestamp()
    fired = [
        (key, base + wid * SIZE_S, base + (wid + 1) * SIZE_S, n, total / n, float(top))
        for key, (wid, (n, total, top)) in out
    ]
    return sorted(fired, key=lambda r: (r[1], r[0]))


CONTENDERS: dict[str, Callable[[list[bytes]], list[Result]]] = {
    "runtime": run_runtime,
    "harness": run_harness,
    "loop": run_loop,
    "bytewax": run_bytewax,
}


def _has_bytewax() -> bool:
    try:
        import bytewax  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each contender; the best CPU time counts")
    parser.add_argument("--only", default=",".join(CONTENDERS), help="comma-separated contenders to run")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        parser.error(f"unknown contender(s) {', '.join(unknown)}; choose from {', '.join(CONTENDERS)}")
    notes = []
    if "bytewax" in names and not _has_bytewax():
        names.remove("bytewax")
        notes.append("bytewax is not installed (pip install bytewax): left out")
    data = records(args.records)
    timings: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    results: dict[str, list[Result]] = {}
    for _ in range(args.rounds):
        for name in names:  # alternate: the machine may be shared
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            rows = CONTENDERS[name](data)
            timings[name].append((time.process_time() - cpu, time.perf_counter() - wall))
            results.setdefault(name, rows)
    reference = results[names[0]]
    for name in names[1:]:
        if results[name] != reference:
            diff = (
                next((a, b) for a, b in zip(results[name], reference, strict=False) if a != b) if results[name] else ()
            )
            msg = f"{name} gave {len(results[name])} windows, {names[0]} {len(reference)}; first difference {diff}"
            raise SystemExit(msg)
    _report(args, names, timings, len(reference), notes)


def _report(
    args: argparse.Namespace,
    names: list[str],
    timings: dict[str, list[tuple[float, float]]],
    windows: int,
    notes: list[str],
) -> None:
    n = args.records
    print(
        f"runtime benchmark: parse -> map -> filter -> {KEYS}-key {SIZE_S:g} s tumbling window (count, mean, max), "
        f"{n:,} records of {RECORD_BYTES} bytes, {windows:,} window results, all contenders equal"
    )
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs (load average {load:.1f}), one process, best of {args.rounds} runs\n")
    best = {name: min(timings[name]) for name in names}
    per_core = {name: n / best[name][0] for name in names}
    header = f"{'contender':<9} | {'rec/CPU-s':>10} {'rec/s wall':>10} | {'vs runtime':>10} {'vs loop':>7} | goal"
    print(header)
    print("-" * len(header))
    goals = {"runtime": f">= {GOAL_PER_CORE:,}/CPU-s", "harness": ">= 0.90x runtime"}
    for name in names:
        wall = best[name][1]
        vs_rt = f"{per_core[name] / per_core['runtime']:.2f}x" if "runtime" in per_core else ""
        vs_loop = f"{per_core[name] / per_core['loop']:.2f}x" if "loop" in per_core else ""
        print(
            f"{name:<9} | {per_core[name]:>10,.0f} {n / wall:>10,.0f} | {vs_rt:>10} {vs_loop:>7} | {goals.get(name, '')}"
        )
    for note in notes:
        print(f"\nnote: {note}")


if __name__ == "__main__":
    main()
