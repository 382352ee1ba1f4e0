"""The series behind the charts: WAN samples, backlog from heartbeats, fault and re-plan markers."""

from __future__ import annotations

import json

from simulate.charts import Mark
from simulate.fault_schedule import AppliedFault
from simulate.faults import parse_fault
from simulate.results import Collector
from simulate.timeline import LABEL_CHARS, Timeline, WanSampler, fault_marks, relative, replan_marks

T0 = 1_700_000_000.0


def test_wan_samples_are_cumulative_per_link_both_ways_summed() -> None:
    counters = {"cloud<->truck-7": {"cloud>truck-7": 10, "truck-7>cloud": 90}}
    clock = iter([T0 + 0.5, T0 + 1.5, T0 + 2.5])
    sampler = WanSampler(lambda: counters, clock=lambda: next(clock))
    sampler.sample(T0)
    counters["cloud<->truck-7"]["truck-7>cloud"] = 400
    counters["cloud<->truck-9"] = {"truck-9>cloud": 7}  # a link seen late starts at 0
    sampler.sample(T0)
    del counters["cloud<->truck-9"]  # a link no longer reported keeps its last count
    sampler.sample(T0)
    assert sampler.times == [0.5, 1.5, 2.5]
    assert sampler.wan == {"cloud<->truck-7": [100, 410, 410], "cloud<->truck-9": [0, 7, 7]}


def test_backlog_points_are_made_relative_and_start_where_they_stood() -> None:
    c = Collector("cold-chain", {})
    c.on_message("cloud", "spanedge/v1/control/truck-7/heartbeat", b'{"outbox": {"records": 3}}')
    c.on_message("cloud", "spanedge/v1/control/truck-7/heartbeat", b'{"outbox": {"records": 0}}')
    assert [n for _, n in c.backlog_history["truck-7"]] == [3, 0]
    points = [(T0 - 4, 3), (T0 - 2, 2), (T0 + 1, 9), (T0 + 3, 0)]
    assert relative(points, T0) == [(0.0, 2), (1.0, 9), (3.0, 0)]
    assert relative([], T0) == []


def test_faults_become_marks_with_their_span() -> None:
    applied = [
        AppliedFault(parse_fault("partition:truck-9:20s@8s"), T0 + 8.01, T0 + 28.02),
        AppliedFault(parse_fault("restart-hub@30s"), T0 + 30.0),
    ]
    assert fault_marks(applied, T0) == [
        Mark(8.01, "fault", "partition:truck-9:20s@8s", 28.02),
        Mark(30.0, "fault", "restart-hub@30s", None),
    ]


def test_replans_come_from_the_placement_history_after_the_deploy() -> None:
    placement = {
        "history": [
            {"version": 1, "at": T0 - 30, "reason": "deployed", "changed": True},
            {"version": 2, "at": T0 - 1, "reason": "before the sensors", "changed": True},
            {
                "version": 2,
                "at": T0 + 12.5,
                "reason": "latency cloud–truck-9 40→120 ms; placement unchanged",
                "changed": False,
            },
            {"version": 3, "at": T0 + 20, "reason": "site truck-7 down " + "x" * 100, "changed": True},
            {"version": 4, "reason": "no time"},
        ]
    }
    marks = replan_marks(placement, T0)
    assert [(m.t, m.kind) for m in marks] == [(12.5, "replan"), (20.0, "replan")]
    assert marks[0].label == "re-plan, unchanged: latency cloud–truck-9 40→120 ms"
    assert marks[1].label.startswith("re-plan: site truck-7 down")
    assert len(marks[1].label) == LABEL_CHARS
    assert replan_marks(None, T0) == []
    assert replan_marks({"plan": {"version": 1}}, T0) == []


def test_unchanged_replans_in_a_row_are_one_mark_that_counts_them() -> None:
    def unchanged(at: float) -> dict[str, object]:
        return {"version": 1, "at": T0 + at, "reason": f"latency a–b {at}; placement unchanged", "changed": False}

    placement = {"history": [{"version": 1, "at": T0 - 5, "reason": "deployed"}, *map(unchanged, (60, 120, 180))]}
    (mark,) = replan_marks(placement, T0)
    assert (mark.t, mark.kind, mark.until) == (60.0, "replan", None)
    assert mark.label == "3 re-plans to 180.0 s, unchanged: latency a–b 180"


def test_a_timeline_survives_json() -> None:
    timeline = Timeline(
        wan_times=[0.0, 1.0],
        wan={"a<->b": [0, 10]},
        backlog={"a": [(0.0, 1), (2.0, 0)]},
        marks=[Mark(1.0, "fault", "partition:a:1s@1s", 2.0)],
        latency_ms={"local": [5.0], "global": []},
    )
    assert Timeline.from_dict(json.loads(json.dumps(timeline.to_dict()))) == timeline
