"""A spoke over its CPU budget and a spoke killed for good: what they ran for other sites moves elsewhere, exactly.

The dead spoke's part of what it ran for field-east, from what it last said it had delivered to the switch, is
recomputed by field-east from the sensor messages it spooled (:mod:`edge_agent.recovery`).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from tests.e2e.conftest import _require_parts, simulate_smart_farm
from tests.e2e.test_cold_chain import _assert_exact

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def overload_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """80 s of probe data; from 15 s to 55 s the barn's CPU budget shrinks to a quarter of what its agent uses."""
    _require_parts()
    return simulate_smart_farm(
        tmp_path_factory.mktemp("overload"), duration=80, faults=["overload:barn:4:40s@15s"], tweak={"settle": "15s"}
    )


@pytest.fixture(scope="module")
def kill_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """90 s of probe data; the barn, which runs field-east's windows, dies for good at 20 s.

    The re-plan comes after the 20 s grace period and its switch after that, at
    50-70 s depending on the machine's load: 90 s leaves whole windows after it.
    """
    _require_parts()
    return simulate_smart_farm(
        tmp_path_factory.mktemp("kill"), duration=90, faults=["kill-site:barn@20s"], tweak={"settle": "15s"}
    )


@pytest.fixture(scope="module")
def dead_mid_handover_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """90 s of probe data; the barn's links slow at 20 s, and it dies for good 2 s before the switch of the move.

    Its last windows before the switch are open: it never delivers its part of the handover.
    """
    _require_parts()
    return simulate_smart_farm(
        tmp_path_factory.mktemp("dead-mid-handover"),
        duration=90,
        faults=["latency:barn:300@20s", "kill-site:old-owner@switch-2s"],
        tweak={"settle": "15s"},
    )


def _moves_away(outcome: Any, site: str, reason: str) -> dict[str, Any]:
    """The first plan change whose reason contains ``reason``; it moved field-east's windows away from ``site``."""
    history = json.loads((outcome.run_dir / "placement.json").read_text())["history"]
    entry: dict[str, Any] | None = next((h for h in history[1:] if h.get("changed") and reason in h["reason"]), None)
    assert entry is not None, (history, outcome.run_dir)
    moved = {m["replica"]: (m["from"], m["to"]) for m in entry["moved"]}
    source, target = moved["probe_means@field-east"]
    assert source == site, moved
    assert target not in (site, "cloud"), moved
    assert any(reason in line for line in outcome.report.plan_history), outcome.report.plan_history
    return entry


def test_an_overloaded_spoke_hands_its_guests_over_without_loss(overload_run: Any) -> None:
    entry = _moves_away(overload_run, "barn", "over its CPU budget")
    assert "site barn over its CPU budget: " in entry["reason"]
    _assert_exact(overload_run)
    assert overload_run.report.destroyed == 0
    barn_log = (overload_run.run_dir / "logs" / "agent-barn.log").read_text()
    assert any("handed over" in line and "probe_means@field-east" in line for line in barn_log.splitlines())


def _assert_repeated_only_after_the_last_heartbeat(run: Any, move: dict[str, Any], switch: float) -> None:
    """The valve commands counted *repeated*: those the barn published and field-east published again.

    They are what the barn published after its last heartbeat, which field-
    east recomputed from the barn's ``at_risk_from`` (at least once at the
    edge); none is counted duplicated.
    """
    valves = [r for r in run.collector.results if r.sink == "valve_bus"]
    recomputed = [r for r in valves if move["at_risk_from"] <= r.value["at"] < switch + 10]
    from_barn = {orjson.dumps(r.value, option=orjson.OPT_SORT_KEYS) for r in valves if r.site == "barn"}
    again = [
        r
        for r in recomputed
        if r.site == "field-east" and orjson.dumps(r.value, option=orjson.OPT_SORT_KEYS) in from_barn
    ]
    assert run.report.repeated == len(again)
    assert all(r.value["at"] >= move["at_risk_from"] for r in again)


def test_a_dead_spokes_part_is_recomputed_by_the_source_site(kill_run: Any) -> None:
    entry = _moves_away(kill_run, "barn", "silent for")
    assert "re-planned without it" in entry["reason"]
    report = kill_run.report
    # field-east spooled what the barn consumed of its sensors and recomputed the barn's part from it: nothing of
    # the barn's open windows, its outbox or what field-east's broker queued for it is lost
    assert report.destroyed == 0, report.sinks
    assert report.destroyed_by == []
    _assert_exact(kill_run)
    placement = json.loads((kill_run.run_dir / "placement.json").read_text())
    (handover,) = [h for h in placement["handovers"] if h["replica"] == "probe_means@field-east"]
    assert handover["source"] == "barn"
    assert handover["recoverer"] == "field-east"
    switch = handover["switch_at"]
    valves = [r for r in kill_run.collector.results if r.sink == "valve_bus"]
    assert any(r.value["at"] >= switch + 10 for r in valves), "no valve command of a window after the switch"
    # the history says what the barn had not delivered and who recomputed it
    (move,) = [m for m in entry["moved"] if m["replica"] == "probe_means@field-east"]
    assert move["recovered_by"] == "field-east"
    assert move.get("recover_by") is None
    assert move["at_risk_from"] < switch, move
    assert handover["recover_from"] == move["at_risk_from"]
    recomputed = [r for r in valves if move["at_risk_from"] <= r.value["at"] < switch + 10]
    assert recomputed, "no valve command of the windows the barn left open came out"
    _assert_repeated_only_after_the_last_heartbeat(kill_run, move, switch)
    hub_log = (kill_run.run_dir / "logs" / "hub.log").read_text()
    warning = next(
        line for line in hub_log.splitlines() if "barn is gone: field-east recomputes its results of " in line
    )
    assert "probe_means@field-east" in warning
    east_log = (kill_run.run_dir / "logs" / "agent-field-east.log").read_text()
    assert any(
        "recomputed barn's part of " in line and "probe_means@field-east" in line for line in east_log.splitlines()
    )


def test_an_old_owner_dead_before_it_delivered_its_part_has_it_recomputed(dead_mid_handover_run: Any) -> None:
    run = dead_mid_handover_run
    placement = json.loads((run.run_dir / "placement.json").read_text())
    (handover,) = [h for h in placement["handovers"] if h["replica"] == "probe_means@field-east"]
    assert (handover["source"], handover["recoverer"]) == ("barn", "field-east"), handover
    assert handover["recover_from"] < handover["switch_at"]
    (move,) = [
        m
        for h in placement["history"]
        for m in h["moved"]
        if m["replica"] == "probe_means@field-east" and m["from"] == "barn"
    ]
    assert move["recovered_by"] == "field-east"
    assert run.report.destroyed == 0, run.report.sinks
    _assert_exact(run)
    hub_log = (run.run_dir / "logs" / "hub.log").read_text()
    assert "barn is gone before it had delivered its part of a handover: field-east recomputes" in hub_log
    east_log = (run.run_dir / "logs" / "agent-field-east.log").read_text()
    assert any("recomputed barn's part of " in line for line in east_log.splitlines())
