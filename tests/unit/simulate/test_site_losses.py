"""A site killed for good: what it destroyed is counted as such, everything else is checked as usual."""

from __future__ import annotations

import math
from typing import Any

from simulate.checking import Reference, check_sinks
from simulate.results import Result
from simulate.sensors import Message, Sent
from simulate.site_losses import Destroyed, destroyed_by, lookback_of
from spanedge.loader import load_app
from tests.conftest import EXAMPLES

APP = load_app(EXAMPLES / "cold_chain" / "app.py")
T0 = 1_700_000_000.0


def _sent(site: str, t: float, unit: str) -> Sent:
    value = {"unit": unit, "ts": t, "temp_f": 41.0}
    return Sent(Message(site, "readings", 0, 0, unit, f"trucks/x/{unit}/temp", 0.0, t, value, b"", None), t)


def test_the_reference_cutoff_ignores_dead_sites() -> None:
    sent = [_sent("truck-7", T0 + i, "u1") for i in range(40)] + [_sent("truck-9", T0 + i, "u9") for i in range(12)]
    assert Reference.of(APP, sent, settle=2.0, t0=T0).cutoff == T0 + 11 - 2.0
    assert Reference.of(APP, sent, settle=2.0, t0=T0, dead=["truck-9"]).cutoff == T0 + 39 - 2.0


def test_missing_results_that_depend_on_destroyed_records_are_destroyed_the_others_lost() -> None:
    sent = [_sent("truck-7", T0 + i, "u1") for i in range(40)] + [_sent("truck-9", T0 + i, "u9") for i in range(40)]
    reference = Reference.of(APP, sent, settle=0.0, t0=T0)
    windows = [i.value for i in reference.expected.sinks["local_stats"] if i.value["window_end"] <= reference.cutoff]
    u9 = [w for w in windows if w["unit"] == "u9"]
    # truck-9 died holding its window [10, 20): only that window is missing, and a u1 window too
    got = [w for w in windows if w not in (u9[1], next(w for w in windows if w["unit"] == "u1"))]
    results = [Result("local_stats", "x", w, w["window_end"] + 1) for w in got]
    destroyed = [Destroyed("truck-9", T0 + 12, T0 + 18, "truck-9")]
    (stats, _), _ = check_sinks(APP, reference, results, T0, destroyed)
    assert (stats.destroyed, stats.missing, stats.wrong) == (1, 1, 0)
    assert reference.missing(results, reference.at_risk(APP, destroyed)) == 1


def test_a_result_at_risk_that_arrived_whole_is_simply_right() -> None:
    sent = [_sent("truck-9", T0 + i, "u9") for i in range(40)]
    reference = Reference.of(APP, sent, settle=0.0, t0=T0)
    windows = [i.value for i in reference.expected.sinks["local_stats"] if i.value["window_end"] <= reference.cutoff]
    results = [Result("local_stats", "x", w, w["window_end"] + 1) for w in windows]
    (stats, _), _ = check_sinks(APP, reference, results, T0, [Destroyed("truck-9", T0, T0 + 40, "truck-9")])
    assert (stats.destroyed, stats.missing, stats.wrong, stats.checked) == (0, 0, 0, len(windows))


def _placement(**handover: Any) -> dict[str, Any]:
    return {
        "replicas": [
            {"replica": "probes@field-east", "site": "field-east"},
            {"replica": "probe_means@field-east", "site": "shed"},
            {"replica": "probe_means@field-west", "site": "field-west"},
        ],
        "handovers": [{"replica": "probe_means@field-east", "source": "barn", "target": "shed", **handover}],
        "history": [
            {"version": 1, "at": 0.0, "moved": [], "changed": True},
            {
                "version": 2,
                "at": 140.0,
                "changed": True,
                "moved": [{"replica": "probe_means@field-east", "from": "barn", "to": "shed"}],
            },
        ],
    }


def test_a_dead_spoke_destroys_its_own_records_and_its_guests_until_their_switch() -> None:
    windows = {"probe_means": 10.0, "dry_spots": 30.0}  # the hub's window dies with nobody
    (lost,) = destroyed_by({"barn": 100.0}, _placement(switch_at=150.0), ["field-east", "field-west"], windows)
    assert lost == Destroyed("field-east", 87.0, 150.0, "barn")
    assert lost.covers("field-east", 149.9)
    assert not lost.covers("field-east", 150.0)
    assert not lost.covers("field-west", 120.0)
    assert lost.describe(0.0) == "records of field-east from 87 s to 150 s: lost with barn"
    # killed after the move, the barn held nothing of field-east's any more; a source site loses its own records
    assert destroyed_by({"barn": 200.0}, _placement(switch_at=150.0), ["field-east"], windows) == []
    assert destroyed_by({"field-east": 200.0}, _placement(switch_at=150.0), ["field-east"], windows) == [
        Destroyed("field-east", 197.0, math.inf, "field-east")
    ]
    assert lookback_of([10.0, 30.0]) == 33.0
    (refused,) = destroyed_by({"barn": 100.0}, _placement(switch_at=150.0), ["field-east"], windows, ["barn"])
    assert refused.describe(0.0) == "records of field-east from 87 s to 150 s: refused with revoked barn"


def test_a_dead_spoke_behind_its_input_destroys_from_what_it_last_said_it_delivered() -> None:
    windows = {"probe_means": 10.0}
    placement = _placement(switch_at=150.0)
    move = placement["history"][1]["moved"][0]
    move["at_risk_from"] = 80.0  # its heartbeats: every result before 80 s delivered, sinks' included
    assert destroyed_by({"barn": 100.0}, placement, ["field-east"], windows) == [
        Destroyed("field-east", 70.0, 150.0, "barn")  # the window that ends past 80 s
    ]
    move["at_risk_from"] = 99.5  # closer to its death than the lookback: the lookback from the kill stands
    assert destroyed_by({"barn": 100.0}, placement, ["field-east"], windows) == [
        Destroyed("field-east", 87.0, 150.0, "barn")
    ]


def test_a_part_its_source_site_recomputed_destroys_nothing() -> None:
    windows = {"probe_means": 10.0}
    placement = _placement(switch_at=150.0)
    move = placement["history"][1]["moved"][0]
    move |= {"at_risk_from": 80.0, "recovered_by": "field-east"}  # field-east recomputed it from its spool
    assert destroyed_by({"barn": 100.0}, placement, ["field-east"], windows) == []
    # the dead site's own sensors' records stay lost, from what it last said it delivered
    assert destroyed_by({"barn": 100.0}, placement, ["field-east", "barn"], windows) == [
        Destroyed("barn", 80.0, math.inf, "barn")
    ]
