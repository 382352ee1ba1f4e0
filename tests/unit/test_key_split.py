"""Scale-out and scale-in by key: a keyed window split across two spokes and merged back."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import orjson
import pytest

import placement
from hub.control.distribution import site_view, sites_of
from hub.control.plan_history import history_entry, moves
from hub.control.planning import carry_ownership
from hub.control.site_health import planned_load
from hub.handover.switches import stamp_handovers
from hub.ingest.publishers import assigned
from placement.problem import Previous
from spanedge import App
from spanedge.errors import InfeasiblePlacement
from spanedge.keyrange import KEY_SPACE, PART_EPOCH, complement, key_hash
from spanedge.plan import Plan
from spanedge.runtime import Pipeline, from_plan
from tests.unit.placement.test_split import make_app, make_sites

T0 = 1_700_000_000.0


def plans(app: App) -> tuple[Plan, Plan, Plan]:
    """v1 whole at tiny; v2 split (tiny's budget halved) switching at T0 + 30; v3 merged back at T0 + 60."""
    v1 = placement.solve(app, make_sites(2.0))
    v2 = placement.solve(app, make_sites(1.0), previous=Previous.of(v1), version=2)
    v2 = stamp_handovers(carry_ownership(v2, v1), v1, app, T0 + 25.0)
    v3 = placement.solve(app, make_sites(2.0), previous=Previous.of(v2), version=3)
    v3 = stamp_handovers(carry_ownership(v3, v2), v2, app, T0 + 55.0)
    return v1, v2, v3


# -- keys ---------------------------------------------------------------------------------------


def test_the_key_hash_is_stable_and_spread_over_the_key_space() -> None:
    # fixed values: the same on every site, run and Python version (no salted hash())
    assert key_hash("e01") == 484217461
    assert key_hash(7) == key_hash("7")  # a key hashes as the text window results carry
    hashes = [key_hash(f"probe-{i}") for i in range(2000)]
    assert all(0 <= h < KEY_SPACE for h in hashes)
    low = sum(h < KEY_SPACE // 2 for h in hashes)
    assert 900 < low < 1100


def test_every_key_and_window_belongs_to_exactly_one_site_through_a_split_and_a_merge() -> None:
    app = make_app()
    _, v2, v3 = plans(app)
    rng = random.Random(1)
    for plan in (v2, v3):
        shares = {site: plan.shares(site).get("stats@tiny", ()) for site in ("tiny", "barn", "cloud")}
        for _ in range(3000):
            hashed, start = rng.randrange(KEY_SPACE), T0 + 10 * rng.randrange(-3, 12)
            holders = [site for site, owned in shares.items() if any(s.holds(hashed, start) for s in owned)]
            assert len(holders) == 1, (plan.version, hashed, start, holders)
    assert complement([(0, 10), (20, KEY_SPACE)]) == [(10, 20)]


# -- placement ----------------------------------------------------------------------------------


def test_the_planner_splits_a_window_no_single_spoke_can_carry() -> None:
    app = make_app()
    with pytest.raises(InfeasiblePlacement):
        placement.solve(app, make_sites(1.0, barn_cpu=0.5))  # no split fits either
    plan = placement.solve(app, make_sites(1.0))
    (part,) = plan.parts
    assert (part.replica, part.site, part.keys_from, part.keys_before) == (
        "stats@tiny",
        "barn",
        KEY_SPACE // 2,
        KEY_SPACE,
    )
    assert plan.site_of("stats@tiny") == "tiny"
    assert "no spoke within reach carries 'stats' of tiny (1.5 cores)" in part.reason
    assert "split stats@tiny by key across tiny and barn" in plan.solver.status
    assert plan.totals.feasible
    assert plan.totals.wan_bytes_per_s > 0
    # each spoke carries its half (and the part re-runs 'double' to feed itself)
    load = planned_load([(plan, app)])
    assert load["tiny"] <= 1.0
    assert load["barn"] <= 1.0
    assert load["tiny"] + load["barn"] == pytest.approx(0.01 + 1.5 + 0.01, rel=0.05)


def test_a_replan_keeps_the_split_while_needed_and_merges_back_when_one_site_carries_it() -> None:
    app = make_app()
    v1, v2, v3 = plans(app)
    assert v1.parts == ()
    assert "parts" not in v1.to_dict()
    same = placement.solve(app, make_sites(1.0), previous=Previous.of(v2), version=3)
    assert same.parts == tuple(dataclasses.replace(p, since=0) for p in v2.parts)
    assert v3.parts == ()
    assert "merged back" in v3.solver.status
    assert v3.site_of("stats@tiny") == "tiny"


def test_a_plan_without_splits_serialises_as_before() -> None:
    app = make_app()
    v1 = placement.solve(app, make_sites(2.0))
    data = v1.to_dict()
    assert list(data) == [
        "app",
        "version",
        "hub",
        "assignments",
        "flows",
        "totals",
        "solver",
        "baselines",
        "slo_ms",
        "warnings",
        "app_file",
        "app_source",
        "handovers",
    ]
    moved = stamp_handovers(dataclasses.replace(v1, version=2), v1, app, T0)
    assert Plan.from_dict(moved.to_dict()) == moved
    _, v2, _ = plans(app)
    assert Plan.from_dict(orjson.loads(v2.to_json())) == v2


# -- the hub: handovers, history, publishers -------------------------------------------------------


def test_a_split_and_a_merge_hand_over_only_the_keys_that_move() -> None:
    app = make_app()
    _, v2, v3 = plans(app)
    (split,) = v2.handovers
    half = KEY_SPACE // 2
    assert (split.replica, split.source, split.target, split.switch_at) == ("stats@tiny", "tiny", "barn", T0 + 30.0)
    assert (split.keys_from, split.keys_before, split.epoch) == (half, KEY_SPACE, 0)
    assert v2.parts[0].since == 2
    assert v2.parts[0].epoch == PART_EPOCH + 2
    (merge,) = v3.handovers
    assert (merge.source, merge.target, merge.switch_at) == ("barn", "tiny", T0 + 60.0)
    assert (merge.keys_from, merge.keys_before, merge.epoch) == (half, KEY_SPACE, PART_EPOCH + 2)
    merged = {"replica": "stats@tiny", "from": "barn", "to": "tiny", "keys": "keys [50%, 100%)", "change": "merge"}
    assert moves(v2, v3) == [{**merged, "switch_at": T0 + 60.0}]
    entry = history_entry(v2, T0, "site tiny over its CPU budget", carry_ownership(v2, None))
    assert entry.reason == "site tiny over its CPU budget"  # nothing split since itself
    split_entry = history_entry(v2, T0, "site tiny over its CPU budget", plans(app)[0])
    assert "stats@tiny split by key: no spoke within reach carries 'stats'" in split_entry.reason
    assert split_entry.moved[0]["change"] == "split"
    assert "stats@tiny merged back into tiny" in history_entry(v3, T0, "restored", v2).reason


def test_the_part_s_site_gets_the_plan_and_may_publish_the_window_and_what_follows_it() -> None:
    app = make_app()
    v1, v2, v3 = plans(app)
    assert "barn" not in sites_of(v1)
    assert "barn" in sites_of(v2)
    assert "barn" in sites_of(v3)  # it finishes the merged keys' windows before the switch
    assert site_view(v2, "barn") != site_view(v1, "barn")
    assert site_view(v1, "tiny") == site_view(dataclasses.replace(v1, version=9), "tiny")
    assert assigned([v2], "barn", "tiny", "stats")
    assert assigned([v2], "barn", "tiny", "label")
    assert not assigned([v2], "barn", "tiny", "double")  # it only feeds the part
    assert assigned([v3], "barn", "tiny", "label")  # the old owner of the merged keys finishes
    assert not assigned([dataclasses.replace(v3, handovers=())], "barn", "tiny", "stats")


# -- the runtime: two sites, a split at T0 + 30 and a merge at T0 + 60 --------------------------------


def readings(n: int, seed: int = 5) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = T0 + i * 0.05 + rng.uniform(-0.3, 0.3)
        if i % 41 == 0:
            t = math.floor(t / 10) * 10  # on a window bound
        out.append(orjson.dumps({"k": f"p{i % 17}", "x": i % 23, "ts": t}))
    return out


class Site:
    """One agent's pipeline under successive plans: rebuilt, restored, retired as the agent does."""

    def __init__(self, app: App, name: str) -> None:
        self.app, self.name = app, name
        self.pipeline: Pipeline | None = None
        self.plan: Plan | None = None
        self.retired: set[str] = set()
        self.out: list[tuple[str, int, dict[str, Any]]] = []
        self.dlq = 0

    def apply(self, plan: Plan) -> None:
        state = self.pipeline.snapshot() if self.pipeline is not None else None
        self.plan, self.retired = plan, set()
        self.pipeline = from_plan(self.app, plan, self.name, out_of_orderness=0.5, clock=lambda: T0 + 1e6)
        if state is not None:
            self.pipeline.restore(state)

    def feed(self, payload: bytes) -> None:
        assert self.pipeline is not None
        assert self.plan is not None
        if "readings@tiny" in self.pipeline.sources:
            self.pipeline.process("readings@tiny", payload)
        outputs = self.pipeline.take()
        self.out += [(r.stream, r.epoch, r.value) for r in outputs.to_hub]
        self.dlq += len(outputs.dlq)
        done = self.pipeline.drained()
        if done:
            self.retired.update(done)
            state = self.pipeline.snapshot()
            self.pipeline = from_plan(
                self.app, self.plan, self.name, retired=self.retired, out_of_orderness=0.5, clock=lambda: T0 + 1e6
            )
            self.pipeline.restore(state)


@pytest.mark.parametrize("slide", [None, 5.0], ids=["tumbling", "sliding"])
def test_split_and_merge_at_the_switch_times_lose_and_repeat_no_window(slide: float | None) -> None:
    app = make_app(slide)
    v1, v2, v3 = plans(app)
    data = readings(1800)  # [T0, T0 + 90)
    fixed = Site(app, "tiny")
    fixed.apply(v1)
    for payload in data:
        fixed.feed(payload)
    assert fixed.pipeline is not None
    fixed.pipeline.flush()
    fixed.out += [(r.stream, r.epoch, r.value) for r in fixed.pipeline.take().to_hub]

    tiny, barn = Site(app, "tiny"), Site(app, "barn")
    tiny.apply(v1)
    barn.apply(v1)
    for i, payload in enumerate(data):
        if i == 500:  # event time ~T0 + 25: the split arrives, T = T0 + 30
            tiny.apply(v2)
            barn.apply(v2)
        if i == 1100:  # ~T0 + 55: the merge, T = T0 + 60
            tiny.apply(v3)
            barn.apply(v3)
        tiny.feed(payload)
        barn.feed(payload)
    assert barn.retired == {"stats@tiny"}  # the old owner of the merged keys finished and let go
    assert barn.pipeline is not None
    assert barn.pipeline.nodes == []
    assert tiny.pipeline is not None
    tiny.pipeline.flush()
    tiny.out += [(r.stream, r.epoch, r.value) for r in tiny.pipeline.take().to_hub]

    def windows(out: list[tuple[str, int, dict[str, Any]]], stream: str) -> list[tuple[Any, ...]]:
        return sorted((v["k"], v["window_start"], v["n"], v["s"], v.get("label")) for s, _, v in out if s == stream)

    got = windows(tiny.out + barn.out, "label")
    assert got == windows(fixed.out, "label")  # 0 lost, 0 duplicated, 0 wrong
    assert len({w[:2] for w in got}) == len(got) > 100
    assert not [s for s, _, _ in tiny.out + barn.out if s == "stats"]  # 'label' after it runs at the spoke
    at_barn = [v for s, _, v in barn.out if s == "label"]
    assert at_barn
    assert all(T0 + 30 <= v["window_start"] < T0 + 60 for v in at_barn)
    straddling = [w for w in got if w[1] < T0 + 30 < w[1] + 10]
    assert bool(straddling) is (slide is not None)  # sliding windows across the switch stay with tiny
    assert all(key_hash(v["k"]) >= KEY_SPACE // 2 for v in at_barn)
    assert {e for s, e, _ in barn.out} == {PART_EPOCH + 2}
    assert {e for _, e, _ in tiny.out} == {0}
    assert not [s for s, _, _ in barn.out if s == "double"]  # the chain before the part only feeds it


def test_the_sites_feeding_a_part_report_its_dead_letters_once() -> None:
    app = make_app()
    _, v2, _ = plans(app)
    tiny, barn = Site(app, "tiny"), Site(app, "barn")
    tiny.apply(v2)
    barn.apply(v2)
    for payload in (b"not json", orjson.dumps({"k": "a", "ts": T0 + 40})):  # bad JSON; no field 'x' for 'double'
        tiny.feed(payload)
        barn.feed(payload)
    assert (tiny.dlq, barn.dlq) == (2, 0)
