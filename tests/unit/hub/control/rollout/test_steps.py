"""The rollout's steps as pure functions of a clock value and heartbeats, and the rollout in JSON and back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub.control.rollout import (
    Beat,
    Context,
    Rollout,
    StagePlan,
    Status,
    check,
    confirm,
    due,
    parse_gates,
    parse_stages,
    plan_stages,
    resume,
    roll_back,
    start,
)
from hub.control.rollout.steps import changed_by
from spanedge.errors import InvalidRollout
from spanedge.wire.heartbeat import Heartbeat

FLEET = {f"truck-{i}": {"kind": "truck"} for i in range(4)} | {"shed": {"kind": "shed"}}
CONTEXT = Context("cold-chain", frozenset({"readings"}))
GATES = parse_gates("dead_letter_rate<0.01, cpu<0.8")
HOLD = 60.0


def rollout(spec: str = "kind=truck:1, kind=truck:50%, *", at: float = 1000.0, **options: Any) -> Rollout:
    plans = plan_stages(parse_stages(spec, FLEET), FLEET, "cold-chain", "v2")
    return start("cold-chain", "v1", "v2", plans, GATES, HOLD, at, **options)


def healthy(sites: tuple[str, ...], start: float, end: float, dead: float = 0.0) -> list[Beat]:
    """Heartbeats every 5 s: 100 records taken in per beat, ``dead`` of each dead-lettered, 20% CPU."""
    out = []
    for site in sites:
        for i, at in enumerate(range(int(start), int(end) + 1, 5)):
            ops = {f"readings@{site}": {"in": 100 * i, "out": 100 * i}}
            counters = {"cold-chain": {"dlq": int(100 * i * dead)}}
            beat = Heartbeat(site=site, counters=counters, cpu_percent=20.0, operators=ops)
            out.append(Beat(site, float(at), beat))
    return out


def take_up(r: Rollout, at: float, version: str = "v2") -> Rollout:
    """Every site given ``version`` reports it at ``at``."""
    return confirm(r, at, dict.fromkeys(r.on(version), version))


def hold_and_check(r: Rollout, dead: float = 0.0) -> Rollout:
    r = take_up(r, r.started_at + 5)
    assert r.status is Status.HOLDING
    held = r.held_from
    assert held is not None
    beats = healthy(changed_by(r, r.stage), held, held + HOLD, dead)
    assert check(r, held + HOLD - 1, beats, CONTEXT) is r  # not yet
    return check(r, held + HOLD, beats, CONTEXT)


def test_a_healthy_version_reaches_every_site_stage_by_stage() -> None:
    r = rollout()
    assert (r.status, r.stage, len(r.on("v2"))) == (Status.RUNNING, 0, 1)
    r = hold_and_check(r)
    assert (r.status, r.stage, len(r.on("v2"))) == (Status.RUNNING, 1, 2)  # 50% of 4 trucks
    r = hold_and_check(r)
    assert (r.status, r.stage, len(r.on("v2"))) == (Status.RUNNING, 2, 5)
    r = hold_and_check(r)
    assert r.status is Status.PASSED
    assert r.wanted() == dict.fromkeys(sorted(FLEET), "v2")
    assert due(r) is None
    assert [s.status for s in r.steps] == [
        Status.RUNNING,
        *[Status.RUNNING, Status.HOLDING, Status.PASSED] * 3,
    ]
    passed = [s for s in r.steps if s.status is Status.PASSED]
    assert all(len(s.gates) == 2 and all(g.passed for g in s.gates) for s in passed)


def test_a_version_that_dead_letters_is_caught_at_its_canary_and_rolled_back() -> None:
    r = hold_and_check(rollout(), dead=1.0)
    assert r.status is Status.FAILED
    (canary,) = r.stages[0].sites
    assert r.wanted() == dict.fromkeys(sorted(FLEET), "v1")
    assert not r.sites[canary].running
    failed = r.steps[-1]
    assert (failed.status, failed.sites) == (Status.FAILED, (canary,))
    rate = next(g for g in failed.gates if g.gate == "dead_letter_rate<0.01")
    assert (rate.value, rate.passed, rate.site) == (1.0, False, canary)
    assert failed.reason.startswith(f"stage 1/3 kind=truck:1 failed: dead_letter_rate 100% at {canary} (limit < 1%)")
    assert failed.reason.endswith(f"; version v1 given back to {canary}")
    assert due(r) is None
    r = confirm(r, r.started_at + 3, {canary: "v1"})
    assert r.status is Status.ROLLED_BACK
    assert r.steps[-1].reason == "every site runs version v1 again"


def test_a_failing_later_stage_rolls_back_every_changed_site() -> None:
    r = hold_and_check(hold_and_check(rollout()), dead=0.5)
    assert r.status is Status.FAILED
    assert set(r.steps[-1].sites) == set(r.stages[1].sites)
    assert r.on("v2") == ()


def test_only_the_sites_a_stage_changed_are_judged() -> None:
    r = take_up(hold_and_check(rollout()), 2000)
    held = r.held_from
    assert held is not None
    canary = r.stages[0].sites
    beats = healthy(changed_by(r, 1), held, held + HOLD) + healthy(canary, held, held + HOLD, dead=1.0)
    assert check(r, held + HOLD, beats, CONTEXT).stage == 2


def test_a_site_silent_through_the_hold_fails_the_stage() -> None:
    r = take_up(rollout(), 1005)
    r = check(r, 1005 + HOLD, [], CONTEXT)
    assert r.status is Status.FAILED
    assert "sent no heartbeat in the 60 s window" in r.steps[-1].reason


def test_a_stage_not_taken_up_in_time_is_rolled_back() -> None:
    r = rollout(take_up_s=30)
    assert due(r) == 1030
    assert check(r, 1029, [], CONTEXT) is r
    r = check(r, 1030, [], CONTEXT)
    assert r.status is Status.FAILED
    (canary,) = r.stages[0].sites
    assert r.steps[-1].reason == (
        f"stage 1/3 kind=truck:1: {canary} did not run version v2 within 30 s; version v1 given back to {canary}"
    )


def test_a_site_reporting_another_version_is_not_taken_up() -> None:
    r = rollout()
    (canary,) = r.stages[0].sites
    assert confirm(r, 1001, {canary: "v1", "unknown": "v2"}) is r
    assert confirm(r, 1001, {canary: "v2"}).status is Status.HOLDING


def test_a_rollout_is_rolled_back_by_hand_at_any_stage_but_once() -> None:
    for r in (rollout(), take_up(rollout(), 1001), hold_and_check(rollout())):
        back = roll_back(r, 1500)
        assert back.status is Status.FAILED
        assert back.steps[-1].reason.startswith("rolled back by hand; version v1 given back to ")
        with pytest.raises(InvalidRollout, match="is rolling back already"):
            roll_back(back, 1501)
        done = confirm(back, 1502, dict.fromkeys(back.sites, "v1"))
        assert done.status is Status.ROLLED_BACK
        with pytest.raises(InvalidRollout, match="is rolled back already"):
            roll_back(done, 1503)


def test_a_finished_rollout_can_be_rolled_back_too() -> None:
    r = hold_and_check(hold_and_check(hold_and_check(rollout())))
    assert r.status is Status.PASSED
    back = roll_back(r, 9000, "v2 loses readings")
    assert set(back.steps[-1].sites) == set(FLEET)
    assert back.wanted() == dict.fromkeys(sorted(FLEET), "v1")


def test_a_hub_restart_starts_the_hold_again() -> None:
    r = take_up(rollout(), 1005)
    after = resume(r, 1040)
    assert (after.status, after.held_from, due(after)) == (Status.HOLDING, 1040, 1040 + HOLD)
    assert after.steps[-1].reason.startswith("stage 1/3: the hub restarted; the hold starts again")
    running = resume(rollout(), 1040)
    assert (running.started_at, due(running)) == (1040, 1040 + running.take_up_s)
    failed = roll_back(rollout(), 1010)
    assert resume(failed, 1040) is failed


def test_a_stage_the_earlier_ones_covered_is_skipped_without_a_hold() -> None:
    r = rollout("kind=truck:2, kind=truck:25%, *")
    r = hold_and_check(r)
    assert (r.stage, r.status) == (2, Status.RUNNING)
    skipped = r.steps[-2]
    assert (skipped.stage, skipped.status) == (1, Status.PASSED)
    assert "no site to change" in skipped.reason


def test_a_star_that_adds_no_site_ends_the_rollout_when_the_stage_before_passes() -> None:
    trucks = {s: FLEET[s] for s in FLEET if s != "shed"}
    plans = plan_stages(parse_stages("kind=truck:1, kind=truck, *", trucks), trucks, "cold-chain", "v2")
    assert plans[1].sites == plans[2].sites
    r = hold_and_check(hold_and_check(start("cold-chain", "v1", "v2", plans, GATES, HOLD, 0)))
    assert r.status is Status.PASSED
    assert r.steps[-1].reason.startswith("stage 3/3 *: no site to change")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"from_version": "v2"}, "rolls version 'v2' out over itself"),
        ({"hold_s": 0.0}, "its hold_s is 0.0, not a positive number of seconds"),
        ({"take_up_s": float("nan")}, "its take_up_s is nan"),
    ],
)
def test_start_refuses_what_cannot_run(change: dict[str, Any], why: str) -> None:
    args: dict[str, Any] = {"from_version": "v1", "hold_s": HOLD, "take_up_s": 60.0}
    args |= change
    plans = plan_stages(parse_stages("*", FLEET), FLEET, "cold-chain", "v2")
    with pytest.raises(InvalidRollout, match=why.replace("(", r"\(").replace(")", r"\)")):
        start("cold-chain", args["from_version"], "v2", plans, GATES, args["hold_s"], 0, take_up_s=args["take_up_s"])


def test_stages_that_are_not_cumulative_are_refused() -> None:
    plans = plan_stages(parse_stages("kind=truck:2, *", FLEET), FLEET, "cold-chain", "v2")
    swapped = (StagePlan("kind=shed", ("shed",)), plans[0], plans[1])
    with pytest.raises(InvalidRollout, match="leaves out sites of stage 'kind=shed'"):
        start("cold-chain", "v1", "v2", swapped, GATES, HOLD, 0)


# -- JSON ----------------------------------------------------------------------------------


def roundtrip(r: Rollout) -> Rollout:
    return Rollout.from_dict(json.loads(json.dumps(r.to_dict(), allow_nan=False)))


events = st.lists(
    st.tuples(
        st.sampled_from(["take-up", "back-on-v1", "check-healthy", "check-sick", "roll-back", "resume", "wait"]),
        st.floats(0, 200, allow_nan=False),
    ),
    max_size=25,
)


@given(st.sampled_from(["*", "kind=truck:1, *", "kind=truck:1, kind=truck:50%, 3, *", "kind=shed, 25%, *"]), events)
def test_a_rollout_survives_json_at_every_step_and_keeps_its_invariants(spec: str, script: list[Any]) -> None:
    r = rollout(spec, at=0.0)
    now = 0.0
    for event, wait in script:
        now += wait
        if event == "take-up":
            r = take_up(r, now)
        elif event == "back-on-v1":
            r = take_up(r, now, "v1")
        elif event.startswith("check"):
            dead = 1.0 if event == "check-sick" else 0.0
            r = check(r, now, healthy(tuple(r.sites), now - HOLD - 5, now, dead), CONTEXT)
        elif event == "roll-back" and r.status not in (Status.FAILED, Status.ROLLED_BACK):
            r = roll_back(r, now)
        elif event == "resume":
            r = resume(r, now)
        assert roundtrip(r) == r
        on_new = set(r.on("v2"))
        assert on_new <= set(r.stages[r.stage].sites)
        if r.status is Status.PASSED:
            assert on_new == set(FLEET)
        if r.status in (Status.FAILED, Status.ROLLED_BACK):
            assert not on_new
        if r.status is Status.ROLLED_BACK:
            assert all(v.running for v in r.sites.values())
        assert [s.at for s in r.steps] == sorted(s.at for s in r.steps)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"stages": []}, "it has no stage"),
        ({"stage": 7}, "its stage 7 is not one of its 3 stages"),
        ({"status": "paused"}, "'paused' is not a valid Status"),
        ({"held_from": None, "status": "holding"}, "it is holding with held_from None"),
        ({"sites": {"truck-0": {"version": "v3", "since": 0, "running": True}}}, "last stage does not hold every site"),
        ({"gates": "cpu>1"}, "a gate is an upper limit"),
        ({"hold_s": "soon"}, "could not convert string to float"),
    ],
)
def test_a_malformed_record_is_refused_with_what_is_wrong(change: dict[str, Any], why: str) -> None:
    data = rollout().to_dict() | change
    with pytest.raises(InvalidRollout, match=why):
        Rollout.from_dict(data)


def test_the_record_is_plain_json() -> None:
    data = take_up(rollout(), 1001).to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["status"] == "holding"
    assert data["gates"] == "dead_letter_rate<0.01, cpu<0.8"
    assert data["stages"][0]["spec"] == "kind=truck:1"
    assert set(data["sites"]) == set(FLEET)
