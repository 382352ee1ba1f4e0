"""Apps from plans: stopped when no longer planned, handed-over replicas reported and dropped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from spanedge.plan import Handover
from tests.unit.edge_agent.test_processing import _msg, _parts


def test_apps_stop_an_app_no_longer_planned(tmp_path: Path) -> None:
    apps, _processor, _source, outbox = _parts(tmp_path)
    assert list(apps.pipelines) == ["cold-chain"]
    pipelines = apps.pipelines
    apps.apply([])
    assert apps.pipelines == {} == apps.plans
    assert apps.pipelines is pipelines  # the checkpointer shares this dict
    outbox.close()


def test_apps_drop_the_replicas_they_handed_over_once_their_windows_fired(tmp_path: Path) -> None:
    from spanedge.plan import Handover

    apps, _processor, _source, outbox = _parts(tmp_path)
    plan = apps.plans["cold-chain"]
    moving = [a.replica for a in plan.assignments if a.site == "truck-7" and a.operator != "readings"]
    switch = 1_700_000_100.0
    moved = dataclasses.replace(
        plan,
        version=2,
        assignments=tuple(
            dataclasses.replace(a, site="truck-9", since=2) if a.replica in moving else a for a in plan.assignments
        ),
        handovers=tuple(Handover(r, "truck-7", "truck-9", switch, 0) for r in moving),
    )
    apps.apply([moved])
    pipeline = apps.pipelines["cold-chain"]
    assert {n.replica for n in pipeline.nodes} == {"readings@truck-7", *moving}  # still finishing its windows
    pipeline.process("readings@truck-7", orjson.dumps({"unit": "u1", "ts": switch - 5, "temp_f": 41.0}))
    assert apps.retire_drained() == []
    pipeline.process("readings@truck-7", orjson.dumps({"unit": "u1", "ts": switch + 1000, "temp_f": 41.0}))
    assert apps.retire_drained() == ["cold-chain"]
    assert apps.pipelines["cold-chain"].nodes == []  # nothing left to run here for this app
    apps.apply([moved])  # the same plan again: what was handed over stays dropped
    assert apps.pipelines["cold-chain"].nodes == []
    outbox.close()


def test_an_old_owner_reports_the_last_record_it_sent_for_a_part_it_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apps, processor, source, outbox = _parts(tmp_path)
    processor.handle([_msg(source, mid, 1000.0 + mid) for mid in range(1, 4)])
    processor.handle([_msg(source, 9, 1030.0)])  # closes [1000, 1010): one result for the hub
    processor.flush()
    assert outbox.last_seqs("cold-chain", "truck-7", 0) == [("unit_stats", 1)]
    plan = apps.plans["cold-chain"]
    moved = dataclasses.replace(plan, handovers=(Handover("unit_stats@truck-7", "truck-7", "warehouse-north", 1040.0),))
    apps.plans["cold-chain"] = moved
    assert apps.newly_delivered() == []  # its last window before the switch has not fired yet
    pipeline = apps.pipelines["cold-chain"]
    monkeypatch.setattr(pipeline, "delivered", lambda: ["unit_stats@truck-7"])  # now it has
    assert apps.newly_delivered() == [("cold-chain", "unit_stats@truck-7")]
    apps.record_sent(apps.newly_delivered())
    sent = [["truck-7", "unit_stats", 0, 1]]
    reported = [{"app": "cold-chain", "replica": "unit_stats@truck-7", "switch_at": 1040.0, "sent": sent}]
    assert apps.handed_over() == reported
    assert apps.newly_delivered() == []  # reported once
    monkeypatch.setattr(pipeline, "drained", lambda: ["unit_stats@truck-7"])  # dropped later
    monkeypatch.setattr(apps, "apply_one", lambda plan: None)  # the rebuild is another test's
    assert apps.retire_drained() == ["cold-chain"]
    assert apps.handed_over() == reported
    apps.plans["cold-chain"] = plan  # a later plan without the handover: nothing left to report
    assert apps.handed_over() == []
    outbox.close()


def test_a_plan_applied_again_keeps_the_counts_of_records_in_and_out(tmp_path: Path) -> None:
    """A restarted hub sends the plan again: the rebuilt pipeline goes on counting where the old one was."""
    apps, processor, source, outbox = _parts(tmp_path)
    processor.handle([_msg(source, mid, 1000.0 + mid) for mid in range(1, 6)])
    processor.flush()
    before = apps.pipelines["cold-chain"].metrics()
    assert before["readings@truck-7"] == {"in": 5, "out": 5}
    apps.apply([apps.plans["cold-chain"]])
    assert apps.pipelines["cold-chain"].metrics() == before
    processor.handle([_msg(source, 6, 1006.0)])
    processor.flush()
    assert apps.pipelines["cold-chain"].metrics()["readings@truck-7"] == {"in": 6, "out": 6}
    outbox.close()
