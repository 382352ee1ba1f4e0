"""Stage selection: cumulative, deterministic, rounded up, and varied between versions."""

from __future__ import annotations

import itertools
import random

from hypothesis import given
from hypothesis import strategies as st

from hub.control.rollout.selection import increments, select, site_order
from hub.control.rollout.stages import Fleet, Stage, parse_stages
from tests.unit.hub.control.rollout.strategies import fleets, stage_lists

TRUCKS = {f"truck-{i}": {"kind": "truck"} for i in range(8)} | {f"bus-{i}": {"kind": "bus"} for i in range(4)}
versions = st.text("0123456789abcdef", min_size=1, max_size=8)


def test_the_issue_s_stages_on_eight_trucks_and_four_buses() -> None:
    stages = parse_stages("kind=truck:1, kind=truck:25%, *", TRUCKS)
    canary, quarter, everything = select(stages, TRUCKS, "cold-chain", "v2")
    assert len(canary) == 1
    assert len(quarter) == 2  # 25% of 8 trucks, the canary one of them
    assert set(canary) < set(quarter) <= {s for s in TRUCKS if s.startswith("truck")}
    assert everything == tuple(sorted(TRUCKS))
    assert increments([canary, quarter, everything]) == (
        canary,
        tuple(sorted(set(quarter) - set(canary))),
        tuple(sorted(set(TRUCKS) - set(quarter))),
    )


def test_the_canaries_follow_the_hash_order_of_app_version_and_site() -> None:
    order = site_order("cold-chain", "v2", TRUCKS)
    stages = parse_stages("kind=truck:3, *", TRUCKS)
    assert select(stages, TRUCKS, "cold-chain", "v2")[0] == tuple(sorted([s for s in order if "truck" in s][:3]))


def test_another_version_or_app_picks_other_canaries() -> None:
    stages = parse_stages("kind=truck:1, *", TRUCKS)
    canaries = {select(stages, TRUCKS, "cold-chain", f"v{n}")[0] for n in range(20)}
    assert len(canaries) > 1
    assert len({select(stages, TRUCKS, f"app-{n}", "v2")[0] for n in range(20)}) > 1


def test_a_stage_already_reached_adds_no_site() -> None:
    stages = parse_stages("kind=truck:25%, kind=truck:2, kind=truck:1, *", TRUCKS)
    selected = select(stages, TRUCKS, "cold-chain", "v2")
    assert [len(s) for s in selected] == [2, 2, 2, 12]
    assert increments(selected)[1:3] == ((), ())


def test_a_stage_counts_the_sites_earlier_stages_changed_with_another_selector() -> None:
    fleet = {"a": {"kind": "truck", "fleet": "north"}, "b": {"kind": "truck"}, "c": {"fleet": "north"}}
    stages = parse_stages("kind=truck+fleet=north, fleet=north:1, *", fleet)
    assert select(stages, fleet, "app", "v2")[:2] == (("a",), ("a",))


@given(fleets, stage_lists(), st.text(max_size=5), versions)
def test_selection_is_cumulative_and_ends_with_every_site(
    fleet: Fleet, stages: tuple[Stage, ...], app: str, version: str
) -> None:
    selected = select(stages, fleet, app, version)
    assert len(selected) == len(stages)
    for before, after in itertools.pairwise(selected):
        assert set(before) <= set(after)
    assert selected[-1] == tuple(sorted(fleet))
    assert all(list(s) == sorted(s) for s in selected)


@given(fleets, stage_lists(), versions, st.randoms(use_true_random=False))
def test_selection_is_deterministic_whatever_the_fleet_s_order(
    fleet: Fleet, stages: tuple[Stage, ...], version: str, rnd: random.Random
) -> None:
    shuffled = list(fleet.items())
    rnd.shuffle(shuffled)
    assert select(stages, dict(shuffled), "app", version) == select(stages, fleet, "app", version)


@given(fleets, stage_lists(), versions)
def test_each_stage_adds_only_its_own_sites_and_just_enough(
    fleet: Fleet, stages: tuple[Stage, ...], version: str
) -> None:
    selected = select(stages, fleet, "app", version)
    for stage, sites, added in zip(stages, selected, increments(selected), strict=True):
        matching = [s for s in fleet if stage.rest or stage.matches(fleet[s])]
        assert all(s in matching for s in added)
        on = sum(1 for s in matching if s in sites)
        target = stage.target(len(matching))
        assert on >= target
        if added:
            assert on == target
        if matching:
            assert on >= 1  # at least one site per stage that selects any
