"""A re-plan moves a windowed replica between spokes mid-run, after a spoke was cut off: nothing lost or repeated."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simulate.report import epoch
from tests.e2e.conftest import CUT_WEST, CUT_WEST_HEALS
from tests.e2e.test_cold_chain import _assert_exact

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_the_moved_windows_come_out_once_with_every_record(move_run: Any) -> None:
    placement = json.loads((move_run.run_dir / "placement.json").read_text())
    history = placement["history"]
    moves = [h for h in history[1:] if h.get("changed")]
    assert moves, (history, move_run.run_dir)
    moved = {m["replica"]: (m["from"], m["to"]) for m in moves[0]["moved"]}
    # away from barn to another spoke: which one (shed, or field-west with room) depends on what
    # the agents measured on the links, which a busy machine shifts
    source, target = moved["probe_means@field-east"]
    assert (source, target in ("shed", "field-west")) == ("barn", True), moved
    handovers = {h["replica"]: h for h in placement["handovers"]}
    switch = handovers["probe_means@field-east"]["switch_at"]
    assert switch % 10 == 0  # on the 10 s windows' bounds
    # the history says what the window held at the barn and when the barn had handed it over
    move = next(m for m in moves[0]["moved"] if m["replica"] == "probe_means@field-east")
    assert move["state_bytes"] > 0, move
    assert move["handed_over_at"] > switch, (move, switch)
    assert move["handover_s"] == pytest.approx(move["handed_over_at"] - moves[0]["at"], abs=1e-3)
    assert move_run.report.plan_changes >= 1
    valves = next(c for c in move_run.report.sinks if c.sink == "valve_bus")
    assert valves.checked > 0
    checked_after = [r for r in move_run.collector.results if r.sink == "valve_bus" and r.value["at"] > switch]
    assert checked_after, "no valve command of a window after the switch"
    _assert_exact(move_run)
    barn_log = (move_run.run_dir / "logs" / "agent-barn.log").read_text()
    assert any("handed over" in line and "probe_means@field-east" in line for line in barn_log.splitlines())


def test_a_cut_off_spoke_holds_the_hub_windows_back_and_loses_nothing(move_run: Any) -> None:
    """The farm-wide window (Spark, ``allowed_lateness`` 0) waits for field-west's queued dry readings."""
    assert any(f"fault {CUT_WEST}" in e for e in move_run.events)
    healed = move_run.started_at + CUT_WEST_HEALS
    _assert_exact(move_run)
    dashboard = next(c for c in move_run.report.sinks if c.sink == "farm_dashboard")
    assert dashboard.checked > 0
    cut = [
        r
        for r in move_run.collector.results
        if r.sink == "farm_dashboard" and move_run.started_at + 4 < (epoch(r.value["window_end"]) or 0) < healed
    ]
    assert cut, "no farm-wide window ended within field-west's cut"
    assert all(r.received_at > healed for r in cut), [(r.value, r.received_at - healed) for r in cut]
    hub_log = (move_run.run_dir / "logs" / "hub.log").read_text()
    assert "the hub's windows wait for field-west" in hub_log, move_run.run_dir
    assert "field-west has caught up" in hub_log, move_run.run_dir
