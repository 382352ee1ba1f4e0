"""The fault schedule against a recording target: order, healing, and the sites down meanwhile."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from simulate.fault_schedule import FaultSchedule, first_move
from simulate.faults import parse_faults

pytestmark = pytest.mark.timeout(10)


class Recorder:
    """A fault target that writes down what it was asked to do."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.schedule: FaultSchedule | None = None
        self.down: list[set[str]] = []  # the schedule's sites down as each call came

    def _call(self, *call: str) -> None:
        self.calls.append(call)
        if self.schedule is not None:
            self.down.append(set(self.schedule.down))

    def partition(self, site: str) -> None:
        self._call("partition", site)

    def heal(self, site: str) -> None:
        self._call("heal", site)

    def set_latency(self, site: str, delay_ms: float) -> None:
        self._call("latency", site, f"{delay_ms:.0f}")

    def restart_broker(self, site: str) -> None:
        self._call("restart-broker", site)

    def kill_agent(self, site: str) -> None:
        self._call("kill", site)

    def start_agent(self, site: str) -> None:
        self._call("start", site)

    def restart_hub(self) -> None:
        self._call("restart-hub")


async def test_an_agent_killed_with_a_downtime_starts_again_after_it() -> None:
    target, notes = Recorder(), []
    faults = parse_faults(["kill-agent:edge:2s@0s"])
    schedule = FaultSchedule(faults, target, "cloud", notes.append, restart_delay=0.01)
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(schedule.run(loop.time()))
    await asyncio.sleep(0.3)
    assert target.calls == [("kill", "edge")]  # down for its downtime, not the restart delay
    await task
    assert target.calls == [("kill", "edge"), ("start", "edge")]
    assert notes[-1] == "restarted agent edge"
    (applied,) = schedule.applied
    assert applied.ended is not None
    assert (schedule.stopped, schedule.killed) == ({"edge"}, {})  # stopped, back: not killed for good


async def test_faults_happen_in_time_order_and_heal() -> None:
    target, notes = Recorder(), []
    faults = parse_faults(
        ["latency:edge:150ms@450ms", "partition:edge:600ms@0s", "kill-agent:edge@100ms", "restart-hub@300ms"]
    )
    schedule = FaultSchedule(faults, target, "cloud", notes.append, restart_delay=0.05)
    target.schedule = schedule
    loop = asyncio.get_running_loop()
    await schedule.run(loop.time())
    assert schedule.down == set()
    # the faults in time order; the agent's restart comes after its kill (50 ms later on an idle machine)
    restart = target.calls.index(("start", "edge"))
    assert restart > target.calls.index(("kill", "edge"))
    assert [c for c in target.calls if c != ("start", "edge")] == [
        ("partition", "edge"),
        ("kill", "edge"),
        ("restart-hub",),
        ("latency", "edge", "150"),
        ("heal", "edge"),
    ]
    assert target.down[target.calls.index(("kill", "edge"))] == {"edge"}  # cut off by the partition meanwhile
    assert notes[0] == "fault partition:edge:600ms@0s"
    assert notes[-1] == "healed edge"
    assert "killed agent edge (SIGKILL)" in notes
    assert "restarted agent edge" in notes
    assert "latency of edge's links set to 150 ms" in notes
    applied = {a.fault.describe(): a for a in schedule.applied}
    assert list(applied) == [
        "partition:edge:600ms@0s",
        "kill-agent:edge@100ms",
        "restart-hub@300ms",
        "latency:edge:150ms@450ms",
    ]
    partition, kill = applied["partition:edge:600ms@0s"], applied["kill-agent:edge@100ms"]
    assert partition.ended is not None
    assert partition.ended - partition.began >= 0.55  # healed after its duration
    assert kill.ended is not None
    assert kill.ended >= kill.began
    assert applied["restart-hub@300ms"].ended is None
    assert applied["latency:edge:150ms@450ms"].ended is None


async def test_a_fault_without_a_site_concerns_the_hub() -> None:
    target, notes = Recorder(), []
    schedule = FaultSchedule(parse_faults(["restart-broker:cloud@0s"]), target, "cloud", notes.append)
    await schedule.run(asyncio.get_running_loop().time())
    assert target.calls == [("restart-broker", "cloud")]
    assert notes == ["fault restart-broker:cloud@0s", "restarted the broker of cloud"]


async def test_no_faults_return_at_once() -> None:
    schedule = FaultSchedule([], Recorder(), "cloud", print)
    await asyncio.wait_for(schedule.run(asyncio.get_running_loop().time()), timeout=30)  # hangs, not slowness


def _placement(replan_at: float, switch_at: float) -> dict[str, Any]:
    """A hub's placement answer after one re-plan moved a window from barn to shed."""
    moved = [{"replica": "w@east", "from": "barn", "to": "shed"}]
    return {
        "history": [
            {"version": 1, "at": replan_at - 30, "changed": True, "moved": []},
            {"version": 2, "at": replan_at, "changed": True, "moved": moved},
        ],
        "handovers": [{"replica": "w@east", "source": "barn", "target": "shed", "switch_at": switch_at}],
    }


async def test_faults_after_the_first_move_hit_its_owners() -> None:
    target, notes = Recorder(), []
    now = time.time()
    answers: list[Any] = [None, {"history": [{"version": 1, "at": now - 5, "changed": True}]}]

    async def placement() -> Any:
        return answers.pop(0) if answers else _placement(now + 0.1, now + 0.4)

    faults = parse_faults(["kill-agent:new-owner@switch+100ms", "partition:old-owner:50ms@replan+50ms"])
    schedule = FaultSchedule(
        faults, target, "cloud", notes.append, restart_delay=0.01, placement=placement, poll_s=0.02
    )
    await asyncio.wait_for(schedule.run(asyncio.get_running_loop().time()), timeout=5)
    assert target.calls == [("partition", "barn"), ("heal", "barn"), ("kill", "shed"), ("start", "shed")]
    assert schedule.move is not None
    assert (schedule.move.source, schedule.move.target) == ("barn", "shed")
    kill = next(a for a in schedule.applied if a.fault.kind.value == "kill-agent")
    assert kill.began >= now + 0.5  # the switch plus its offset
    assert any(n.startswith("first move: re-plan at") and "barn -> shed" in n for n in notes)
    assert not schedule.skipped


async def test_faults_after_a_move_that_never_comes_are_skipped_and_said() -> None:
    target, notes = Recorder(), []

    async def placement() -> Any:
        return None

    schedule = FaultSchedule(
        parse_faults(["kill-agent:barn@replan+1s"]), target, "cloud", notes.append, placement=placement, poll_s=0.01
    )
    loop = asyncio.get_running_loop()
    await asyncio.wait_for(schedule.run(loop.time(), until=loop.time() + 0.1), timeout=5)
    assert target.calls == []
    assert schedule.skipped == [
        "fault kill-agent:barn@replan+1s was not applied: no re-plan changed the placement before the sensors stopped"
    ]


def test_the_first_move_is_the_first_change_after_the_start() -> None:
    answer = _placement(1000.0, 1010.0)
    assert first_move(answer, 1001.0) is None
    move = first_move(answer, 990.0)
    assert move is not None
    assert (move.replan_at, move.switch_at, move.source, move.target) == (1000.0, 1010.0, "barn", "shed")
    answer["handovers"] = []  # a move to the hub: no switch, the owners from what moved
    move = first_move(answer, 990.0)
    assert move is not None
    assert (move.switch_at, move.source, move.target) == (None, "barn", "shed")
