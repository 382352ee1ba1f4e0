"""The ``kill-hub`` and ``pause-hub`` faults: parsed, and applied in order against a recording target."""

from __future__ import annotations

import asyncio

import pytest

from simulate.fault_schedule import FaultSchedule
from simulate.faults import FaultKind, InvalidFault, parse_fault, parse_faults
from spanedge.sites import parse_sites

pytestmark = pytest.mark.timeout(10)

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://localhost:1883"}
  edge: {tier: spoke, broker: "mqtt://localhost:1884"}
"""


class HubTarget:
    """Records what the schedule asks of the hub's processes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def kill_hub(self) -> str:
        self.calls.append(("kill-hub",))
        return "hub"

    def start_hub_again(self, name: str) -> None:
        self.calls.append(("start-hub", name))

    def pause_hub(self) -> str:
        self.calls.append(("pause-hub",))
        return "hub-b"

    def resume_hub(self, name: str) -> str:
        self.calls.append(("resume-hub", name))
        return "it kept its lease and goes on leading"


def test_the_hub_faults_parse_with_their_durations() -> None:
    sites = parse_sites(SITES)
    kill = parse_fault("kill-hub@10s", sites)
    assert (kill.kind, kill.site, kill.duration, kill.at) == (FaultKind.KILL_HUB, None, None, 10.0)
    assert parse_fault("kill-hub:5s@10s", sites).duration == 5.0
    pause = parse_fault("pause-hub:15s@replan+2s", sites)
    assert (pause.kind, pause.duration, pause.at) == (FaultKind.PAUSE_HUB, 15.0, 2.0)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("pause-hub@3s", "pause-hub takes the form pause-hub:<duration>@<t>"),
        ("kill-hub:soon@3s", "downtime"),
        ("kill-hub:1s:2s@3s", "kill-hub takes the form kill-hub[:<downtime>]@<t>"),
    ],
)
def test_malformed_hub_faults_say_what_form_they_take(spec: str, why: str) -> None:
    with pytest.raises(InvalidFault, match=why.replace("[", r"\[").replace("]", r"\]")):
        parse_fault(spec)


async def test_a_killed_hub_starts_again_after_its_downtime_and_a_paused_one_resumes() -> None:
    target, notes = HubTarget(), []
    faults = parse_faults(["kill-hub:50ms@0s", "pause-hub:50ms@200ms"])
    schedule = FaultSchedule(faults, target, "cloud", notes.append)  # type: ignore[arg-type]
    await schedule.run(asyncio.get_running_loop().time())
    assert target.calls == [("kill-hub",), ("start-hub", "hub"), ("pause-hub",), ("resume-hub", "hub-b")]
    assert all(a.ended is not None for a in schedule.applied)
    assert "killed hub (SIGKILL of its process group, Spark included)" in notes
    assert notes[-1] == "resumed hub-b (SIGCONT): it kept its lease and goes on leading"
