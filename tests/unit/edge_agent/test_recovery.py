"""A spoke gone for good: its source site recomputes its part from its spool, and the hub keeps each result once."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from edge_agent.checkpoint import Committed
from edge_agent.mqtt.transport import Message
from edge_agent.outbox import Outbox
from edge_agent.recovery import Recoveries, Spool, done_key, spooled_streams
from hub.handover.holds import HandoverHolds
from hub.handover.recovered import Recovered
from spanedge.keyrange import RECOVERY_EPOCH, is_recovery_epoch, recovery_epoch
from spanedge.plan import Handover, Plan
from spanedge.runtime import recovery_part
from spanedge.wire.batch import Record, decode_batch
from tests.unit.spanedge.runtime.test_handover import SWITCH, T0, build, make_app, make_plan, readings

#: tiny's records up to this event time were delivered by big1 before it died: its results from here on are not
RISK = T0 + 33.3


def recovered_plan(recover_from: float | None = RISK) -> Plan:
    """Plan v4: tiny's replicas move from big1, gone for good, to big2; tiny recomputes big1's part from ``RISK``."""
    recoverer = "tiny" if recover_from is not None else None
    handovers = tuple(
        Handover(r, "big1", "big2", SWITCH, 0, recover_from=recover_from, recoverer=recoverer)
        for r in ("double@tiny", "win@tiny")
    )
    return make_plan("big2", 4, 4, handovers)


def windows(out: list[Any]) -> set[tuple[str, float]]:
    return {(r.value["k"], r.value["window_start"]) for r in out}


def test_a_recovery_is_part_of_the_plan_and_the_old_owner_runs_no_part() -> None:
    plan = recovered_plan()
    again = Plan.from_dict(orjson.loads(orjson.dumps(plan.to_dict())))
    assert again == plan
    assert [h.recoverer for h in plan.recoveries("tiny")] == ["tiny", "tiny"]
    assert plan.recoveries("big1") == []
    assert plan.handed_over("big1") == {}  # back, the old owner runs none of it: tiny recomputed it
    assert set(plan.handed_over("big2")) == {"double@tiny", "win@tiny"}
    plain = recovered_plan(None)
    assert all("recoverer" not in h for h in plain.to_dict()["handovers"])  # plans without a recovery read as before
    assert set(plain.handed_over("big1")) == {"double@tiny", "win@tiny"}
    assert is_recovery_epoch(recovery_epoch(3))
    assert not is_recovery_epoch(3)


def test_the_recovered_part_adds_exactly_what_the_dead_owner_had_not_delivered() -> None:
    app = make_app(None)
    data = readings()
    fixed = build(app, make_plan("big1", 1, 0), "big1")
    for _, payload in data:
        fixed.process("readings@tiny", payload)
    fixed.flush()
    everything = fixed.take().to_hub
    part = recovery_part(app, recovered_plan(), "tiny", "big1", out_of_orderness=0.5, clock=lambda: T0 + 1e6)
    assert part is not None
    assert recovery_part(app, recovered_plan(), "tiny", "big2") is None  # big2 is alive: nothing to recover from it
    for _, payload in data:
        part.process("readings@tiny", payload)
    assert part.drained()  # its last window fired once the watermark passed the switch plus the window
    recomputed = part.take().to_hub
    # the windows whose results carry an event time at or past RISK, up to the switch: the one open across RISK too
    wanted = {
        (r.value["k"], r.value["window_start"])
        for r in everything
        if r.event_time >= RISK and r.value["window_start"] < SWITCH
    }
    assert windows(recomputed) == wanted
    assert min(start for _, start in wanted) == T0 + 30  # [30 s, 40 s) was open when the owner's frontier was 33.3 s
    assert {r.epoch for r in recomputed} == {RECOVERY_EPOCH}  # the dead owner's epoch 0, in the recovery epochs
    assert {r.site for r in recomputed} == {"tiny"}
    same = {(r.value["k"], r.value["window_start"]): r.value for r in everything}
    assert all(same[(r.value["k"], r.value["window_start"])] == r.value for r in recomputed)


class _Sites:
    """The one stream binding the recovery reads: tiny's readings on ``tiny/readings``."""

    def site(self, name: str) -> Any:
        return SimpleNamespace(streams={"readings": SimpleNamespace(topic="tiny/+", qos=1)})


def _messages(data: list[tuple[float, bytes]]) -> list[Message]:
    source = cast(Any, None)
    return [Message("tiny/readings", payload, 1, i, source, t + 0.2) for i, (t, payload) in enumerate(data)]


def test_the_source_site_spools_feeds_commits_once_and_reports_its_recomputed_part(tmp_path: Path) -> None:
    app = make_app(None)
    plan = recovered_plan()
    outbox = Outbox(tmp_path / "agent.db")
    spool = Spool(tmp_path / "spool.db", keep_s=1e9, clock=lambda: T0)
    served: list[Committed] = []
    now = [SWITCH]
    options = {"out_of_orderness": 0.5, "clock": lambda: T0 + 1e6}
    recoveries = Recoveries("tiny", cast(Any, _Sites()), outbox, spool, served.append, now=lambda: now[0], **options)
    assert spooled_streams("tiny", plan, app) == ["readings"]  # big2, another spoke, consumes them
    assert spooled_streams("tiny", make_plan("tiny", 1, 0), app) == []  # all at home: nothing to spool
    data = readings()
    spool.add(_messages(data[:150]))
    recoveries.update({"farm": plan}, {"farm": app})
    assert recoveries.pending
    recoveries.step()
    assert recoveries.pending  # the spool has not reached the switch plus a window yet
    assert outbox.records == 0
    spool.add(_messages(data[150:]))
    recoveries.step()
    assert not recoveries.pending
    batches = [decode_batch(b.payload) for b in outbox.batches(0, 10_000)]
    sent = [r for _, records, _ in batches for r in records]
    assert sent
    assert {r.epoch for r in sent} == {RECOVERY_EPOCH}
    assert served
    assert served[0].sinks == []
    assert outbox.load_state(done_key("farm", "win@tiny", SWITCH)) == b"1"
    (report,) = [r for r in recoveries.reports() if r["replica"] == "win@tiny"]
    assert report["switch_at"] == SWITCH
    assert report["sent"] == [["tiny", "win", RECOVERY_EPOCH, len(sent)]]
    # a plan listing the same recovery again (a restart, another version) does not recompute it
    recoveries.update({"farm": dataclasses.replace(plan, version=5)}, {"farm": app})
    assert not recoveries.pending
    recoveries.update({}, {})
    assert recoveries.reports() == []


def test_a_part_whose_input_stops_is_finished_after_a_while(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = make_app(None)
    outbox = Outbox(tmp_path / "agent.db")
    spool = Spool(tmp_path / "spool.db", keep_s=1e9, clock=lambda: T0)
    now = [SWITCH]
    recoveries = Recoveries("tiny", cast(Any, _Sites()), outbox, spool, lambda _done: None, now=lambda: now[0])
    spool.add(_messages([(t, p) for t, p in readings() if t < SWITCH - 5]))
    recoveries.update({"farm": recovered_plan()}, {"farm": app})
    recoveries.step()
    assert recoveries.pending
    now[0] = SWITCH + 1000
    with caplog.at_level(logging.WARNING, "edge_agent.recovery"):
        recoveries.step()
    assert not recoveries.pending
    assert "finishing it with what the spool holds" in caplog.text
    assert outbox.records > 0


def test_the_spool_keeps_what_arrived_within_its_time(tmp_path: Path) -> None:
    now = [T0]
    spool = Spool(tmp_path / "spool.db", keep_s=60.0, clock=lambda: now[0])
    spool.add(_messages(readings(20)))
    assert [row[0] for row in spool.read(0, T0 + 3)] == list(range(11, 22))  # the last one at the switch
    assert spool.read(5, T0, limit=2)[0][0] == 6
    now[0] = T0 + 200
    spool.add(_messages([(T0 + 199, b"{}")]))
    assert spool.oldest() == T0 + 199.2  # the rest was older than a minute


def _rec(site: str, epoch: int, t: float, value: Any, seq: int = 1) -> Record:
    return Record(site, "w", seq, t, "p1", value, epoch)


def test_the_hub_keeps_one_of_each_twin_whichever_side_comes_first() -> None:
    delivered: dict[str, float] = {}
    recovered = Recovered(lambda _app, site: delivered.get(site), clock=lambda: T0)
    # big1 ran tiny's window (epoch 2) and delivered two results before it died
    owner = [_rec("tiny", 2, T0 + 40, {"n": 3}), _rec("tiny", 2, T0 + 50, {"n": 4}, 2)]
    assert recovered.keep("farm", "big1", owner) == owner
    # tiny recomputes both and one more: only the new one is kept
    again = [
        _rec("tiny", recovery_epoch(2), t, v, i)
        for i, (t, v) in enumerate([(T0 + 40, {"n": 3}), (T0 + 50, {"n": 4}), (T0 + 60, {"n": 5})])
    ]
    assert recovered.keep("farm", "tiny", again) == again[2:]
    assert recovered.dropped == 2
    # big1, back, sends what its outbox still held: the twin of the recomputed result is dropped
    assert recovered.keep("farm", "big1", [_rec("tiny", 2, T0 + 60, {"n": 5}, 3)]) == []
    # a site's own stream is not matched against anything, nor a result of another epoch or value
    own = [_rec("tiny", 0, T0 + 40, {"n": 3})]
    assert recovered.keep("farm", "tiny", own) == own
    other = [_rec("tiny", recovery_epoch(7), T0 + 40, {"n": 3}), _rec("tiny", recovery_epoch(2), T0 + 40, {"n": 9})]
    assert recovered.keep("farm", "tiny", other) == other
    assert recovered.size() == 2


def test_the_hub_forgets_a_live_sites_results_below_what_it_announced_delivered() -> None:
    delivered: dict[str, float] = {}
    now = [T0]
    recovered = Recovered(lambda _app, site: delivered.get(site), clock=lambda: now[0])
    recovered.keep("farm", "big1", [_rec("tiny", 2, T0 + 40, {"n": 3}), _rec("tiny", 2, T0 + 50, {"n": 4}, 2)])
    delivered["big1"] = T0 + 45
    now[0] += 10
    recovered.keep("farm", "big1", [_rec("tiny", 2, T0 + 60, {"n": 5}, 3)])
    assert recovered.size() == 2  # the result at 40 s can no longer be recomputed: forgotten
    now[0] += 4000
    recovered.keep("farm", "big1", [_rec("tiny", 2, T0 + 70, {"n": 6}, 4)])
    assert recovered.size() == 1  # the others waited longer than KEEP_S


def test_the_hubs_windows_wait_for_the_recovering_site_from_where_the_recovery_starts() -> None:
    plan = recovered_plan()
    now = [SWITCH + 2]
    holds = HandoverHolds(limit_s=30, clock=lambda: now[0])
    logged: dict[tuple[str, str, int], int] = {}

    def hold_from(gone: set[str]) -> float | None:
        return holds.hold_from(plan, lambda *key: logged.get(key), lambda site: site in gone)

    assert hold_from({"big1"}) == RISK  # big1 is gone; tiny owes its part from RISK on
    sent = [["tiny", "win", RECOVERY_EPOCH, 3]]
    holds.observe("big1", {"handed_over": [{"app": "farm", "replica": "win@tiny", "switch_at": SWITCH, "sent": sent}]})
    assert hold_from({"big1"}) == RISK  # only the recovering site's report counts
    for replica in ("win@tiny", "double@tiny"):
        report = {"app": "farm", "replica": replica, "switch_at": SWITCH, "sent": sent}
        holds.observe("tiny", {"handed_over": [report]})
    assert hold_from({"big1"}) == RISK  # reported, not yet in the log
    logged[("tiny", "win", RECOVERY_EPOCH)] = 3
    assert hold_from({"big1"}) is None
    assert hold_from({"big1", "tiny"}) is None


def test_a_site_back_drops_what_its_outbox_held_of_a_part_another_site_recomputed(tmp_path: Path) -> None:
    from spanedge.runtime import HubRecord

    box = Outbox(tmp_path / "agent.db")
    value = {"n": 1}
    mine = HubRecord("w", "big1", T0, None, value, orjson.dumps(value), 0)
    guest = [HubRecord("w", "tiny", T0 + i, None, value, orjson.dumps(value), 2) for i in range(3)]
    box.commit({"farm": [mine, *guest]})
    assert box.discard("farm", "tiny", 2) == 3
    assert box.discard("farm", "tiny", 2) == 0
    assert box.records == 1
    assert [r.site for _, records, _ in (decode_batch(b.payload) for b in box.batches(0, 10)) for r in records] == [
        "big1"
    ]


def test_the_hub_waits_longer_for_a_recovery_but_not_for_ever() -> None:
    plan = recovered_plan()
    now = [SWITCH + 5]
    holds = HandoverHolds(limit_s=30, clock=lambda: now[0])
    assert holds.hold_from(plan, lambda *_: None, lambda site: site == "big1") == RISK
    now[0] = SWITCH + 45
    assert holds.hold_from(plan, lambda *_: None, lambda site: site == "big1") == RISK  # past 30 s, within 60 s
    now[0] = SWITCH + 66
    assert holds.hold_from(plan, lambda *_: None, lambda site: site == "big1") is None
    # a recovery planned long after the switch (its old owner died mid-handover) is waited for from then
    later = HandoverHolds(limit_s=30, clock=lambda: now[0])
    now[0] = SWITCH + 200
    assert later.hold_from(plan, lambda *_: None, lambda site: site == "big1") == RISK
    now[0] = SWITCH + 255
    assert later.hold_from(plan, lambda *_: None, lambda site: site == "big1") == RISK
    now[0] = SWITCH + 261
    assert later.hold_from(plan, lambda *_: None, lambda site: site == "big1") is None


def test_a_recovery_reaches_the_source_site_even_when_nothing_else_changes_for_it() -> None:
    from hub.control.distribution import site_view, sites_of

    assert site_view(recovered_plan(), "tiny") != site_view(recovered_plan(None), "tiny")
    assert "tiny" in sites_of(recovered_plan())
