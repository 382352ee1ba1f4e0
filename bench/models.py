"""Predictions per second per core at the edge, for each model kind, beside the same pipeline without a model.

    .venv/bin/python bench/models.py [--records 200000] [--rounds 3]

Pipeline, run by :class:`spanedge.runtime.Pipeline` message by message as the
agent runs it: parse a JSON record with three features (``rms``, ``peak``,
``temp_c``) -> score it -> records sent on to the hub. The baseline is the
same pipeline with a ``map`` adding a constant field in place of the
``predict``. Each model kind scores with a version installed as an agent
installs one (its parameters made up, of the sizes a training gives: 3
coefficients; 3 clusters; 20 trees of depth 5), so its drift window is fed as
at a site. Every contender runs ``--rounds`` times, alternating, in this one
process; the best CPU time counts (records per CPU-second: per core). Each
run's outputs are checked: one per input, and a sample scored again equals
the version's own answer.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spanedge import App, sinks
from spanedge.models.drift import SCORED
from spanedge.models.installed import INSTALLED
from spanedge.models.portable import Centroids, Forest, Linear, Logistic, Model, Tree
from spanedge.models.stats import FeatureStats
from spanedge.models.version import ModelVersion
from spanedge.runtime import edge_part

FEATURES = ("rms", "peak", "temp_c")
T0 = 1_700_000_000.0
KINDS = ("baseline", "logistic_regression", "linear_regression", "kmeans", "random_forest", "random_forest_regression")


def records(n: int) -> list[bytes]:
    """``n`` JSON records with the three features, one per event-time millisecond."""
    rnd = random.Random(5)
    out = []
    for i in range(n):
        body = {"m": f"m{i % 50}", "t": round(T0 + i * 0.001, 3), "rms": rnd.gauss(0, 1), "peak": rnd.gauss(0, 1)}
        body["temp_c"] = rnd.gauss(40, 5)
        out.append(orjson.dumps(body))
    return out


def _tree(rnd: random.Random, depth: int) -> Tree:
    feature: list[int] = []
    threshold: list[float] = []
    left: list[int] = []
    right: list[int] = []
    value: list[float] = []

    def node(level: int) -> int:
        at = len(feature)
        feature.append(-1)
        threshold.append(0.0)
        left.append(0)
        right.append(0)
        value.append(rnd.random())
        if level < depth:
            feature[at] = rnd.randrange(len(FEATURES))
            threshold[at] = rnd.gauss(0, 1) if feature[at] < 2 else rnd.gauss(40, 5)
            left[at] = node(level + 1)
            right[at] = node(level + 1)
        return at

    node(0)
    return Tree(feature=feature, threshold=threshold, left=left, right=right, value=value)


def params(kind: str) -> Model:
    """Made-up parameters of ``kind``, of the sizes a training gives."""
    rnd = random.Random(kind)
    if kind == "logistic_regression":
        return Logistic(coefficients=[1.5, -0.8, 0.05], intercept=-2.0)
    if kind == "linear_regression":
        return Linear(coefficients=[2.0, -1.0, 0.1], intercept=0.3)
    if kind == "kmeans":
        return Centroids(centres=[[0.0, 0.0, 20.0], [3.0, 1.0, 40.0], [-2.0, 4.0, 60.0]])
    return Forest(trees=[_tree(rnd, 5) for _ in range(20)], classifier=kind == "random_forest")


def version(kind: str) -> ModelVersion:
    """A version of ``kind`` for app ``bench``, model ``m``, with decile statistics of the generated features."""
    stats = [
        FeatureStats(
            field=f, mean=0.0, std=1.0, min=-4.0, max=4.0, edges=[-1.0, 0.0, 1.0], shares=[0.16, 0.34, 0.34, 0.16]
        )
        for f in FEATURES
    ]
    return ModelVersion(
        app="bench",
        model="m",
        version=1,
        algorithm=kind,
        features=list(FEATURES),
        label=None if kind == "kmeans" else "y",
        trained_at=0.0,
        reason="bench",
        rows=0,
        held_out=0,
        time_from=None,
        time_to=None,
        metrics={},
        stats=stats,
        params=params(kind),
    )


def mark(r: dict[str, Any]) -> dict[str, Any]:
    """The baseline's step in place of the model: a field added to a copy."""
    out = dict(r)
    out["p"] = 0.5
    return out


def build_app(kind: str) -> App:
    """The pipeline with a predict of ``kind``, or the baseline's map."""
    app = App("bench")
    source = app.source("features", time_field="t")
    if kind == "baseline":
        scored = source.map(mark, name="score")
    else:
        labelled = app.source("labelled")
        spec = app.model(
            "m",
            algorithm=kind,
            features=list(FEATURES),
            label=None if kind == "kmeans" else "y",
            train_on=labelled,
            **({"k": 3} if kind == "kmeans" else {}),
        )
        scored = source.predict(spec, output="p", name="score")
    scored.sink(sinks.memory("out"), name="out", scope="global")
    return app


def run(kind: str, data: list[bytes]) -> list[dict[str, Any]]:
    """Run the pipeline of ``kind`` over ``data``; return what it sends on."""
    INSTALLED.remove("bench")
    SCORED.remove("bench")
    if kind != "baseline":
        INSTALLED.install(version(kind))
    pipeline = edge_part(build_app(kind), "edge", max_future_skew=float("inf"))
    source = next(s for s in pipeline.sources if s.startswith("features"))
    process = pipeline.process
    for payload in data:
        process(source, payload)
    pipeline.flush()
    out = pipeline.take()
    if out.dlq:
        msg = f"{kind}: {len(out.dlq)} dead letters on clean data, e.g. {out.dlq[:1]}"
        raise SystemExit(msg)
    return [r.value for r in out.to_hub]


def check(kind: str, data: list[bytes], got: list[dict[str, Any]]) -> None:
    """One output per input; a sample scored again gives the same answer."""
    if len(got) != len(data):
        msg = f"{kind}: {len(got)} outputs for {len(data)} records"
        raise SystemExit(msg)
    if kind == "baseline":
        return
    v = version(kind)
    for record in got[:: max(1, len(got) // 1000)]:
        want = v.score(record)
        want = int(want) if kind == "kmeans" else want
        if record["p"] != want:
            msg = f"{kind}: scored {record['p']!r} for {record}, the version says {want!r}"
            raise SystemExit(msg)


def main() -> None:
    """Run every kind ``--rounds`` times, alternating, and print records per CPU-second beside the baseline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each kind; the best CPU time counts")
    args = parser.parse_args()
    data = records(args.records)
    timings: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
    for _ in range(args.rounds):
        for kind in KINDS:  # alternate: the machine may be shared
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            got = run(kind, data)
            timings[kind].append((time.process_time() - cpu, time.perf_counter() - wall))
            check(kind, data, got)
    n = args.records
    print(f"model benchmark: parse -> predict -> to the hub, {n:,} records of 3 features, every output checked")
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs (load average {load:.1f}), one process, best of {args.rounds} runs\n")
    header = f"{'kind':<24} | {'rec/CPU-s':>10} {'rec/s wall':>10} | {'vs baseline':>11} | {'µs/record model':>15}"
    print(header)
    print("-" * len(header))
    base = min(timings["baseline"])[0]
    for kind in KINDS:
        cpu, wall = min(timings[kind])
        extra = (cpu - base) / n * 1e6
        print(f"{kind:<24} | {n / cpu:>10,.0f} {n / wall:>10,.0f} | {base / cpu:>10.2f}x | {extra:>15.2f}")


if __name__ == "__main__":
    main()
