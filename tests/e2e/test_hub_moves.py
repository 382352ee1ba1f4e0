"""A windowed replica moves from a spoke to the hub and back mid-run: each move loses and repeats nothing.

The smart farm's field-east is too small for its probes, so its windows run
at the barn, 5 ms away. Here the barn is field-east's only spoke within
reach (the shed and field-west are left out of the topology), and the
per-probe window is unscoped (not ``local``), so the hub may run it. When
the barn's CPU budget shrinks, no spoke can take field-east's chain and the
ILP places it at the hub (spoke to hub); once the budget is back, a re-plan
returns it to the barn (hub to spoke). Both moves are handed over at a switch
time, the hub running the old and new placement's queries side by side.

What the run changes in the bundled example, in files written to its
directory: the window ``probe_means`` unscoped and with a sink of its own
(``probe_means_bus``, so each window's values are checked), the farm-wide
window 10 s instead of 30 s (a switch to or from the hub lies on the period
of every window downstream, so both moves fit in one short run), and the
topology without the shed and field-west. The hub re-plans on site health
only, so the run makes exactly these two moves: a drift re-plan when the
sensors stop (their rates fall) would move the window a third time.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulate.checking import Reference
from spanedge.loader import load_app
from tests.e2e.conftest import SMART_FARM, _require_parts
from tests.e2e.test_cold_chain import _assert_exact

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

WINDOW_S = 10.0
#: The edge's windows close 1.2 s after their end (out-of-orderness and disorder), the hub's at their end.
SETTLE_S = 5.0
#: The barn's budget shrinks at 1 s; a second overload fault, when the move shows, ends it 2 s later.
FAULTS = ["overload:barn:4@1s", "overload:barn:4:2s@replan"]

#: (text in the bundled app, what replaces it): each occurs exactly once.
APP_EDITS = [
    ('    scope="local",\n    keys=40,\n', "    keys=40,\n"),  # probe_means: may run at the hub
    ('        size="30s",\n', '        size="10s",\n'),  # dry_spots
    # the valve coils: their device rule keeps the valve chain at the spokes that declare the controller,
    # and this run moves the probe windows to the hub
    (
        'valves.sink(sinks.modbus("device:valves", points=VALVES, key="probe", value="open"), name="valve_coils")\n',
        "",
    ),
]
WINDOW_SINK = 'minute.sink(sinks.mqtt("farm/probe-means"), name="probe_means_bus")\n'


def write_variant(directory: Path) -> tuple[Path, Path]:
    """The smart farm's app and sites.yaml with the changes above, written to ``directory``."""
    source = (SMART_FARM / "app.py").read_text()
    for old, new in APP_EDITS:
        assert source.count(old) == 1, f"examples/smart_farm/app.py changed: {old!r} not found once"
        source = source.replace(old, new)
    data = yaml.safe_load((SMART_FARM / "sites.yaml").read_text())
    gone = {"shed", "field-west"}
    for site in gone:
        del data["sites"][site]
        data["simulation"]["sensors"].pop(site, None)
    data["links"] = [link for link in data["links"] if not gone & set(link["between"])]
    data["simulation"]["settle"] = f"{SETTLE_S:g}s"
    directory.mkdir(parents=True, exist_ok=True)
    app, sites = directory / "app.py", directory / "sites.yaml"
    app.write_text(source + WINDOW_SINK)
    sites.write_text(yaml.safe_dump(data, sort_keys=False))
    return app, sites


@pytest.fixture(scope="module")
def hub_moves(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """125 s of probe data; the barn over its CPU budget from 1 s until its windows moved to the hub."""
    _require_parts()
    from simulate.processes import spanedge_command
    from simulate.runner import Options, run

    directory = tmp_path_factory.mktemp("hub-moves")
    app, sites = write_variant(directory)
    hub = [*spanedge_command("hub"), "--drift-threshold", "1000"]  # no drift re-plans
    # 125 s, not less: on a loaded machine the hub's deploy of the first move takes long enough that its switch
    # is postponed by 30 s, and the move back and its first window must still fall inside the run
    opts = Options(
        sites=sites, app=app, duration=125, faults=FAULTS, mode="managed", run_dir=directory / "run", hub_command=hub
    )
    return asyncio.run(run(opts))


def _move(outcome: Any, reason: str) -> dict[str, Any]:
    """The first plan change whose reason contains ``reason``."""
    history = json.loads((outcome.run_dir / "placement.json").read_text())["history"]
    entry: dict[str, Any] | None = next((h for h in history[1:] if h.get("changed") and reason in h["reason"]), None)
    assert entry is not None, (history, outcome.run_dir)
    return entry


def _switches(outcome: Any) -> tuple[float, float]:
    """T1 and T2: the first and the last window start past the hub's part of ``probe_means_bus``, by its results."""
    at_hub = sorted({r.value["window_start"] for r in outcome.collector.results if _at(r, "cloud")})
    assert at_hub, "no window of probe_means came from the hub"
    return at_hub[0], at_hub[-1] + WINDOW_S


def _at(result: Any, site: str) -> bool:
    """Whether ``result`` is a window of ``probe_means`` published on the broker of ``site``."""
    return bool(result.sink == "probe_means_bus" and result.site == site)


def test_the_window_moves_to_the_hub_and_back_in_the_plan_history(hub_moves: Any) -> None:
    away = _move(hub_moves, "over its CPU budget")
    back = _move(hub_moves, "capacity restored")
    assert "site barn over its CPU budget: " in away["reason"]
    assert back["at"] > away["at"]
    moved = [{m["replica"]: (m["from"], m["to"]) for m in e["moved"]} for e in (away, back)]
    assert moved[0]["probe_means"] == ("barn", "cloud")  # no other spoke within reach has room
    assert moved[1]["probe_means"] == ("cloud", "barn")
    assert moved[0]["probe_means_bus"] == ("barn", "cloud")  # the sink follows its window
    lines = hub_moves.report.plan_history
    assert any("probe_means barn->cloud" in line for line in lines), lines
    assert any("probe_means cloud->barn" in line for line in lines), lines
    # the hub's part lies between the two re-plans, on the windows' bounds, a handover delay after each
    t1, t2 = _switches(hub_moves)
    assert away["at"] < t1 < back["at"] < t2, (away["at"], t1, back["at"], t2)
    assert t1 % WINDOW_S == 0
    assert t2 % WINDOW_S == 0


def test_every_result_comes_out_once_with_the_reference_values(hub_moves: Any) -> None:
    _assert_exact(hub_moves)
    # the spokes forward field-east's probes to the hub once (field-east), not also from the barn
    for site in hub_moves.report.sites:
        assert site.dead_lettered == site.expected_dead, site


def test_the_windows_around_each_switch_come_from_their_owner_once_and_right(hub_moves: Any) -> None:
    outcome = hub_moves
    app = load_app(outcome.run_dir.parent / "app.py")
    reference = Reference.of(app, outcome.sent, SETTLE_S, outcome.started_at)
    want: dict[tuple[str, float], dict[str, Any]] = {}
    for item in reference.expected.sinks["probe_means_bus"]:
        want[item.value["probe"], round(item.value["window_start"], 3)] = item.value
    t1, t2 = _switches(outcome)
    around = {t1 - WINDOW_S: "barn", t1: "cloud", t2 - WINDOW_S: "cloud", t2: "barn"}
    assert t2 + WINDOW_S <= reference.cutoff, "the run ended before the first window after the move back closed"
    for start, owner in around.items():
        expected = {probe: value for (probe, s), value in want.items() if s == start}
        assert expected, start
        got = [r for r in outcome.collector.results if r.sink == "probe_means_bus"]
        got = [r for r in got if round(r.value["window_start"], 3) == start]
        assert sorted(r.value["probe"] for r in got) == sorted(expected), start  # each window once
        assert {r.site for r in got} == {owner}, start
        for r in got:
            value = expected[r.value["probe"]]
            assert r.value["n"] == value["n"], (start, r.value, value)
            assert r.value["moisture"] == pytest.approx(value["moisture"]), (start, r.value, value)
            assert r.value["temp_c"] == pytest.approx(value["temp_c"]), (start, r.value, value)
