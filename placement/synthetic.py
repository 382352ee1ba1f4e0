"""Random but valid apps and sites, for tests and benchmarks of the placement.

Each stream gets a chain of record-level operators (some ``@local``, some
unscoped) and a per-site window; the chains then meet in a union, a
fleet-wide window, global filters and sinks. Sites lie on a plane: latency
grows with distance, every spoke has declared links to the hubs and to its
nearest spokes. A spoke whose local operators fit neither there nor at a
neighbour with room gets more CPU, so every instance is feasible.
"""

from __future__ import annotations

import math
import random
from typing import Any

from spanedge import App, agg, global_, local, sinks
from spanedge.app import Stream
from spanedge.scope import ATTRIBUTE, Hints, Scope
from spanedge.sites import Sites


def hinted(name: str, *, scope: str | None = None, cost: float = 1e-5, selectivity: float = 1.0) -> Any:
    """A pass-through record function carrying placement hints (and ``scope``, if given)."""

    def func(value: Any) -> Any:
        return value

    func.__name__ = name
    if scope == "local":
        return local(name=name, cost=cost, selectivity=selectivity)(func)
    if scope == "global":
        return global_(name=name, cost=cost, selectivity=selectivity)(func)
    setattr(func, ATTRIBUTE, Hints(Scope.ANY, name, cost, selectivity))
    return func


def synthetic_sites(n_sites: int, n_streams: int, rng: random.Random, hubs: int | None = None) -> Sites:
    """``n_sites`` sites (1 hub per 25, at least one), each spoke sourcing one or two of ``n_streams`` streams."""
    n_hubs = hubs if hubs is not None else 1 + n_sites // 25
    names = [f"hub-{i}" for i in range(n_hubs)] + [f"spoke-{i}" for i in range(n_sites - n_hubs)]
    where = {
        n: (rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7)) if n.startswith("hub") else (rng.random(), rng.random())
        for n in names
    }
    sites: dict[str, Any] = {}
    stream_names = [f"s{i}" for i in range(n_streams)]
    for i, n in enumerate(names):
        if n.startswith("hub"):
            sites[n] = {"tier": "hub", "broker": "mqtt://localhost:1883", "cpu": rng.choice([8, 16, 32])}
            continue
        picked = {stream_names[i % n_streams]}
        if rng.random() < 0.3:
            picked.add(rng.choice(stream_names))
        streams = {
            s: {
                "topic": f"{n}/{s}",
                "rate": rng.choice([10, 50, 100, 500, 1000]),
                "record_bytes": rng.choice([60, 120, 400]),
            }
            for s in sorted(picked)
        }
        sites[n] = {
            "tier": "spoke",
            "broker": "mqtt://localhost:1883",
            "cpu": rng.choice([0.1, 0.25, 0.5, 1, 2]),
            "streams": streams,
        }

    def ms(a: str, b: str) -> float:
        (x1, y1), (x2, y2) = where[a], where[b]
        return round(5 + 120 * math.dist((x1, y1), (x2, y2)), 1)

    links = []
    spokes = [n for n in names if not n.startswith("hub")]
    for s in spokes:
        for h in names[:n_hubs]:
            links.append({"between": [s, h], "latency_ms": ms(s, h), "bandwidth_mbps": rng.choice([2, 10, 50])})
        for t in sorted((t for t in spokes if t != s), key=lambda t: ms(s, t))[:3]:
            if s < t:
                links.append({"between": [s, t], "latency_ms": ms(s, t), "bandwidth_mbps": 20})
    return Sites.of({"sites": sites, "links": links, "default_link": {"latency_ms": 200, "bandwidth_mbps": 5}})


def synthetic_app(n_ops: int, streams: list[str], rng: random.Random) -> App:
    """An app with about ``n_ops`` operators over ``streams``."""
    app = App("synthetic")
    budget = n_ops - len(streams) - 4
    per_stream = max(1, budget // max(len(streams), 1))
    tails: list[Stream] = []
    count = 0
    for s in streams:
        stream = app.source(s)
        for j in range(per_stream - 1):
            count += 1
            name = f"op{count}"
            scope = "local" if j < per_stream // 3 and rng.random() < 0.5 else None
            kind = rng.choice(["map", "filter", "filter", "flat_map"])
            cost = rng.choice([2e-6, 1e-5, 5e-5])
            if kind == "filter":
                stream = stream.filter(
                    hinted(name, scope=scope, cost=cost, selectivity=rng.choice([0.01, 0.1, 0.5, 0.9]))
                )
            elif kind == "flat_map":
                stream = stream.flat_map(hinted(name, scope=scope, cost=cost, selectivity=rng.choice([0.5, 1.5, 3.0])))
            else:
                stream = stream.map(hinted(name, scope=scope, cost=cost))
            if j == per_stream // 2 and rng.random() < 0.5:
                count += 1
                stream.sink(sinks.memory(f"m{count}"), name=f"sink{count}")
        count += 1
        stream = stream.window(  # local: the hub cannot run it before the fleet window (two windows in a row)
            key="k",
            aggs={"n": agg.count()},
            size="10s",
            scope="local",
            name=f"win{count}",
            keys=rng.choice([5, 50, 500]),
        )
        tails.append(stream)
    merged = tails[0] if len(tails) == 1 else app.union(*tails, name="all")
    fleet = merged.window(key="k", aggs={"n": agg.sum("n")}, size="1m", name="fleet")
    alerts = fleet.filter(hinted("alerts", scope="global", selectivity=0.1))
    alerts.sink(sinks.memory("alerts"), name="alert_sink")
    return app


def synthetic(n_ops: int, n_sites: int, seed: int = 0, hubs: int | None = None) -> tuple[App, Sites]:
    """A random instance with about ``n_ops`` operators over ``n_sites`` sites."""
    rng = random.Random(seed)
    n_streams = max(1, min(n_ops // 15, n_sites - 1))
    sites = synthetic_sites(n_sites, n_streams, rng, hubs)
    streams = sorted({s for site in sites.sites.values() for s in site.streams})
    app = synthetic_app(n_ops, streams, rng)
    return app, _feasible(app, sites)


def _feasible(app: App, sites: Sites) -> Sites:
    """Raise the CPU of spokes whose local operators fit neither there nor at a neighbour with room."""
    from placement.latency import LatencyMatrix
    from placement.problem import build_problem

    problem = build_problem(app, sites, LatencyMatrix.from_sites(sites))
    need: dict[str, float] = {}
    reach: dict[str, set[str]] = {}
    for r in problem.decisions():
        if r.home is not None and not any(problem.is_hub(c) for c in r.candidates):
            need[r.home] = need.get(r.home, 0.0) + problem.load(r.id)
            reach.setdefault(r.home, set(r.candidates)).intersection_update(r.candidates)
    spare = {s: sites.sites[s].cpu - need.get(s, 0.0) for s in sites.sites}
    raised = dict(sites.sites)
    for home, demand in sorted(need.items()):
        if demand <= sites.sites[home].cpu:
            continue
        room = [p for p in reach[home] if p != home and spare[p] >= demand]
        if room:
            spare[room[0]] -= demand
        else:
            raised[home] = raised[home].replace(cpu=math.ceil(demand * 2) / 2 + 0.5)
    return sites.replace(sites=raised)
