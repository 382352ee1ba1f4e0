"""The rollout runner on a coordinator with a fake planner and publisher: stages, gates, rollback, restart."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from hub.control.coordinator import Coordinator
from hub.control.distribution import PlanDistributor
from hub.control.registry import SiteRegistry
from hub.control.rollout.model import Status
from hub.control.state import StateStore
from spanedge.app import App
from spanedge.errors import InvalidRollout
from spanedge.loader import source_hash
from spanedge.plan import Assignment, Plan, SolverInfo, Totals
from spanedge.sites import Sites, parse_sites
from tests.keys import KEY, read_plan

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883", cpu: 4}
""" + "".join(
    f"""
  {name}:
    tier: spoke
    broker: "mqtt://127.0.0.1:1883"
    labels: {{kind: {kind}}}
    streams: {{readings: {{topic: "s/{name}/+", rate: 10}}}}
"""
    for name, kind in (("t1", "truck"), ("t2", "truck"), ("t3", "truck"), ("v1", "van"))
)
SPOKES = ("t1", "t2", "t3", "v1")

APP = """
from spanedge import App, sinks

def scale(r):
    return {{**r, "temp": r["temp"] * {factor}}}

app = App("demo")
app.source("readings").map(scale, name="scale").sink(sinks.console(), name="out")
"""
V1, V2 = APP.format(factor=1), APP.format(factor=2)


def local_planner(app: App, sites: Sites, *, version: int, **options: Any) -> Plan:
    """Every operator at each source site: nothing runs at the hub."""
    hub = sites.hubs[0].name
    assignments = [
        Assignment(f"{op.name}@{site.name}", op.name, site.name, site.name, "local")
        for op in app.operators.values()
        for site in sites.sources_of("readings")
    ]
    return Plan(
        app=app.name,
        version=version,
        hub=hub,
        assignments=tuple(assignments),
        flows=(),
        totals=Totals(1.0, 1.0, 1.0, 1.0),
        solver=SolverInfo("fake", "optimal", 0.0),
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Publisher:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self.trial: dict[str, bool] = {}  # per site, whether its last message has the app on trial

    def publish_all(self, messages: Sequence[tuple[str, bytes]]) -> list[bool]:
        self.messages.extend(messages)
        return [True] * len(messages)

    def taken(self) -> list[tuple[str, bytes]]:
        out, self.messages = self.messages, []
        return out

    def versions(self, messages: list[tuple[str, bytes]]) -> dict[str, str]:
        """The source hash each site's last message carries for the app."""
        out = {}
        for topic, payload in messages:
            site = topic.split("/")[3]
            apps = read_plan(payload, site=site)["apps"]
            out[site] = apps[0]["source_sha256"]
            self.trial[site] = apps[0]["plan"].get("trial", False)
        return out


class Fleet:
    """A coordinator with its clock, publisher and state directory, and agents that report what they run."""

    def __init__(self, state: Path) -> None:
        self.clock = Clock()
        self.publisher = Publisher()
        self.state = state
        self.running: dict[str, str] = {}
        self.counts = dict.fromkeys(SPOKES, 0)
        self.dead: dict[str, int] = dict.fromkeys(SPOKES, 0)
        self.coordinator = self.open()

    def open(self) -> Coordinator:
        store = StateStore(self.state)
        return Coordinator(
            SiteRegistry(parse_sites(SITES)),
            planner=local_planner,
            distributor=PlanDistributor(self.publisher, KEY, store),
            store=store,
            clock=self.clock,
        )

    def deliver(self) -> dict[str, str]:
        """The sites' agents take the plans sent since the last call; the versions they got."""
        got = self.publisher.versions(self.publisher.taken())
        self.running.update(got)
        return got

    def beat(self, dead_letter: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        """Every spoke sends a heartbeat: 10 more records in, all dead-lettered at ``dead_letter``."""
        for site in SPOKES:
            self.counts[site] += 10
            if site in dead_letter:
                self.dead[site] += 10
            beat = {
                "site": site,
                "ts": self.clock.now,
                "operators": {f"readings@{site}": {"in": self.counts[site]}},
                "dlq": self.dead[site],
                "counters": {"demo": {"dlq": self.dead[site], "late": 0, "errors": self.dead[site]}},
                "sources": {"demo": self.running[site]} if site in self.running else {},
            }
            assert self.coordinator.heartbeat(site, beat)

    def advance(self, seconds: float, *, dead_letter: set[str] = frozenset(), every: float = 5.0) -> None:  # type: ignore[assignment]
        """Heartbeats every ``every`` s for ``seconds``, ticking the runner after each."""
        t = 0.0
        while t < seconds:
            self.clock.now += every
            t += every
            self.beat(dead_letter)
            self.coordinator.rollouts.tick()


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    f = Fleet(tmp_path)
    f.coordinator.deploy(V1, "app.py")
    f.deliver()
    return f


def status(fleet: Fleet) -> Status:
    record = fleet.coordinator.rollouts.record("demo")
    assert record is not None
    return record.rollout.status


def test_a_healthy_version_reaches_every_site_stage_by_stage(fleet: Fleet) -> None:
    v1, v2 = source_hash(V1), source_hash(V2)
    record = fleet.coordinator.rollouts.deploy(
        V2, "app_v2.py", stages="kind=truck:1, *", gates="dead_letter_rate<1%", hold_s=30
    )
    canary = record.rollout.stages[0].sites
    assert len(canary) == 1
    assert fleet.deliver() == dict.fromkeys(canary, v2)  # only the canary is sent a plan
    assert fleet.publisher.trial == {**dict.fromkeys(SPOKES, False), **dict.fromkeys(canary, True)}
    fleet.advance(5)
    assert status(fleet) is Status.HOLDING
    fleet.advance(30)
    assert fleet.deliver() == {s: v2 for s in SPOKES if s not in canary}
    fleet.advance(40)
    assert status(fleet) is Status.PASSED
    assert fleet.deliver() == dict.fromkeys(SPOKES, v2)  # no longer on trial: the agents drop their v1 state
    assert fleet.publisher.trial == dict.fromkeys(SPOKES, False)
    assert fleet.coordinator.record("demo").source == V2
    assert set(fleet.running.values()) == {v2}
    assert not fleet.coordinator.rollouts.rolling("demo")
    history = [h.reason for h in fleet.coordinator.record("demo").history]
    assert any(r.startswith("rollout: stage 1/2 kind=truck:1 passed: dead_letter_rate 0%") for r in history)
    assert history[-1].startswith("rollout passed")
    assert v1 != v2


def test_a_version_that_dead_letters_everything_is_rolled_back_at_its_canary(fleet: Fleet) -> None:
    v1 = source_hash(V1)
    record = fleet.coordinator.rollouts.deploy(
        V2, "app_v2.py", stages="kind=truck:1, *", gates="dead_letter_rate<1%", hold_s=30
    )
    (canary,) = record.rollout.stages[0].sites
    fleet.deliver()
    fleet.advance(5)
    fleet.advance(30, dead_letter={canary})
    assert status(fleet) is Status.FAILED
    assert fleet.deliver() == {canary: v1}  # v1 given back to the canary only
    fleet.advance(5)
    assert status(fleet) is Status.ROLLED_BACK
    assert set(fleet.running.values()) == {v1}
    assert fleet.coordinator.record("demo").source == V1
    failed = [s for s in fleet.coordinator.rollouts.record("demo").rollout.steps if s.status is Status.FAILED]  # type: ignore[union-attr]
    assert failed[0].gates[0].value == 1.0
    assert f"dead_letter_rate 100% at {canary}" in failed[0].reason
    history = [h.reason for h in fleet.coordinator.record("demo").history]
    assert any("failed: dead_letter_rate 100%" in r for r in history)


def test_a_rollout_rolled_back_by_hand_gives_the_previous_version_back(fleet: Fleet) -> None:
    record = fleet.coordinator.rollouts.deploy(V2, "app_v2.py", stages="kind=truck:2, *", hold_s=60)
    fleet.deliver()
    fleet.advance(5)
    fleet.coordinator.rollouts.roll_back("demo")
    assert set(fleet.deliver()) == set(record.rollout.stages[0].sites)
    fleet.advance(5)
    assert status(fleet) is Status.ROLLED_BACK
    with pytest.raises(InvalidRollout, match="no rollout in progress"):
        fleet.coordinator.rollouts.roll_back("demo")


def test_a_restarted_hub_resumes_the_rollout_and_keeps_each_sites_version(fleet: Fleet) -> None:
    v2 = source_hash(V2)
    record = fleet.coordinator.rollouts.deploy(V2, "app_v2.py", stages="kind=truck:1, *", hold_s=30)
    (canary,) = record.rollout.stages[0].sites
    fleet.deliver()
    fleet.advance(20)
    assert status(fleet) is Status.HOLDING
    fleet.coordinator = fleet.open()  # a new hub process on the same state directory
    fleet.coordinator.resume()
    sent = fleet.deliver()
    assert sent[canary] == v2
    assert all(v != v2 for s, v in sent.items() if s != canary)
    rollout = fleet.coordinator.rollouts.record("demo").rollout  # type: ignore[union-attr]
    assert rollout.status is Status.HOLDING
    assert "the hub restarted" in rollout.steps[-1].reason
    fleet.advance(35)
    assert set(fleet.deliver()) == {s for s in SPOKES if s != canary}
    fleet.advance(40)
    assert status(fleet) is Status.PASSED
    assert set(fleet.running.values()) == {v2}


def test_a_rollout_is_refused_for_an_app_not_deployed_or_the_same_source(fleet: Fleet) -> None:
    runner = fleet.coordinator.rollouts
    with pytest.raises(InvalidRollout, match="nothing to roll out"):
        runner.deploy(V1, "app.py", stages="*", hold_s=10)
    with pytest.raises(InvalidRollout, match="not deployed"):
        runner.deploy(V2.replace('"demo"', '"other"'), "app.py", stages="*", hold_s=10)
    with pytest.raises(InvalidRollout, match="no site has kind=bus"):
        runner.deploy(V2, "app.py", stages="kind=bus:1, *", hold_s=10)
    with pytest.raises(InvalidRollout, match="--hold"):
        runner.deploy(V2, "app.py", stages="*", hold_s=0)


def test_a_plain_deploy_and_re_plans_wait_while_a_rollout_runs(fleet: Fleet) -> None:
    fleet.coordinator.rollouts.deploy(V2, "app_v2.py", stages="*", hold_s=30)
    with pytest.raises(InvalidRollout, match="rolling out"):
        fleet.coordinator.deploy(V2, "app.py")
    assert fleet.coordinator.replan("demo", "test") is None


def test_deleting_the_app_drops_its_rollout(fleet: Fleet) -> None:
    fleet.coordinator.rollouts.deploy(V2, "app_v2.py", stages="*", hold_s=30)
    assert (fleet.state / "rollouts" / "demo.json").exists()
    fleet.coordinator.delete("demo")
    assert fleet.coordinator.rollouts.tick() == ["demo"]
    assert not fleet.coordinator.rollouts.rolling("demo")
    assert not (fleet.state / "rollouts" / "demo.json").exists()


def test_a_forced_re_plan_of_the_previous_version_rolls_the_rollout_back(fleet: Fleet) -> None:
    record = fleet.coordinator.rollouts.deploy(V2, "app_v2.py", stages="kind=truck:1, *", hold_s=30)
    fleet.deliver()
    fleet.advance(5)
    # what a forced re-plan (a site gone for good) installs: a new plan version of the previous source
    deployment = fleet.coordinator.deployments["demo"]
    old = deployment.record
    entry = dataclasses.replace(old.history[-1], version=old.plan.version + 1, reason="t3 gone for good")
    newer = dataclasses.replace(old, plan=dataclasses.replace(old.plan, version=old.plan.version + 1))
    newer = dataclasses.replace(newer, history=[*old.history, entry])
    fleet.coordinator.deployments.install(deployment.app, newer, old.plan, changed=True)
    fleet.coordinator.rollouts.tick()
    assert status(fleet) is Status.FAILED
    reason = fleet.coordinator.rollouts.record("demo").rollout.steps[-1].reason  # type: ignore[union-attr]
    assert "the app was re-planned (plan v2: t3 gone for good)" in reason
    assert set(fleet.deliver()) >= set(record.rollout.stages[0].sites)
