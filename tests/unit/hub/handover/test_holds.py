"""When the hub's windows wait for an old owner's last records, and when they stop waiting (no broker, no Spark)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from hub.handover.holds import HandoverHolds, parse_reports
from spanedge.plan import Handover, KeyPart
from tests.plans import chain_plan

T = 1000.0
#: field-east's window moved from the barn (epoch 1) to the shed at plan version 2, switching at T.
MOVED = Handover("w@field-east", "barn", "shed", T, epoch=1)
PLAN = chain_plan("farm", 2, {"field-east": [("w", "shed", 2)]}, handovers=(MOVED,))


def report(seq: int, switch_at: float = T) -> dict:
    sent = [["field-east", "w", 1, seq]]
    return {
        "site": "barn",
        "handed_over": [{"app": "farm", "replica": "w@field-east", "switch_at": switch_at, "sent": sent}],
    }


def test_the_windows_wait_from_the_switch_until_the_log_holds_the_old_owners_last_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="hub")
    now = [T + 2]
    holds = HandoverHolds(limit_s=30, clock=lambda: now[0])
    logged: dict[tuple[str, str, int], int] = {}

    def hold_from() -> float | None:
        return holds.hold_from(PLAN, lambda *key: logged.get(key), lambda _site: False)

    assert hold_from() == T  # nothing reported yet
    holds.observe("barn", report(7))
    assert hold_from() == T  # reported, not yet in the log
    logged[("field-east", "w", 0)] = 9  # another epoch's records say nothing about the old owner's
    logged[("field-east", "w", 1)] = 6
    assert hold_from() == T
    logged[("field-east", "w", 1)] = 7
    assert hold_from() is None
    assert holds.take_delivered() == [("farm", "w@field-east", "barn", T + 2)]  # the handover's end, once
    now[0] = T + 3
    assert hold_from() is None
    assert holds.take_delivered() == []
    assert [r.getMessage() for r in caplog.records] == [
        "app farm: from 1000.000 on, the hub's windows wait for barn's last records of w@field-east",
        "app farm: 2.0 s after the switch, the hub's windows have barn's last records of w@field-east",
    ]
    holds.observe("shed", report(99, switch_at=T))  # the new owner reports nothing for this handover
    assert hold_from() is None
    later = dataclasses.replace(PLAN, handovers=())
    assert holds.hold_from(later, lambda *key: logged.get(key), lambda _site: False) is None
    assert hold_from() == T  # the plan no longer listed it: its report was dropped


def test_the_windows_stop_waiting_for_an_old_owner_that_is_gone_or_late_past_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [T + 29]
    holds = HandoverHolds(limit_s=30, clock=lambda: now[0])
    assert holds.hold_from(PLAN, lambda *_: None, lambda site: site == "barn") is None
    assert holds.hold_from(PLAN, lambda *_: None, lambda _site: False) == T
    now[0] = T + 31
    assert holds.hold_from(PLAN, lambda *_: None, lambda _site: False) is None
    assert holds.hold_from(PLAN, lambda *_: None, lambda _site: False) is None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "app farm: the hub's windows no longer wait for barn's last records of w@field-east (switch 1000.000): barn is gone"
    ]  # once, for the first reason
    caplog.clear()
    patient = HandoverHolds(limit_s=90, clock=lambda: now[0])  # spanedge hub --handover-wait 90
    assert patient.hold_from(PLAN, lambda *_: None, lambda _site: False) == T
    now[0] = T + 91
    assert patient.hold_from(PLAN, lambda *_: None, lambda _site: False) is None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "app farm: the hub's windows no longer wait for barn's last records of w@field-east (switch 1000.000): "
        "90 s after the switch (spanedge hub --handover-wait SECONDS waits longer)"
    ]


def test_only_a_spoke_that_gives_the_whole_replica_up_is_waited_for() -> None:
    holds = HandoverHolds(clock=lambda: T)
    from_hub = dataclasses.replace(PLAN, handovers=(dataclasses.replace(MOVED, source="cloud"),))
    assert holds.hold_from(from_hub, lambda *_: None, lambda _site: False) is None
    # the shed takes half of the keys; the barn keeps the other half and never drops the replica
    split = chain_plan(
        "farm", 2, {"field-east": [("w", "barn", 1)]}, handovers=(dataclasses.replace(MOVED, keys_from=2**31),)
    )
    split = dataclasses.replace(split, parts=(KeyPart("w@field-east", "shed", 2**31, 2**32, 2),))
    assert holds.hold_from(split, lambda *_: None, lambda _site: False) is None


def test_malformed_reports_are_skipped() -> None:
    beat = report(3)
    beat["handed_over"].append({"app": "farm", "replica": "x"})
    beat["handed_over"].append({"app": "farm", "replica": "y", "switch_at": "soon", "sent": []})
    assert list(parse_reports(beat)) == [("farm", "w@field-east", T)]
    assert parse_reports({"handed_over": "all"}) == {}
