"""The fault schedule against a recording target: order, healing, and the sites down meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from simulate.fault_schedule import FaultSchedule
from simulate.faults import parse_faults

pytestmark = pytest.mark.timeout(10)


class Recorder:
    """A fault target that writes down what it was asked to do."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def partition(self, site: str) -> None:
        self.calls.append(("partition", site))

    def heal(self, site: str) -> None:
        self.calls.append(("heal", site))

    def set_latency(self, site: str, delay_ms: float) -> None:
        self.calls.append(("latency", site, f"{delay_ms:.0f}"))

    def restart_broker(self, site: str) -> None:
        self.calls.append(("restart-broker", site))

    def kill_agent(self, site: str) -> None:
        self.calls.append(("kill", site))

    def start_agent(self, site: str) -> None:
        self.calls.append(("start", site))

    def restart_hub(self) -> None:
        self.calls.append(("restart-hub",))


async def test_faults_happen_in_time_order_and_heal() -> None:
    target, notes = Recorder(), []
    faults = parse_faults(
        ["latency:edge:150ms@450ms", "partition:edge:600ms@0s", "kill-agent:edge@100ms", "restart-hub@300ms"]
    )
    schedule = FaultSchedule(faults, target, "cloud", notes.append, restart_delay=0.05)
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(schedule.run(loop.time()))
    await asyncio.sleep(0.2)
    assert schedule.down == {"edge"}
    await task
    assert schedule.down == set()
    assert target.calls == [
        ("partition", "edge"),
        ("kill", "edge"),
        ("start", "edge"),
        ("restart-hub",),
        ("latency", "edge", "150"),
        ("heal", "edge"),
    ]
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
    await asyncio.wait_for(schedule.run(asyncio.get_running_loop().time()), timeout=1)
