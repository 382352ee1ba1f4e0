"""The chaos run's schedule: seeded, every kind of the mix, one fault at a time per part, all healed before the end."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from simulate.chaos import KINDS, QUIET_S, WARMUP_S, chaos_faults
from simulate.faults import FaultKind, parse_faults
from spanedge.sites import Sites, load_sites

FARM = Path(__file__).resolve().parents[3] / "examples" / "smart_farm" / "sites.yaml"


@pytest.fixture(scope="module")
def farm() -> Sites:
    return load_sites(FARM)


def _end(fault: object) -> float:
    return float(fault.at + (fault.duration or 0.0))  # type: ignore[attr-defined]


def test_the_same_seed_gives_the_same_faults_and_another_seed_others(farm: Sites) -> None:
    assert chaos_faults(3, farm, 900) == chaos_faults(3, farm, 900)
    assert chaos_faults(3, farm, 900) != chaos_faults(4, farm, 900)


def test_a_long_run_mixes_every_kind_and_each_heals_before_the_quiet_end(farm: Sites) -> None:
    faults = parse_faults(chaos_faults(11, farm, 900), farm)
    assert {f.kind.value for f in faults} == set(KINDS)
    assert all(f.at >= WARMUP_S and _end(f) <= 900 - QUIET_S for f in faults)
    spokes = {s.name for s in farm.spokes}
    assert {f.site for f in faults if f.site is not None} <= spokes


def test_no_part_has_two_faults_at_once(farm: Sites) -> None:
    for seed in range(20):
        faults = parse_faults(chaos_faults(seed, farm, 600), farm)
        by_part: dict[str, list[tuple[float, float]]] = {}
        for f in faults:
            if f.kind is FaultKind.LATENCY:
                continue  # a drift's two steps: the slow-down and the way back
            by_part.setdefault(f.site or "hub", []).append((f.at, _end(f)))
        for spans in by_part.values():
            spans.sort()
            assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans)), spans


def test_a_run_too_short_or_without_spokes_is_refused_with_what_it_needs(farm: Sites) -> None:
    with pytest.raises(ValueError, match="needs --duration of at least 100s"):
        chaos_faults(1, farm, 60)
    alone = Sites.of({"sites": {"cloud": {"tier": "hub", "broker": "mqtt://localhost:1883"}}}, "test")
    with pytest.raises(ValueError, match="at least one spoke"):
        chaos_faults(1, alone, 900)
