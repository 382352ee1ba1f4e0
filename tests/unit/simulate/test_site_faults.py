"""The overload, kill-site and revoke faults: their grammar and what the schedule does with them."""

from __future__ import annotations

import asyncio

import pytest

from simulate.fault_schedule import FaultSchedule
from simulate.faults import FaultKind, InvalidFault, parse_fault, parse_faults
from spanedge.sites import load_sites
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.timeout(10)


def test_overload_takes_an_optional_factor_then_an_optional_duration() -> None:
    plain, factor, lasting, both = (
        parse_fault(s)
        for s in ("overload:barn@20s", "overload:barn:3@20s", "overload:barn:30s@20s", "overload:barn:3:30s@20s")
    )
    assert (plain.kind, plain.site, plain.at, plain.factor, plain.duration) == (FaultKind.OVERLOAD, "barn", 20, 4, None)
    assert (factor.factor, factor.duration) == (3, None)
    assert (lasting.factor, lasting.duration) == (4, 30)
    assert (both.factor, both.duration) == (3, 30)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("overload:barn:30s:3@1s", "the duration comes last"),
        ("overload:barn:0.5@1s", "the factor must be above 1"),
        ("overload:barn:3:4@1s", "must be a duration with a unit"),
        ("kill-site:barn:3@2s", "kill-site takes the form kill-site:<spoke>@<t>"),
        ("kill-site:cloud@2s", "is a hub and runs no agent"),
        ("overload:cloud@2s", "is a hub and runs no agent"),
        ("revoke:cloud@2s", "is a hub and runs no agent"),
        ("revoke:barn:3@2s", "revoke takes the form revoke:<spoke>@<t>"),
    ],
)
def test_bad_site_faults_say_why(spec: str, why: str) -> None:
    with pytest.raises(InvalidFault, match=why):
        parse_fault(spec, load_sites(EXAMPLES / "smart_farm" / "sites.yaml"))


class Target:
    """A fault target whose agent uses 0.2 cores."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.cpu = 0.0

    def agent_cpu_seconds(self, site: str) -> float:
        self.cpu += 0.2 * 0.1  # 0.2 cores over the 0.1 s the schedule measures
        return self.cpu

    def set_cpu_budget(self, site: str, cores: float | None) -> None:
        self.calls.append(("budget", site, None if cores is None else round(cores, 3)))

    def kill_site(self, site: str) -> None:
        self.calls.append(("kill-site", site))

    def revoke_site(self, site: str) -> list[str]:
        self.calls.append(("revoke", site))
        return ["broker.pid: pid 7 reloaded (SIGHUP)", "apps re-planned: smart-farm"]


async def test_overload_shrinks_the_budget_to_a_share_of_the_use_then_restores_it() -> None:
    target, notes = Target(), list[str]()
    faults = parse_faults(["overload:barn:4:300ms@0s"])
    schedule = FaultSchedule(faults, target, "cloud", notes.append, measure_s=0.1)  # type: ignore[arg-type]
    await schedule.run(asyncio.get_running_loop().time())
    assert target.calls == [("budget", "barn", 0.05), ("budget", "barn", None)]
    assert schedule.applied[0].ended is not None
    assert "CPU budget of barn set to 0.050 cores (its agent used 0.200)" in notes


async def test_kill_site_stops_the_sensors_kills_the_agent_for_good_and_says_when() -> None:
    target, stopped = Target(), list[str]()
    schedule = FaultSchedule(
        parse_faults(["kill-site:barn@0s"]),
        target,  # type: ignore[arg-type]
        "cloud",
        lambda _: None,
        stop_sensors=stopped.append,
        clock=lambda: 42.0,
    )
    await schedule.run(asyncio.get_running_loop().time())
    assert stopped == ["barn"]
    assert target.calls == [("kill-site", "barn")]
    assert schedule.killed == {"barn": 42.0}
    assert schedule.stopped == {"barn"}


async def test_revoke_counts_the_site_lost_from_then_on_but_keeps_its_sensors_and_agent() -> None:
    target, stopped, notes = Target(), list[str](), list[str]()
    schedule = FaultSchedule(
        parse_faults(["revoke:barn@0s"]),
        target,  # type: ignore[arg-type]
        "cloud",
        notes.append,
        stop_sensors=stopped.append,
        clock=lambda: 42.0,
    )
    await schedule.run(asyncio.get_running_loop().time())
    assert stopped == []  # a revoked gateway goes on sending: the brokers refuse it
    assert target.calls == [("revoke", "barn")]
    assert schedule.killed == {"barn": 42.0}
    assert schedule.revoked == {"barn"}
    assert any(n.startswith("revoked site barn; its agent and sensors keep running: broker.pid") for n in notes)
