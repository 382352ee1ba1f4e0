"""How a keyed window's records spread over its keys: measured at the sites, cut where they divide evenly."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import orjson
import pytest

import placement
from edge_agent.heartbeat import KeySpread
from hub.control.planning import plan_app
from hub.control.registry import SiteRegistry
from hub.control.site_health import planned_load
from placement.problem import Previous
from placement.split import Cut, cut_of
from spanedge import App
from spanedge.errors import InfeasiblePlacement
from spanedge.keyrange import BUCKET_WIDTH, KEY_BUCKETS, KEY_SPACE, Share, even_cut, key_hash, share_below, spread_of
from spanedge.operators import WindowKind, WindowSpec
from spanedge.plan import KeyPart, Plan
from spanedge.runtime.windows import WindowState
from tests.unit.placement.test_split import make_app, make_sites

#: 17 sensors, one of which sends as much as eight others.
SKEWED = {f"e{i:02d}": (8.0 if i == 3 else 1.0) for i in range(17)}


def bucket(key: Any) -> int:
    return key_hash(key) // BUCKET_WIDTH


def test_the_spread_counts_records_by_bucket_of_the_key_hash() -> None:
    spread = spread_of({"a": 3, "b": 2, 7: 1})
    assert sum(spread.values()) == 6
    assert spread[bucket("a")] >= 3
    assert spread[bucket(7)] == spread[bucket("7")]  # a key counts by its text, as the split filter hashes it
    assert all(0 <= b < KEY_BUCKETS for b in spread)


def test_the_even_cut_divides_the_records_not_the_key_space() -> None:
    spread = spread_of(SKEWED)
    found = even_cut(spread)
    assert found is not None
    at, share = found
    assert at % BUCKET_WIDTH == 0
    assert 0 < at < KEY_SPACE
    total = sum(SKEWED.values())
    below = sum(n for k, n in SKEWED.items() if key_hash(k) < at) / total
    assert share == pytest.approx(below)
    assert share == share_below(spread, at)
    # no other boundary divides the records more evenly
    best = min(abs(share_below(spread, b * BUCKET_WIDTH) - 0.5) for b in range(1, KEY_BUCKETS))  # type: ignore[operator]
    assert abs(share - 0.5) == pytest.approx(best)
    assert (share, share_below(spread, KEY_SPACE // 2)) == (0.5, 0.25)  # halves of the key space: 25% and 75%
    assert even_cut({}) is None
    assert share_below({}, at) is None


def spec(
    kind: WindowKind, size: float | None = None, slide: float | None = None, gap: float | None = None
) -> WindowSpec:
    return WindowSpec("k", kind, size, slide, gap, ())


def test_a_window_counts_the_records_it_takes_per_key_once() -> None:
    sliding = WindowState(spec(WindowKind.SLIDING, size=10.0, slide=5.0))
    for t in (1.0, 2.0, 6.0):
        sliding.add({"k": "a"}, t, -math.inf)  # each record is in two windows, counted once
    sliding.add({"k": "b"}, 3.0, -math.inf)
    assert sliding.take_key_records() == {"a": 3, "b": 1}
    assert sliding.take_key_records() == {}
    half = KEY_SPACE // 2
    low = next(k for k in (f"k{i}" for i in range(100)) if key_hash(k) < half)
    high = next(k for k in (f"k{i}" for i in range(100)) if key_hash(k) >= half)
    owned = WindowState(spec(WindowKind.TUMBLING, size=10.0))
    owned.own_shares((Share(half, KEY_SPACE, -math.inf, math.inf, 0),))
    owned.add({"k": low}, 1.0, -math.inf)
    owned.add({"k": high}, 1.0, -math.inf)
    assert owned.take_key_records() == {high: 1}  # another site's keys are its own to count
    session = WindowState(spec(WindowKind.SESSION, gap=5.0))
    session.add({"k": "s"}, 1.0, -math.inf)
    session.add({"k": "s"}, 2.0, -math.inf)
    assert session.take_key_records() == {"s": 2}


def test_the_agent_reports_a_recent_spread_that_fades() -> None:
    spread = KeySpread()
    first = spread.update({"app": {"stats@tiny": {"a": 4}}})
    assert first == {"app": {"stats@tiny": {str(bucket("a")): 4.0}}}
    second = spread.update({"app": {"stats@tiny": {"a": 2}}})
    assert second["app"]["stats@tiny"][str(bucket("a"))] == 4.0  # 4 halved, plus 2
    for _ in range(12):
        last = spread.update({})
    assert last == {}  # a replica that takes nothing more fades out


def test_the_registry_sums_the_spread_of_every_site_running_a_share(tmp_path: Any) -> None:
    sites = make_sites(1.0)
    registry = SiteRegistry(sites)
    plan = placement.solve(make_app(), make_sites(2.0))

    def beat(site: str, spread: Any) -> None:
        registry.heartbeat(site, orjson.dumps({"site": site, "ts": 0, "apps": [], "key_spread": spread}))

    beat("tiny", {"split": {"stats@tiny": {"3": 5, "4": 1.5}, "nope": {"3": 1}}})
    beat("barn", {"split": {"stats@tiny": {"40": 2, "x": 9, "99": 1, "5": -1, "6": True}}, "other": {"y": {"1": 1}}})
    assert registry.key_spread("split", plan) == {"stats@tiny": {3: 5.0, 4: 1.5, 40: 2.0}}
    assert registry.key_spread("other", plan) == {}


def test_a_replan_hands_the_measured_spread_to_the_planner() -> None:
    sites = make_sites(1.0)
    registry = SiteRegistry(sites)
    app = make_app()
    v1 = placement.solve(app, make_sites(2.0))
    seen: dict[str, Any] = {}

    def planner(app: Any, sites: Any, **options: Any) -> Plan:
        seen.update(options)
        return v1

    plan_app(planner, registry, app, 2, source="", filename="app.py", weights=None, slo_ms=None)
    assert "key_spread" not in seen  # a first deploy has nothing measured to hand over
    plan_app(planner, registry, app, 2, source="", filename="app.py", weights=None, slo_ms=None, previous=v1)
    assert seen["key_spread"] is None
    spread = {"stats@tiny": {3: 1.0}}
    plan_app(
        planner,
        registry,
        app,
        2,
        source="",
        filename="app.py",
        weights=None,
        slo_ms=None,
        previous=v1,
        key_spread=spread,
    )
    assert seen["key_spread"] == spread


def skewed_split() -> tuple[App, Plan, dict[int, float]]:
    """The app, its plan split with tiny's budget halved, and the skewed spread it was cut by."""
    app = make_app()
    v1 = placement.solve(app, make_sites(2.0))
    spread = spread_of(SKEWED)
    v2 = placement.solve(app, make_sites(1.0), previous=Previous.of(v1, key_spread={"stats@tiny": spread}), version=2)
    return app, v2, spread


def test_the_planner_cuts_a_skewed_window_where_its_records_divide_evenly() -> None:
    app, v2, spread = skewed_split()
    (part,) = v2.parts
    at, share = even_cut(spread) or (0, 0.0)
    assert (part.keys_from, part.keys_before) == (at, KEY_SPACE)
    assert part.share == pytest.approx(1 - share, abs=1e-4)
    assert f"{1 - share:.0%} of its records as measured" in part.reason
    load = planned_load([(v2, app)])
    window = 1.5  # cores of the whole window at 100 records/s (make_app)
    assert load["barn"] == pytest.approx(0.01 + part.share * (window + 0.01 + 0.01), rel=0.05)
    again = Plan.from_dict(orjson.loads(v2.to_json()))
    assert again.parts == v2.parts
    v1 = placement.solve(app, make_sites(2.0))
    unmeasured = placement.solve(app, make_sites(1.0), previous=Previous.of(v1), version=2)
    assert "share" not in unmeasured.to_dict()["parts"][0]  # the key space's half, as before


def test_a_replan_keeps_the_cut_while_it_still_divides_the_records() -> None:
    app, v2, spread = skewed_split()
    (part,) = v2.parts
    drifted = {b: n * (1.3 if b % 2 else 1.0) for b, n in spread.items()}  # noisier measurements
    v3 = placement.solve(app, make_sites(1.0), previous=Previous.of(v2, key_spread={"stats@tiny": drifted}), version=3)
    assert [(p.replica, p.site, p.keys_from) for p in v3.parts] == [(part.replica, part.site, part.keys_from)]


def test_a_window_one_key_carries_is_not_split() -> None:
    app = make_app()
    v1 = placement.solve(app, make_sites(2.0))
    hot = {bucket("only"): 95.0, bucket("only") ^ 1: 5.0}
    assert cut_of("stats@tiny", Previous.of(v1, key_spread={"stats@tiny": hot})) is None
    with pytest.raises(InfeasiblePlacement):
        placement.solve(app, make_sites(1.0), previous=Previous.of(v1, key_spread={"stats@tiny": hot}), version=2)
    earlier = KeyPart("stats@tiny", "barn", KEY_SPACE // 4, KEY_SPACE)
    split = dataclasses.replace(Previous.of(v1), parts=(earlier,))
    # nothing measured: the previous cut, its keys assumed uniform
    assert cut_of("stats@tiny", split) == Cut(KEY_SPACE // 4, 0.25, measured=False)
    still = dataclasses.replace(split, key_spread={"stats@tiny": {0: 1.0, KEY_BUCKETS - 1: 1.0}})
    assert cut_of("stats@tiny", still) == Cut(KEY_SPACE // 4, 0.5, measured=True)  # it still divides them
    moved = dataclasses.replace(split, key_spread={"stats@tiny": {40: 1.0, 50: 1.0}})
    assert cut_of("stats@tiny", moved) == Cut(41 * BUCKET_WIDTH, 0.5, measured=True)  # below it: none; cut anew
