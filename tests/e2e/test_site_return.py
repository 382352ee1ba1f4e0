"""A spoke killed and back before its handover is dropped: it finishes its windows, and nothing comes out twice."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import _require_parts, simulate_smart_farm
from tests.e2e.test_site_faults import _moves_away

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def revive_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """110 s of probe data; the barn's agent dies at 20 s and comes back with its state directory 55 s later.

    It is gone after the 20 s grace, re-planned around at 40-50 s, and back after the switch.
    """
    _require_parts()
    return simulate_smart_farm(
        tmp_path_factory.mktemp("revive"), duration=110, faults=["kill-agent:barn:55s@20s"], tweak={"settle": "15s"}
    )


def test_a_dead_spoke_that_comes_back_in_time_finishes_its_windows(revive_run: Any) -> None:
    entry = _moves_away(revive_run, "barn", "silent for")
    (move,) = [m for m in entry["moved"] if m["replica"] == "probe_means@field-east"]
    assert move["recover_by"] == move["switch_at"] + 600
    # the history and the hub's log say it came back in time
    assert move["at_risk_from"] < move["back_at"] <= move["recover_by"], move
    hub_log = (revive_run.run_dir / "logs" / "hub.log").read_text()
    assert any("barn is back at " in line and "probe_means@field-east" in line for line in hub_log.splitlines())
    # back, it took the hub's new plan before any data: the plan it saved, which still ran field-east's windows
    # for every time, never ran again
    barn_log = (revive_run.run_dir / "logs" / "agent-barn.log").read_text()
    restarted = barn_log.split("=== start ")[-1]
    assert "resuming plan version" not in restarted, restarted
    assert "applying plan version" in restarted
    # with its checkpoint and the records field-east's broker queued for it, it finished the windows before the
    # switch: every valve command, from before its death to the end, came out once and right
    report = revive_run.report
    (valves,) = [c for c in report.sinks if c.sink == "valve_bus"]
    assert valves.checked > 0
    assert (valves.missing, valves.lost_records, valves.duplicates, valves.wrong, valves.unexpected) == (0, 0, 0, 0, 0)
    assert report.destroyed == 0
    # its results for the hub's farm-wide windows came after those windows closed: Spark drops them as late, so
    # only the east windows from its last frontier to the switch lack them; nothing is repeated
    (farm,) = [c for c in report.sinks if c.sink == "farm_dashboard"]
    assert (farm.duplicates, farm.unexpected, farm.extra_records) == (0, 0, 0), farm
    span = 30.0
    at_risk = range(int(move["at_risk_from"] // span), int(move["switch_at"] // span) + 1)
    assert farm.wrong + farm.missing <= len(at_risk), (farm, move)
