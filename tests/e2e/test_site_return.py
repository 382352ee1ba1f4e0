"""A spoke killed and back after the re-plan around it: its source site recomputed its part, nothing comes out twice."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import _require_parts, simulate_smart_farm
from tests.e2e.test_site_faults import _assert_repeated_only_after_the_last_heartbeat, _moves_away

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def revive_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """110 s of probe data; the barn's agent dies at 20 s and comes back with its state directory 55 s later.

    It is gone after the 20 s grace, re-planned around at 40-50 s (field-east recomputes its part of field-east's
    windows), and back after the switch.
    """
    _require_parts()
    return simulate_smart_farm(
        tmp_path_factory.mktemp("revive"), duration=110, faults=["kill-agent:barn:55s@20s"], tweak={"settle": "15s"}
    )


def test_a_dead_spoke_that_comes_back_runs_no_part_its_source_site_recomputed(revive_run: Any) -> None:
    entry = _moves_away(revive_run, "barn", "silent for")
    (move,) = [m for m in entry["moved"] if m["replica"] == "probe_means@field-east"]
    # field-east recomputed the barn's part from its spool while the barn was gone
    assert move["recovered_by"] == "field-east"
    assert move["at_risk_from"] < move["switch_at"], move
    east_log = (revive_run.run_dir / "logs" / "agent-field-east.log").read_text()
    assert any("recomputed barn's part of " in line for line in east_log.splitlines())
    # back, it took the hub's new plan before any data: the plan it saved, which still ran field-east's windows
    # for every time, never ran again, and the new plan gives it no part of the handover from it
    barn_log = (revive_run.run_dir / "logs" / "agent-barn.log").read_text()
    restarted = barn_log.split("=== start ")[-1]
    assert "resuming plan version" not in restarted, restarted
    assert "applying plan version" in restarted
    assert "handed over" not in restarted, restarted
    # every valve command and every farm-wide window, from before its death to the end, came out once and right:
    # the hub's windows waited for field-east's recomputed results; only what the barn published after its last
    # heartbeat came out again, from field-east (at least once at the edge, counted repeated)
    report = revive_run.report
    assert report.destroyed == 0
    for sink in ("valve_bus", "farm_dashboard"):
        (check,) = [c for c in report.sinks if c.sink == sink]
        assert check.checked > 0
        assert (check.missing, check.lost_records, check.duplicates, check.wrong, check.unexpected) == (0, 0, 0, 0, 0)
    _assert_repeated_only_after_the_last_heartbeat(revive_run, move, move["switch_at"])
