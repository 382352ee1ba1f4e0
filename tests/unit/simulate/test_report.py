"""Report computation from synthetic data: reference windows, losses, duplicates, latencies."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from simulate.checking import check_sink, scope_tier
from simulate.reference import Item, evaluate, window_starts
from simulate.report import Latency, Report, epoch, percentile
from simulate.results import Collector, Result, mqtt_sinks
from spanedge.loader import load_app
from tests.conftest import EXAMPLES

APP = load_app(EXAMPLES / "cold_chain" / "app.py")
T0 = 1_700_000_000.0  # a multiple of 10: windows start at T0, T0 + 10, ...


def _reading(unit: str, t: float, temp_f: float) -> Item:
    return Item("truck-7", t, {"unit": unit, "ts": t, "temp_f": temp_f, "door_open": False})


def _sources() -> dict[str, list[Item]]:
    items = [_reading("u1", T0 + i, 41.0) for i in range(30)]  # 5 °C: fine
    items += [_reading("u2", T0 + i + 0.5, 59.0) for i in range(30)]  # 15 °C: an anomaly every window
    items.append(_reading("u1", T0 + 3, 500.0))  # implausible: filtered out
    items.append(Item("truck-7", T0 + 4, {"unit": "u1", "ts": T0 + 4, "temp_f": "n/a"}))  # to_celsius raises
    return {"readings": items}


def test_reference_runs_the_apps_functions_and_windows() -> None:
    expected = evaluate(APP, _sources())
    stats = [i.value for i in expected.sinks["local_stats"]]
    assert len(stats) == 6  # 2 units x 3 windows
    first = next(v for v in stats if v["unit"] == "u1" and v["window_start"] == T0)
    assert first == {"unit": "u1", "window_start": T0, "window_end": T0 + 10, "n": 10, "mean_c": 5.0, "max_c": 5.0}
    alerts = [i.value for i in expected.sinks["fleet_alerts"]]
    assert {a["unit"] for a in alerts} == {"u2"}
    assert len(alerts) == 3
    assert expected.errors == {"truck-7": 1}
    assert expected.windowed["local_stats"].size == 10


def test_sink_tiers_and_topics() -> None:
    assert scope_tier(APP, "local_stats") == "local"
    assert scope_tier(APP, "fleet_alerts") == "global"
    assert mqtt_sinks(APP) == {"cold-chain/unit-stats": ["local_stats"], "cold-chain/alerts": ["fleet_alerts"]}


def test_losses_duplicates_and_wrong_values_are_found() -> None:
    expected = evaluate(APP, _sources())
    want = [i.value for i in expected.sinks["local_stats"]]
    received = []
    for v in want:
        if v["unit"] == "u2" and v["window_start"] == T0 + 10:
            continue  # a missing window of 10 records
        value = dict(v)
        if v["unit"] == "u1" and v["window_start"] == T0 + 10:
            value["n"] = 7  # 3 records short
        if v["unit"] == "u1" and v["window_start"] == T0 + 20:
            value["mean_c"] = 6.5  # a wrong aggregate
        received.append(Result("local_stats", "truck-7", value, v["window_end"] + 1.5))
    received.append(Result("local_stats", "truck-7", dict(want[0]), want[0]["window_end"] + 9.0))  # a duplicate
    check, latencies = check_sink(
        "local_stats",
        "local",
        received,
        expected.sinks["local_stats"],
        expected.windowed["local_stats"],
        cutoff=T0 + 30,
    )
    assert (check.expected, check.checked, check.open_at_end) == (6, 6, 0)
    # the short window is wrong as well as short: its values differ from the reference
    assert (check.missing, check.duplicates, check.wrong, check.unexpected) == (1, 1, 2, 0)
    assert check.lost_records == 10 + 3
    assert latencies == [1.5] * 5  # first arrivals of the windows received
    assert check.latency.p50 == pytest.approx(1500.0)


def test_a_perfect_run_has_no_loss_and_open_windows_are_not_counted() -> None:
    expected = evaluate(APP, _sources())
    received = [Result("local_stats", "truck-7", i.value, T0 + 40) for i in expected.sinks["local_stats"]]
    received = [r for r in received if r.value["window_start"] < T0 + 20]  # the last window never closed
    check, _ = check_sink(
        "local_stats",
        "local",
        received,
        expected.sinks["local_stats"],
        expected.windowed["local_stats"],
        cutoff=T0 + 25,
    )
    assert (check.missing, check.duplicates, check.lost_records, check.wrong) == (0, 0, 0, 0)
    assert check.open_at_end == 2
    assert check.checked == 4
    report = Report("run", "cold-chain", "ilp", "mosquitto", 30.0, sinks=[check])
    assert report.lost == 0
    everything = [Result("local_stats", "truck-7", i.value, T0 + 40) for i in expected.sinks["local_stats"]]
    late, _ = check_sink(
        "local_stats", "local", everything, expected.sinks["local_stats"], expected.windowed["local_stats"], T0 + 25
    )
    # received = checked + after the cutoff: the last windows arrived but are not checked
    assert (late.received, late.checked, late.after_cutoff, late.missing) == (6, 4, 2, 0)
    assert report.duplicates == 0
    assert report.to_dict()["lost"] == 0


def test_stateless_sinks_compare_multisets() -> None:
    items = [Item("a", 1.0, {"x": 1}), Item("a", 2.0, {"x": 2})]
    received = [Result("s", "hub", {"x": 1}, 5.0), Result("s", "hub", {"x": 1}, 6.0), Result("s", "hub", {"x": 9}, 7.0)]
    check, latencies = check_sink("s", "global", received, items, None, cutoff=0.0, time_field="x")
    assert (check.missing, check.duplicates, check.unexpected) == (1, 1, 1)
    assert sorted(latencies) == [-2.0, 4.0, 5.0]


def test_helpers() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile(list(range(1, 101)), 99) == 99
    assert epoch(12.5) == 12.5
    assert epoch("1970-01-01T00:00:10") == 10.0
    assert epoch("nonsense") is None
    assert window_starts(APP.operators["unit_stats"].window, T0 + 9.99) == [T0]  # type: ignore[arg-type]


def test_collector_reads_results_heartbeats_and_dead_letters() -> None:
    c = Collector("cold-chain", mqtt_sinks(APP))
    c.on_message("truck-7", "cold-chain/unit-stats", b'{"unit": "u1", "n": 3}')
    c.on_message("cloud", "cold-chain/alerts", b'[{"unit": "u2"}, {"unit": "u3"}]')
    c.on_message("cloud", "cold-chain/alerts", b"not json")
    c.on_message(
        "cloud",
        "spanedge/v1/control/truck-7/heartbeat",
        b'{"apps": ["cold-chain"], "outbox": {"records": 12, "bytes": 900}, "dlq": 2, "late": 1}',
    )
    c.on_message("cloud", "spanedge/v1/cold-chain/dlq/truck-7", b'{"reason": "not JSON", "payload": "{"}')
    c.on_message("truck-7", "$SYS/broker/subscriptions/count", b"4")
    assert [r.sink for r in c.results] == ["local_stats", "fleet_alerts", "fleet_alerts"]
    assert c.malformed_results == 1
    assert c.backlog("truck-7") == 12
    assert c.backlog("truck-9") is None
    assert c.counter("truck-7", "dlq") == 2
    assert c.counter("truck-7", "late") == 1
    assert c.dlq["truck-7"] == 1
    assert c.subscriptions == {"truck-7": 4}


def test_progress_and_report_render() -> None:
    import io

    from rich.console import Console

    from simulate.progress import SiteStatus, Status, render_status
    from simulate.report import SiteCount, StreamCount, render

    status = Status(
        "spanedge",
        "sensors running",
        12.0,
        60.0,
        [SiteStatus("truck-7", "spoke", sent=100, backlog=3, up=False, note="partitioned")],
        ["t=  5.0s fault partition:truck-7:20s@5s"],
    )
    out = io.StringIO()
    console = Console(file=out, width=160)
    console.print(render_status(status))
    assert "truck-7" in out.getvalue()
    assert "48s of sensors left" in out.getvalue()
    expected = evaluate(APP, _sources())
    check, _ = check_sink(
        "local_stats", "local", [], expected.sinks["local_stats"], expected.windowed["local_stats"], cutoff=T0 + 30
    )
    reports = [
        Report(
            label,
            "cold-chain",
            label,
            "mosquitto",
            60.0,
            streams=[StreamCount("readings", "truck-7", 10, 1)],
            sinks=[check],
            wan_bytes={"cloud<->truck-7": {"cloud>truck-7": 10, "truck-7>cloud": wan}},
            wan_total=wan + 10,
            sites=[SiteCount("truck-7", dead_lettered=1, expected_dead=1)],
        )
        for label, wan in (("spanedge", 990), ("central", 19_990))
    ]
    console.print(render(reports))
    text = out.getvalue()
    assert "WAN vs second run" in text
    assert "5.0%" in text
    assert "missing" in text


def test_operator_counts_sum_replicas_and_survive_restarts_and_moves() -> None:
    from simulate.operator_totals import OperatorTotals

    totals = OperatorTotals()
    totals.add(
        "truck-7",
        {"operators": {"to_celsius@truck-7": {"in": 10, "out": 9, "rate_in": 1.0}, "readings@truck-7": {"in": 10}}},
    )
    totals.add("truck-9", {"operators": {"to_celsius@truck-9": {"in": 5, "out": 5}}})
    totals.add("truck-9", {"no operators": True})
    assert totals.by_operator() == {"to_celsius": {"in": 15, "out": 14}, "readings": {"in": 10, "out": 0}}
    # truck-7's agent restarts and counts from 0 again; truck-9's replica moves to the warehouse
    totals.add("truck-7", {"operators": {"to_celsius@truck-7": {"in": 4, "out": 4}, "readings@truck-7": {"in": 4}}})
    totals.add("warehouse", {"operators": {"to_celsius@truck-9": {"in": 3, "out": 3}}})
    totals.add("truck-7", {"operators": {"to_celsius@truck-7": {"in": 6, "out": 6}, "readings@truck-7": {"in": 6}}})
    assert totals.by_operator() == {
        "to_celsius": {"in": 10 + 6 + 5 + 3, "out": 9 + 6 + 5 + 3},
        "readings": {"in": 16, "out": 0},
    }
    assert totals.by_operator(["truck-9"]) == {"to_celsius": {"in": 5, "out": 5}}


def test_a_hub_restart_between_heartbeats_keeps_the_edge_counts() -> None:
    """The collector feeds every heartbeat to the totals: counts that start again add to the earlier ones."""
    c = Collector("cold-chain", mqtt_sinks(APP))
    topic = "spanedge/v1/control/truck-7/heartbeat"
    for n in (100, 12_007, 0, 0):  # the last two after the agent began counting again
        c.on_message("cloud", topic, orjson.dumps({"operators": {"readings@truck-7": {"in": n, "out": n}}}))
    assert c.operators.by_operator(["truck-7"]) == {"readings": {"in": 12_007, "out": 12_007}}


def test_session_windows_close_after_the_gap() -> None:
    from spanedge import App, agg, sinks

    app = App("sessions")
    app.source("clicks", time_field="ts").window(
        name="visits", key="user", gap="5s", aggs={"n": agg.count()}, scope="local"
    ).sink(sinks.mqtt("visits"), name="out")
    items = [Item("web", t, {"user": "a", "ts": t}) for t in (0.0, 2.0, 6.5, 20.0, 24.9)]
    items.append(Item("web", 1.0, {"user": "b", "ts": 1.0}))
    got = sorted(
        (i.value["user"], i.value["window_start"], i.value["window_end"], i.value["n"])
        for i in evaluate(app, {"clicks": items}).sinks["out"]
    )
    assert got == [("a", 0.0, 11.5, 3), ("a", 20.0, 29.9, 2), ("b", 1.0, 6.0, 1)]


def test_the_plan_history_shows_each_move_s_state_and_handover_time() -> None:
    from simulate.report import plan_history_of

    placement = {
        "history": [
            {"version": 1, "at": 100.0, "reason": "deployed", "moved": []},
            {
                "version": 2,
                "at": 130.0,
                "reason": "latency barn–shed",
                "moved": [
                    {"replica": "w@f", "from": "barn", "to": "shed", "state_bytes": 3200, "handover_s": 14.25},
                    {"replica": "m@f", "from": "barn", "to": "shed"},
                ],
            },
        ]
    }
    assert plan_history_of(placement, 100.0) == [
        "plan v1 at +0.0 s: deployed",
        "plan v2 at +30.0 s: latency barn–shed; moved w@f barn->shed (state 3.2 kB, handed over 14.2 s after the"
        " re-plan), m@f barn->shed",
    ]
    gone = {"replica": "w@f", "from": "barn", "to": "shed", "switch_at": 160.0, "recover_by": 760.0}
    entry = {"version": 3, "at": 150.0, "reason": "site barn silent", "moved": [{**gone, "at_risk_from": 121.5}, gone]}
    assert plan_history_of({"history": [entry]}, 100.0) == [
        "plan v3 at +50.0 s: site barn silent; moved w@f barn->shed (barn gone: results from 21.5 s to the switch at"
        " 60.0 s at risk), w@f barn->shed (barn gone: results from its last result to the switch at 60.0 s at risk)"
    ]
    entry["moved"] = [{**gone, "back_at": 175.0}, {**gone, "back_at": 900.0}]
    assert plan_history_of({"history": [entry]}, 100.0) == [
        "plan v3 at +50.0 s: site barn silent; moved w@f barn->shed (barn gone: results from its last result to the"
        " switch at 60.0 s at risk, back at 75.0 s in time), w@f barn->shed (barn gone: results from its last result"
        " to the switch at 60.0 s at risk, back at 800.0 s, too late)"
    ]


def test_unchanged_replans_fold_into_one_line_and_no_time_is_negative() -> None:
    from simulate.report import plan_history_of

    def unchanged(at: float, reason: str) -> dict[str, object]:
        return {"version": 1, "at": at, "reason": f"{reason}; placement unchanged", "changed": False, "moved": []}

    placement = {
        "history": [
            {"version": 1, "at": 90.0, "reason": "deployed", "moved": []},
            unchanged(95.0, "rate of readings@truck-7 100.0→14.0 rec/s (-86%)"),
            {
                "version": 2,
                "at": 130.0,
                "reason": "site truck-9 down",
                "moved": [{"replica": "w@t", "from": "a", "to": "b"}],
            },
            *(unchanged(130.0 + 60 * i, f"latency cloud–truck-7 {4 + i}.0→9.0 ms") for i in range(1, 6)),
        ]
    }
    assert plan_history_of(placement, 100.0) == [
        "plan v1 at setup (10.0 s before the sensors started): deployed",
        "plan v1 at setup (5.0 s before the sensors started): rate of readings@truck-7 100.0→14.0 rec/s (-86%);"
        " placement unchanged",
        "plan v2 at +30.0 s: site truck-9 down; moved w@t a->b",
        "plan v1 from +90.0 s to +330.0 s: re-planned 5 times, placement unchanged (the last for: latency"
        " cloud–truck-7 9.0→9.0 ms)",
    ]


def _report(**fields: Any) -> Report:
    from simulate.report import SinkCheck

    check = SinkCheck("unit_stats", "local", received=120, expected=180, checked=60, open_at_end=120, after_cutoff=60)
    return Report("spanedge", "cold-chain", "ilp, managed", "mosquitto", 20.0, sinks=[check], **fields)


def test_every_figure_says_what_it_counts() -> None:
    from simulate.report import summarise

    summary = summarise([_report(warmup=20.0, settle=35.0)])
    rows = dict(summary.rows)
    assert rows["out unit_stats (local)"] == ["120 (60 checked: 0 missing, 0 wrong; 60 after the cutoff)"]
    assert rows["local result latency p50/p95/p99 ms"] == ["no results after the 20 s warm-up"]
    text = "\n".join(summary.legend)
    assert "35 s (settle) before the last event time" in text
    assert "leaving out the first 20 s (warm-up)" in text
    assert "malformed ones included" in text
    assert "agent restart" in text
    fast = summarise([_report(local_latency=Latency.of([0.5, 1.0]))])
    assert dict(fast.rows)["local result latency p50/p95/p99 ms"] == ["500 / 1000 / 1000 (2 results)"]
    assert dict(fast.rows)["global result latency p50/p95/p99 ms"] == ["no results"]


def test_plan_changes_are_events_and_only_problems_are_problems() -> None:
    from simulate.report import summarise

    report = _report(
        plan_history=[
            "plan v1 at +0.0 s: deployed",
            "plan v1 at +1.3 s: rate of r 100.0→14.0 rec/s; placement unchanged",
        ],
        destroyed_by=["records of truck-9 from 30 s to the end: lost with truck-9"],
        problems=["truck-7 never drained"],
    )
    summary = summarise([report])
    assert summary.events == [
        "[spanedge] plan v1 at +1.3 s: rate of r 100.0→14.0 rec/s; placement unchanged",
        "[spanedge] records of truck-9 from 30 s to the end: lost with truck-9",
    ]
    assert summary.problems == ["[spanedge] truck-7 never drained"]


def test_a_baseline_that_could_not_keep_up_is_its_own_row_not_a_failure() -> None:
    from simulate.report import SinkCheck, SiteCount, summarise

    ours = _report()
    short = SinkCheck("unit_stats", "local", checked=60, missing=20, lost_records=2290)
    behind = Report(
        "central",
        "cold-chain",
        "central, standalone",
        "mosquitto",
        20.0,
        sinks=[short],
        sites=[SiteCount("truck-7", backlog=1500), SiteCount("truck-9", backlog=790)],
        drained=False,
        baseline=True,
    )
    rows = dict(summarise([ours, behind]).rows)
    assert rows["kept up with the data"] == ["yes", "could not keep up: 2290 records still queued"]
    assert rows["lost records"] == ["0", "- (2290 not yet arrived)"]
    assert behind.fell_behind
    assert not behind.failed
    assert not ours.failed
    assert behind.to_dict()["queued"] == 2290
    assert Report("c", "a", "central", "mosquitto", 1.0, sites=[SiteCount("t", backlog=7)]).queued == 7
    # the same losses in SpanEdge's own run, or in a baseline that drained, are a failure
    assert Report("spanedge", "a", "ilp", "mosquitto", 20.0, sinks=[short], drained=False).failed
    assert Report("central", "a", "central", "mosquitto", 20.0, sinks=[short], baseline=True).failed
    assert "kept up with the data" not in dict(summarise([ours]).rows)
