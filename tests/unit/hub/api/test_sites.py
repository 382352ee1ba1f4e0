"""The site registry's answers at scale: only measured pairs visited, rows rebuilt per heartbeat, cached JSON."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import orjson

from hub.api.apps import PlacementAnswers, placement_view
from hub.api.models import PlacementView, SitesResponse
from hub.api.sites import SitesAnswer
from hub.control.links import pair
from hub.control.registry import SiteRegistry
from hub.control.state import AppRecord, HistoryEntry
from spanedge.plan import Assignment, Plan, SolverInfo, Totals
from spanedge.sites import parse_sites
from tests.polling import wait_for

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883", cpu: 4}
  a: {tier: spoke, broker: "mqtt://127.0.0.1:1883", streams: {r: {topic: "s/a/+", rate: 10}}}
  b: {tier: spoke, broker: "mqtt://127.0.0.1:1883", streams: {r: {topic: "s/b/+", rate: 10}}}
  c: {tier: spoke, broker: "mqtt://127.0.0.1:1883"}
links:
  - {between: [a, cloud], latency_ms: 40}
  - {between: [b, cloud], latency_ms: 30}
default_link: {latency_ms: 300, bandwidth_mbps: 5}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def registry_with_beats(clock: Clock) -> SiteRegistry:
    registry = SiteRegistry(parse_sites(SITES), stale_after_s=60.0, clock=clock)
    beat = {"site": "a", "ts": 1, "apps": ["x"], "latency": {"b": {"rtt_ms": 8, "p95_ms": 10, "samples": 3}}}
    assert registry.heartbeat("a", orjson.dumps(beat))
    clock.now += 50
    beat = {"site": "c", "ts": 2, "latency": {"cloud": {"rtt_ms": 100, "p95_ms": 120, "samples": 3}}}
    assert registry.heartbeat("c", orjson.dumps(beat))
    return registry


def test_measured_and_declared_latencies_and_latency_rows_match_the_whole_matrix() -> None:
    clock = Clock()
    registry = registry_with_beats(clock)
    names = list(registry.sites.sites)
    for fresh in ({pair("a", "b"), pair("c", "cloud")}, {pair("c", "cloud")}):  # both fresh, then a's gone stale
        whole = {pair(a, b): registry.link(a, b)["latency_ms"] for i, a in enumerate(names) for b in names[i + 1 :]}
        measured_pairs = registry.measured_latencies()
        assert set(measured_pairs) == fresh
        current = {key: measured_pairs.get(key, registry.declared_latency(key)) for key in whole}
        assert current == whole
        measured = [
            {k: r[k2] for k, k2 in (("src", "src"), ("dst", "dst"), ("latency_p50_ms", "latency_ms"))}
            | {"latency_p95_ms": r["p95_ms"], "latency_spread_ms": r["spread_ms"], "measured_at": r["measured_at"]}
            for r in registry.matrix()
            if r["source"] == "measured"
        ]
        assert registry.latency_rows() == measured
        clock.now += 30
    assert pair("a", "b") not in registry.measured_latencies()
    assert registry.declared_latency(pair("a", "b")) == 70  # stale: the declared path through the hub again
    assert registry.measured_latencies()[pair("c", "cloud")] == 50
    assert registry.declared_latency(pair("a", "nowhere")) is None


def test_a_status_row_follows_the_clock_and_changes_revision_with_a_heartbeat() -> None:
    clock = Clock()
    registry = registry_with_beats(clock)
    before = {row["site"]: (rev, row) for rev, row in registry.status_revisions()}
    clock.now += 20
    after = {row["site"]: (rev, row) for rev, row in registry.status_revisions()}
    assert after["a"][0] == before["a"][0]
    assert (before["a"][1]["last_heartbeat_age_s"], after["a"][1]["last_heartbeat_age_s"]) == (50, 70)
    assert (before["a"][1]["alive"], after["a"][1]["alive"]) == (False, False)
    assert after["c"][1]["alive"] is False
    assert before["a"][1]["latency"]["b"]["source"] == "measured"
    assert "b" not in after["a"][1]["latency"]  # stale after 60 s: only the path through the hub is left
    assert registry.heartbeat("a", orjson.dumps({"site": "a", "ts": 3, "apps": ["y"]}))
    assert not registry.heartbeat("a", orjson.dumps({"site": "b"}))
    rows = {row["site"]: (rev, row) for rev, row in registry.status_revisions()}
    assert rows["a"][0] == before["a"][0] + 2
    assert (rows["a"][1]["apps"], rows["a"][1]["alive"], rows["a"][1]["rejected_heartbeats"]) == (["y"], True, 1)
    assert rows["b"][0] == before["b"][0]


def test_the_sites_answer_is_what_the_response_model_gives() -> None:
    clock = Clock()
    registry = registry_with_beats(clock)
    answer = SitesAnswer()

    def expected() -> dict[str, Any]:
        body = {"down_after_s": registry.down_after_s, "sites": registry.status()}
        return SitesResponse.model_validate(body).model_dump(mode="json")

    assert orjson.loads(answer.body(registry)) == expected()
    odd = {"site": "b", "ts": 4, "dlq": "many", "cpu_percent": 7, "outbox": [1], "apps": "x"}
    odd["counters"] = {"x": {"dlq": 2, "late": 0, "errors": 1}}
    assert registry.heartbeat("b", orjson.dumps(odd))
    clock.now += 5
    shown = orjson.loads(answer.body(registry))
    assert shown == expected()
    b = next(s for s in shown["sites"] if s["site"] == "b")
    assert (b["dlq"], b["cpu_percent"], b["outbox"], b["apps"], b["alive"]) == (None, 7.0, {}, [], True)
    assert b["counters"] == {"x": {"dlq": 2, "late": 0, "errors": 1}}  # per app, beside the site's total
    other = SiteRegistry(parse_sites(SITES), clock=clock)
    assert orjson.loads(answer.body(other))["sites"][1]["apps"] == []  # another registry: nothing kept from the first


def record(version: int, history: int) -> AppRecord:
    plan = Plan(
        app="demo",
        version=version,
        hub="cloud",
        assignments=(Assignment("r@a", "r", "a", "a", "source site"),),
        flows=(),
        totals=Totals(wan_bytes_per_s=5, worst_latency_ms=40, mean_latency_ms=40, objective=1.0),
        solver=SolverInfo("ilp/highs", "optimal", 0.01, 0.0),
        baselines={"central": Totals(10, 40, 40, 2.0)},
    )
    entries = [HistoryEntry(v, float(v), "deployed", asdict(plan.totals)) for v in range(1, history + 1)]
    return AppRecord(name="demo", source="", filename="app.py", plan=plan, history=entries)


def test_the_placement_answer_is_kept_until_the_record_changes() -> None:
    answers = PlacementAnswers()
    first = record(1, 1)
    body = answers.body(first)
    assert body == PlacementView.model_validate(placement_view(first)).model_dump_json(by_alias=True).encode()
    assert answers.body(first) is body
    second = record(2, 2)
    assert orjson.loads(answers.body(second))["version"] == 2
    first.history.append(
        HistoryEntry(2, 2.0, "re-planned; placement unchanged", asdict(first.plan.totals), changed=False)
    )
    assert len(orjson.loads(answers.body(first))["history"]) == 2


def test_a_big_fleets_answer_is_reused_then_rebuilt_in_the_background() -> None:
    clock = Clock()
    registry = registry_with_beats(clock)
    answer = SitesAnswer(reuse_from_sites=1, reuse_s=1.0)
    first = answer.body(registry)
    beat = {"site": "b", "ts": 9, "apps": ["late"], "latency": {}}
    assert registry.heartbeat("b", orjson.dumps(beat))
    assert answer.body(registry) == first  # under reuse_s old: served again, as it was
    time.sleep(1.05)
    assert answer.body(registry) == first  # older (under three times reuse_s): served while a fresh one is built
    wait_for(lambda: answer.body(registry) != first, timeout=10)
    b = next(s for s in orjson.loads(answer.body(registry))["sites"] if s["site"] == "b")
    assert b["apps"] == ["late"]


def test_a_small_fleets_answer_is_always_fresh() -> None:
    clock = Clock()
    registry = registry_with_beats(clock)
    answer = SitesAnswer()  # three sites: under REUSE_FROM_SITES
    answer.body(registry)
    assert registry.heartbeat("b", orjson.dumps({"site": "b", "ts": 9, "apps": ["late"], "latency": {}}))
    b = next(s for s in orjson.loads(answer.body(registry))["sites"] if s["site"] == "b")
    assert b["apps"] == ["late"]
