"""The ``deploy`` fault: a new app version mid-run, as a staged rollout or at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulate.faults import FaultKind, InvalidFault, parse_fault
from simulate.rollout_fault import DeploySpec, parse_deploy


def test_a_deploy_fault_carries_the_rollouts_stages_gates_and_hold() -> None:
    fault = parse_fault("deploy:app_v2.py|kind=truck:1, *|dead_letter_rate<0.01, cpu<0.8|10s@20s")
    assert fault.kind is FaultKind.DEPLOY
    assert fault.at == 20.0
    spec = parse_deploy(fault.text.rpartition("@")[0])
    assert spec == DeploySpec(Path("app_v2.py"), "kind=truck:1, *", "dead_letter_rate<0.01, cpu<0.8", "10s")
    assert spec.options() == {"rollout": "kind=truck:1, *", "gates": "dead_letter_rate<0.01, cpu<0.8", "hold": "10s"}


def test_a_deploy_without_stages_goes_everywhere_at_once() -> None:
    spec = parse_deploy("deploy:app_v2.py")
    assert spec.stages is None
    assert spec.options() == {}


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("deploy:@20s", "needs the new version's file"),
        ("deploy:a.py||cpu<0.8@20s", "gates and a hold need stages"),
        ("deploy:a.py|*||soon@20s", "duration"),
        ("deploy:a.py|*|x|1s|more@20s", "at most"),
        ("deploy:a.py@replan+2s", "after the sensors start"),
    ],
)
def test_a_malformed_deploy_fault_says_what_is_wrong(spec: str, why: str) -> None:
    with pytest.raises(InvalidFault, match=why):
        parse_fault(spec)
