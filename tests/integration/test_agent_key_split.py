"""Scale-out and back by key: a keyed window split across two spokes mid-run and merged back, on real Mosquitto.

Two agents (``tiny``, where the readings arrive, and ``barn``, 5 ms away)
run the plans the placement makes as tiny's CPU budget halves and comes
back: the window whole at tiny (v1), split by key at barn from T1 (v2), cut
where tiny's heartbeats say the window's records divide in two, merged
back into tiny from T2 (v3), each handed over by the hub's own stamping. Every window result the agents publish is checked
against the reference computed from the generated readings.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

import placement
from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.paho_transport import PahoTransport
from hub.control.planning import carry_ownership
from hub.control.registry import SiteRegistry
from hub.handover.switches import stamp_handovers
from placement.problem import Previous
from spanedge import topics
from spanedge.keyrange import KEY_SPACE, PART_EPOCH, key_hash
from spanedge.loader import load_app
from spanedge.plan import Plan
from spanedge.sites import Sites, parse_sites
from spanedge.wire.batch import Record, decode_batch
from tests.keys import TRUSTED
from tests.polling import poll

from .agentkit import HubObserver, Sensor, client, signed_plan

APP = """
from spanedge import App, agg, global_, sinks

@global_
def keep(stats: dict) -> bool:
    return True

app = App("split")
doubled = app.source("readings", time_field="ts").map(lambda r: {**r, "x2": r["x"] * 2}, name="double", cost=1e-4)
stats = doubled.window(
    name="stats", key="k", size=10.0, scope="local", cost=0.015, aggs={"n": agg.count(), "s": agg.sum("x2")}
)
stats.map(lambda s: {**s, "label": f"{s['k']}:{s['n']}"}, name="label").filter(keep, name="keep").sink(
    sinks.memory("split_out"), name="out"
)
"""
KEYS = 17
RATE = 20  # readings per second of event time


def make_sites(hub: str, tiny: str, barn: str, tiny_cpu: float) -> Sites:
    return parse_sites(f"""
sites:
  cloud: {{tier: hub, broker: "{hub}", cpu: 8}}
  tiny:
    tier: spoke
    broker: "{tiny}"
    cpu: {tiny_cpu}
    streams:
      readings: {{topic: "r/#", rate: 100, qos: 1}}
  barn: {{tier: spoke, broker: "{barn}", cpu: 1}}
default_link: {{latency_ms: 80, bandwidth_mbps: 10}}
links:
  - {{between: [tiny, barn], latency_ms: 5, bandwidth_mbps: 100}}
""")


def readings(t0: float, start: float, end: float) -> list[dict[str, Any]]:
    """``RATE`` readings per second of event time in ``[start, end)`` past ``t0``, over ``KEYS`` keys.

    One key in three readings is ``p0``: a busy sensor, so the middle of the
    key hash space would give barn 35% of the records, not half.
    """
    first, last = round(start * RATE), round(end * RATE)
    return [
        {"k": "p0" if i % 3 == 0 else f"p{i % KEYS}", "x": i % 23, "ts": round(t0 + i / RATE, 3)}
        for i in range(first, last)
    ]


def reference(data: list[dict[str, Any]], closed_before: float) -> dict[tuple[str, float], dict[str, Any]]:
    """The window results of the app, in plain Python, for the windows ending by ``closed_before``."""
    groups: dict[tuple[str, float], list[int]] = {}
    for r in data:
        groups.setdefault((r["k"], (r["ts"] // 10) * 10.0), []).append(r["x"] * 2)
    return {
        key: {"n": len(xs), "s": float(sum(xs)), "label": f"{key[0]}:{len(xs)}"}
        for key, xs in groups.items()
        if key[1] + 10.0 <= closed_before
    }


def published(observer: HubObserver) -> list[tuple[str, Record]]:
    """Every 'label' record the agents published, with the topic's site, one per (site, stream, epoch, seq)."""
    seen: dict[tuple[str, str, int, int], tuple[str, Record]] = {}
    with observer._lock:
        messages = list(observer.messages)
    for topic, payload in messages:
        if topic.startswith("spanedge/v1/split/label/"):
            for r in decode_batch(payload)[1]:
                seen[(r.site, r.stream, r.epoch, r.seq)] = (topic.rsplit("/", 1)[1], r)
    return list(seen.values())


def windows(records: list[tuple[str, Record]]) -> dict[tuple[str, float], dict[str, Any]]:
    """The window results by (key, start); a window sent twice (in any epoch, from any site) fails."""
    out: dict[tuple[str, float], dict[str, Any]] = {}
    for _, r in records:
        v = r.value
        key = (v["k"], v["window_start"])
        assert key not in out, f"window {key} published twice"
        out[key] = {"n": v["n"], "s": v["s"], "label": v["label"]}
    return out


def replans(app_path: Path, sites: dict[float, Sites], v1: Plan, spread: dict[str, Any], t0: float) -> list[Plan]:
    """The re-plans the hub makes with the key spread tiny measured: split (T1 = t0 + 30), merged back (T2 = t0 + 60)."""
    app = load_app(app_path)
    registry = SiteRegistry(sites[1.0])
    registry.heartbeat("tiny", orjson.dumps({"site": "tiny", "ts": 0, "apps": ["split"], "key_spread": spread}))
    measured = registry.key_spread("split", v1)
    v2 = placement.solve(app, sites[1.0], previous=Previous.of(v1, key_spread=measured), version=2)
    v2 = stamp_handovers(carry_ownership(v2, v1), v1, app, t0 + 25.0)
    v3 = placement.solve(app, sites[2.0], previous=Previous.of(v2, key_spread=measured), version=3)
    v3 = stamp_handovers(carry_ownership(v3, v2), v2, app, t0 + 55.0)
    return [v2, v3]


def key_spread(observer: HubObserver) -> dict[str, Any]:
    """The key spread of tiny's heartbeat that counted the most records of 'stats@tiny'."""
    with observer._lock:
        beats = [orjson.loads(p) for t, p in observer.messages if t == topics.control("tiny", "heartbeat")]
    spreads = [b["key_spread"] for b in beats if "stats@tiny" in b.get("key_spread", {}).get("split", {})]
    return max(spreads, key=lambda s: sum(s["split"]["stats@tiny"].values()), default={})


@pytest.mark.timeout(120)
async def test_a_keyed_window_split_across_two_spokes_and_merged_back_loses_and_repeats_nothing(
    mosquitto_factory: Any, tmp_path: Path
) -> None:
    hub, tiny_broker, barn_broker = mosquitto_factory("hub"), mosquitto_factory("tiny"), mosquitto_factory("barn")
    sites = {cpu: make_sites(hub.url, tiny_broker.url, barn_broker.url, cpu) for cpu in (1.0, 2.0)}
    app_path = tmp_path / "app.py"
    app_path.write_text(APP)
    t0 = (time.time() - 3600) // 10 * 10
    v1 = placement.solve(load_app(app_path), sites[2.0])
    control = client(hub.port)
    observer = HubObserver(hub.port)
    agents = {
        name: Agent(
            AgentConfig(name, sites[2.0], tmp_path / name, heartbeat_interval=0.5, trusted_keys=TRUSTED),
            connect=PahoTransport,
        )
        for name in ("tiny", "barn")
    }
    tasks = [asyncio.create_task(agent.run()) for agent in agents.values()]
    sensor = Sensor(tiny_broker.port)

    async def deploy(plan: Plan, version: int) -> None:
        for name in agents:
            message = signed_plan(plan, APP, version, site=name)
            control.publish(topics.control(name, "plan"), message, qos=1, retain=True).wait_for_publish(5)
        for name, agent in agents.items():
            await poll(
                lambda a=agent: a.plan_intake is not None and a.plan_intake.version == version,
                15,
                f"v{version} at {name}",
            )

    async def send(rows: list[dict[str, Any]]) -> None:
        await asyncio.to_thread(_send, sensor, rows)

    data: list[dict[str, Any]] = []
    try:
        await deploy(v1, 1)
        await poll(lambda: agents["tiny"].intake.transports["tiny"].subscribed.is_set(), 15, "tiny's subscription")
        data += readings(t0, 0, 25)
        await send(data)
        await poll(lambda: key_spread(observer), 30, "tiny to report how its window's records spread over the keys")
        v2, v3 = replans(app_path, sites, v1, key_spread(observer), t0)
        (part,) = v2.parts
        assert part.site == "barn"
        assert v3.parts == ()
        cut = part.keys_from
        assert part.share is not None
        at_cut = sum(key_hash(r["k"]) >= cut for r in data) / len(data)
        at_middle = sum(key_hash(r["k"]) >= KEY_SPACE // 2 for r in data) / len(data)
        assert part.share == pytest.approx(at_cut, abs=0.05)  # the share tiny measured is the data's
        assert abs(at_cut - 0.5) < abs(at_middle - 0.5) - 0.1  # cut where the records divide evenly
        await deploy(v2, 2)  # the split: barn subscribes to tiny's readings for its keys from T1
        await poll(lambda: "tiny" in agents["barn"].intake.transports, 15, "barn to read tiny's broker")
        await poll(lambda: agents["barn"].intake.transports["tiny"].subscribed.is_set(), 15, "barn's subscription")
        phase = readings(t0, 25, 55)
        data += phase
        await send(phase)
        await deploy(v3, 3)  # the merge: barn finishes its windows before T2, tiny takes its keys back
        phase = [*readings(t0, 55, 85), {"k": "p0", "x": 0, "ts": t0 + 100.0}]
        data += phase
        await send(phase)

        want = reference(data, t0 + 90.0)
        await poll(lambda: set(windows(published(observer))) >= set(want), 40, "every window at the hub")
        assert windows(published(observer)) == want  # 0 lost, 0 duplicated, 0 wrong
        assert len(want) > 100
        at_barn = [(r.epoch, r.value) for site, r in published(observer) if site == "barn"]
        assert at_barn, "barn computed none of the windows"
        assert {epoch for epoch, _ in at_barn} == {PART_EPOCH + 2}
        assert all(t0 + 30 <= v["window_start"] < t0 + 60 for _, v in at_barn)
        assert all(key_hash(v["k"]) >= cut for _, v in at_barn)
        assert {v["k"] for _, v in at_barn} == {f"p{i}" for i in range(KEYS) if key_hash(f"p{i}") >= cut}
        await poll(lambda: not agents["barn"].pipelines["split"].nodes, 20, "barn to let its part go")
    finally:
        for agent in agents.values():
            agent.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        sensor.close()
        observer.close()
        control.loop_stop()
        control.disconnect()


def _send(sensor: Sensor, rows: list[dict[str, Any]]) -> None:
    """Publish readings on their key's topic under tiny's filter and wait for the broker's acknowledgements."""
    infos = [sensor.client.publish(f"r/{r['k']}", orjson.dumps(r), qos=1) for r in rows]
    for info in infos:
        info.wait_for_publish(10)
