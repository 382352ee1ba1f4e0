"""The coordinator: heartbeat registry, latency smoothing, drift re-planning, persistence."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from hub.control import plan_history
from hub.control.coordinator import Coordinator
from hub.control.distribution import PlanDistributor, SiteApp, site_view
from hub.control.planning import load_app
from hub.control.registry import SiteRegistry
from hub.control.state import AppRecord, StateStore
from spanedge.app import App
from spanedge.errors import InvalidPlan
from spanedge.operators import Kind
from spanedge.plan import Assignment, Flow, Handover, Plan, SolverInfo, Totals
from spanedge.signing import TrustedKeys, sign_plan
from spanedge.sites import Sites, parse_sites
from tests.keys import KEY, ROGUE, read_plan

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883", cpu: 4}
  a:
    tier: spoke
    broker: "mqtt://127.0.0.1:1883"
    streams: {readings: {topic: "s/a/+", rate: 10}}
  b:
    tier: spoke
    broker: "mqtt://127.0.0.1:1883"
    streams: {readings: {topic: "s/b/+", rate: 20}}
links:
  - {between: [a, cloud], latency_ms: 40}
  - {between: [b, cloud], latency_ms: 30}
"""

APP = """
from spanedge import App, sinks

def double(r):
    return r * 2

app = App("demo")
app.source("readings").map(double, name="double").sink(sinks.console(), name="out")
"""


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fake_planner(
    app: App,
    sites: Sites,
    *,
    latency_rows: list[dict[str, Any]],
    weights: Any,
    slo_ms: float | None,
    version: int,
    previous: Plan | None = None,
    state_bytes: Any = None,
    key_spread: Any = None,
) -> Plan:
    """Sources at their sites; the rest at the hub, or at site 'a' if a's link to the hub is slow."""
    hub = sites.hubs[0].name
    slow = any(r["latency_p50_ms"] > 100 and {r["src"], r["dst"]} == {"a", hub} for r in latency_rows)
    assignments = []
    for op in app.operators.values():
        if op.kind is Kind.SOURCE:
            for site in sites.sources_of(op.stream or op.name):
                assignments.append(Assignment(f"{op.name}@{site.name}", op.name, site.name, site.name, "source"))
        else:
            site = "a" if slow else hub
            assignments.append(Assignment(op.name, op.name, None, site, "slow hub link" if slow else "cheapest"))
    rate = sum(b.rate for s in sites.sites.values() for b in s.streams.values())
    return Plan(
        app=app.name,
        version=version,
        hub=hub,
        assignments=tuple(assignments),
        flows=(),
        totals=Totals(wan_bytes_per_s=rate * 100, worst_latency_ms=40, mean_latency_ms=35, objective=1.0),
        solver=SolverInfo("fake", "optimal", 0.0),
        baselines={"central": Totals(rate * 200, 40, 35, 2.0)},
        slo_ms=slo_ms,
    )


NO_OPTIONS: dict[str, Any] = {"latency_rows": [], "weights": None, "slo_ms": None, "version": 1}


class FakePublisher:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self.unreachable: set[str] = set()  # sites whose messages the broker does not acknowledge

    def publish_all(self, messages: Sequence[tuple[str, bytes]]) -> list[bool]:
        self.messages.extend(messages)
        return [topic.split("/")[3] not in self.unreachable for topic, _ in messages]

    def sites(self) -> list[str]:
        return [topic.split("/")[3] for topic, _ in self.messages]

    def last(self, site: str) -> dict[str, Any]:
        topic = f"spanedge/v1/control/{site}/plan"
        payload = [p for t, p in self.messages if t == topic][-1]
        return read_plan(payload, site=site)


class FakeEngine:
    def __init__(self) -> None:
        self.deployed: dict[str, Plan] = {}
        self.calls: list[str] = []
        self.writing: dict[str, list[str]] = {}  # per app, the hub queries still writing a share

    def deploy(self, app: App, plan: Plan) -> None:
        self.deployed[app.name] = plan
        self.calls.append(f"deploy {app.name} v{plan.version}")

    def undeploy(self, name: str) -> None:
        self.deployed.pop(name, None)
        self.calls.append(f"undeploy {name}")

    def unsettled(self, name: str, proposed: Plan | None = None) -> list[str]:
        return list(self.writing.get(name, []))


@pytest.fixture
def sites() -> Sites:
    return parse_sites(SITES)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def heartbeat(site: str, **extra: Any) -> bytes:
    return orjson.dumps({"site": site, "ts": 0, "apps": [], "operators": {}, **extra})


def make(sites: Sites, clock: Clock, tmp_path: Path | None = None) -> tuple[Coordinator, FakePublisher, FakeEngine]:
    registry = SiteRegistry(sites, down_after_s=15, alpha=0.5, clock=clock)
    publisher = FakePublisher()
    store = StateStore(tmp_path) if tmp_path is not None else None
    engine = FakeEngine()
    coordinator = Coordinator(
        registry,
        planner=fake_planner,
        distributor=PlanDistributor(publisher, KEY, store),
        engine=engine,
        store=store,
        drift_threshold=0.5,
        min_replan_interval_s=30,
        clock=clock,
    )
    return coordinator, publisher, engine


# -- registry ----------------------------------------------------------------------------------


def test_heartbeats_make_a_site_alive_until_it_falls_silent(sites: Sites, clock: Clock) -> None:
    registry = SiteRegistry(sites, down_after_s=15, clock=clock)
    assert not registry.alive("a")
    assert registry.heartbeat("a", heartbeat("a", outbox={"records": 7}, cpu_percent=12.5))
    clock.now += 10
    assert registry.alive("a")
    status = {s["site"]: s for s in registry.status()}
    assert status["a"]["alive"] is True
    assert status["a"]["last_heartbeat_age_s"] == 10
    assert status["a"]["outbox"] == {"records": 7}
    assert status["b"]["alive"] is False
    assert status["b"]["last_heartbeat_age_s"] is None
    clock.now += 6
    assert not registry.alive("a")


def test_malformed_and_misaddressed_heartbeats_are_ignored(sites: Sites, clock: Clock) -> None:
    registry = SiteRegistry(sites, clock=clock)
    assert not registry.heartbeat("a", b"{not json")
    assert not registry.heartbeat("a", b"[1, 2]")
    assert not registry.heartbeat("a", heartbeat("b"))
    assert not registry.heartbeat("nowhere", heartbeat("nowhere"))
    assert not registry.alive("a")
    assert {s["site"]: s for s in registry.status()}["a"]["rejected_heartbeats"] == 3


def test_what_a_heartbeat_carries_is_escaped_in_the_log(
    sites: Sites, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.logtext import raw_controls

    caplog.set_level(logging.DEBUG, logger="hub")
    coordinator, _, _ = make(sites, clock)
    coordinator.registry.revoked.add("b")
    assert not coordinator.heartbeat("evil\u202e", heartbeat("evil\u202e"))
    assert not coordinator.heartbeat("a", heartbeat("a\nINFO fake"))
    assert not coordinator.heartbeat("b", heartbeat("b"))
    assert coordinator.heartbeat("a", heartbeat("a", operators={"x\x1b[2J\u2066": {"rate_in": "fast"}}))
    assert coordinator.registry.heartbeat("a", heartbeat("a", latency={"b": {"rtt_ms": "\u202efar"}}))
    logged = [r.getMessage() for r in caplog.records]
    assert "heartbeat from site 'evil\\u202e', which sites.yaml does not define; ignoring it" in logged
    assert any(
        line.startswith("heartbeat of site 'a': ignoring fields of the wrong type: operators.x\\x1b[2J\\u2066")
        for line in logged
    )
    assert [line for line in logged if raw_controls(line)] == []


def test_latency_is_half_the_rtt_smoothed_with_declared_fallback(sites: Sites, clock: Clock) -> None:
    registry = SiteRegistry(sites, alpha=0.5, stale_after_s=60, clock=clock)
    registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": None, "p95_ms": None, "samples": 0}}))
    declared = registry.link("a", "cloud")
    assert (declared["latency_ms"], declared["source"], declared["age_s"]) == (40, "declared", None)
    registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 100, "p95_ms": 160, "samples": 5}}))
    assert registry.link("a", "cloud")["latency_ms"] == 50
    clock.now += 2
    registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 200, "p95_ms": 260, "samples": 9}}))
    clock.now += 3
    link = registry.link("cloud", "a")
    assert link["latency_ms"] == 75  # 0.5 * 100 + 0.5 * 50
    assert link["p95_ms"] == 105
    assert (link["source"], link["age_s"], link["samples"]) == ("measured", 3, 9)
    rows = registry.latency_rows()
    assert {(r["src"], r["dst"]) for r in rows} == {("a", "cloud"), ("cloud", "a")}
    assert rows[0]["latency_p50_ms"] == 75
    matrix = registry.matrix()
    assert len(matrix) == 6
    assert {r["source"] for r in matrix if {r["src"], r["dst"]} == {"a", "b"}} == {"path"}
    clock.now += 61
    assert registry.link("a", "cloud")["source"] == "declared"
    assert registry.latency_rows() == []


def test_measured_source_rates_replace_declared_ones_while_the_site_is_alive(sites: Sites, clock: Clock) -> None:
    registry = SiteRegistry(sites, down_after_s=15, clock=clock)
    registry.heartbeat("a", heartbeat("a", operators={"readings@a": {"in": 5, "out": 5, "rate_out": 55.0}}))
    effective = registry.effective_sites()
    assert effective.sites["a"].streams["readings"].rate == 55
    assert effective.sites["b"].streams["readings"].rate == 20
    clock.now += 16
    assert registry.effective_sites().sites["a"].streams["readings"].rate == 10


def test_source_rates_are_smoothed_and_a_first_zero_is_not_believed(sites: Sites, clock: Clock) -> None:
    registry = SiteRegistry(sites, alpha=0.5, clock=clock)
    registry.heartbeat("a", heartbeat("a", operators={"readings@a": {"in": 500, "out": 500, "rate_out": 0.0}}))
    assert registry.stream_rate("readings", "a") is None
    registry.heartbeat("a", heartbeat("a", operators={"readings@a": {"rate_out": 40.0}}))
    registry.heartbeat("a", heartbeat("a", operators={"readings@a": {"rate_out": 20.0}}))
    assert registry.stream_rate("readings", "a") == 30
    registry.heartbeat("a", heartbeat("a", operators={"readings@a": {"rate_out": 0.0}}))
    assert registry.stream_rate("readings", "a") == 15


# -- coordinator -------------------------------------------------------------------------------


def test_deploy_plans_persists_distributes_and_starts_the_hub_part(sites: Sites, clock: Clock, tmp_path: Path) -> None:
    coordinator, publisher, engine = make(sites, clock, tmp_path)
    record, status = coordinator.deploy(APP, "app.py")
    assert record.plan.version == 1
    assert record.plan.app_source == APP
    assert status == {"a": "published", "b": "published", "cloud": "published"}
    message = publisher.last("a")
    assert [entry["app"] for entry in message["apps"]] == ["demo"]
    assert message["apps"][0]["plan"]["version"] == 1
    assert engine.calls == ["deploy demo v1"]
    assert [h.reason for h in record.history] == ["deployed"]

    record, _ = coordinator.deploy(APP.replace("* 2", "* 3"), "app.py")
    assert record.plan.version == 2
    assert [h.reason for h in record.history] == ["deployed", "redeployed with new source"]
    assert publisher.last("a")["version"] > message["version"]

    coordinator.delete("demo")
    assert publisher.last("a")["apps"] == []
    assert engine.calls[-1] == "undeploy demo"
    assert StateStore(tmp_path).load_apps() == []
    with pytest.raises(KeyError):
        coordinator.delete("demo")


def test_a_restarted_coordinator_resumes_the_persisted_apps(sites: Sites, clock: Clock, tmp_path: Path) -> None:
    first, first_publisher, _ = make(sites, clock, tmp_path)
    first.deploy(APP, "app.py", slo_ms=250)
    before = first_publisher.last("a")["version"]
    second, publisher, engine = make(sites, clock, tmp_path)
    assert second.resume() == ["demo"]
    assert second.record("demo").slo_ms == 250
    assert engine.calls == ["deploy demo v1"]
    assert publisher.last("a")["version"] > before


def test_a_restarted_coordinator_re_issues_the_plan_of_every_site_it_sent_one(
    sites: Sites, clock: Clock, tmp_path: Path
) -> None:
    """A site whose apps were all deleted gets a fresh empty plan too, so its plan never expires."""
    first, first_publisher, _ = make(sites, clock, tmp_path)
    first.deploy(APP, "app.py")
    first.delete("demo")
    before = first_publisher.last("a")
    second, publisher, _ = make(sites, clock, tmp_path)
    assert second.resume() == []
    again = publisher.last("a")
    assert again["apps"] == []
    assert again["version"] > before["version"]


def test_drift_beyond_the_threshold_replans_and_records_why(sites: Sites, clock: Clock) -> None:
    coordinator, publisher, engine = make(sites, clock)
    coordinator.deploy(APP, "app.py")
    assert coordinator.record("demo").plan.site_of("double") == "cloud"
    clock.now += 5
    assert coordinator.check_drift() == []

    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.drift("demo") == ["latency a–cloud 40.0→200.0 ms (+400%)"]
    assert coordinator.check_drift() == []  # too soon after the deploy
    clock.now += 30
    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.check_drift() == ["demo"]

    record = coordinator.record("demo")
    assert record.plan.version == 2
    assert record.plan.site_of("double") == "a"
    last = record.history[-1]
    assert (last.version, last.changed, last.at) == (2, True, clock.now)
    assert "latency a–cloud" in last.reason
    assert publisher.last("a")["apps"][0]["plan"]["version"] == 2
    assert engine.calls[-1] == "deploy demo v2"
    clock.now += 60
    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.check_drift() == []


def test_a_replan_hands_the_plan_in_force_to_the_planner(sites: Sites, clock: Clock) -> None:
    coordinator, _, _ = make(sites, clock)
    seen: list[int | None] = []

    def remembering(app: App, sites: Sites, **options: Any) -> Plan:
        previous = options.get("previous")
        seen.append(None if previous is None else previous.version)
        return fake_planner(app, sites, **options)

    coordinator.planner = remembering
    coordinator.deploy(APP, "app.py")
    clock.now += 31
    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.check_drift() == ["demo"]
    assert seen == [None, 1]  # a first deploy has none; the re-plan gets v1 (migration cost, hysteresis)


def test_rate_drift_that_keeps_the_placement_is_recorded_without_a_new_version(sites: Sites, clock: Clock) -> None:
    coordinator, publisher, engine = make(sites, clock)
    coordinator.deploy(APP, "app.py")
    published = len(publisher.messages)
    clock.now += 31
    coordinator.registry.heartbeat("b", heartbeat("b", operators={"readings@b": {"rate_out": 80.0}}))
    assert coordinator.check_drift() == ["demo"]
    record = coordinator.record("demo")
    assert record.plan.version == 1
    assert record.history[-1].changed is False
    assert record.history[-1].reason == "rate of readings@b 20.0→80.0 rec/s (+300%); placement unchanged"
    assert len(publisher.messages) == published
    assert engine.calls == ["deploy demo v1"]


def test_a_failed_replan_keeps_the_plan_and_waits_the_interval(sites: Sites, clock: Clock) -> None:
    coordinator, _, _ = make(sites, clock)
    coordinator.deploy(APP, "app.py")
    clock.now += 31

    def broken(*args: Any, **kwargs: Any) -> Plan:
        raise RuntimeError("solver crashed")

    coordinator.planner = broken
    coordinator.registry.heartbeat("b", heartbeat("b", operators={"readings@b": {"rate_out": 80.0}}))
    assert coordinator.check_drift() == []
    assert coordinator.record("demo").plan.version == 1
    coordinator.planner = fake_planner
    clock.now += 5
    assert coordinator.check_drift() == []  # the failed attempt counts for the minimum interval
    clock.now += 30
    coordinator.registry.heartbeat("b", heartbeat("b", operators={"readings@b": {"rate_out": 80.0}}))
    assert coordinator.check_drift() == ["demo"]


def test_small_absolute_changes_are_not_drift(sites: Sites, clock: Clock) -> None:
    coordinator, _, _ = make(sites, clock)
    coordinator.deploy(APP, "app.py")
    clock.now += 31
    # 20 -> 21 rec/s and 40 -> 41 ms are within the threshold
    coordinator.registry.heartbeat(
        "b", heartbeat("b", operators={"readings@b": {"rate_out": 21.0}}, latency={"cloud": {"rtt_ms": 82}})
    )
    assert coordinator.drift("demo") == []


def test_plan_versions_increase_per_site_across_restarts_and_clock_steps(tmp_path: Path) -> None:
    publisher = FakePublisher()
    store = StateStore(tmp_path)
    now = [5_000]
    first = PlanDistributor(publisher, KEY, store, clock_ns=lambda: now[0])
    first.publish({}, ["a"])
    demo = fake_planner(load_app(APP, "app.py"), parse_sites(SITES), **NO_OPTIONS)
    first.publish({"demo": SiteApp(demo, APP)}, ["a"])  # a's part changed: sent
    now[0] = 10  # the clock stepped backwards
    second = PlanDistributor(publisher, KEY, StateStore(tmp_path), clock_ns=lambda: now[0])
    second.publish({}, ["a"])
    versions = [read_plan(p, site="a")["version"] for _, p in publisher.messages]
    assert versions == [5_000, 5_001, 5_002]


def test_forged_stale_and_misaddressed_plan_messages_are_rejected() -> None:
    publisher = FakePublisher()
    PlanDistributor(publisher, KEY).publish({}, ["a"])
    message = publisher.messages[-1][1]
    payload = read_plan(message, site="a")
    with pytest.raises(InvalidPlan, match="trusts only key ids"):
        read_plan(message, site="a", trusted=TrustedKeys([ROGUE.public_key]))
    with pytest.raises(InvalidPlan, match="stale"):
        read_plan(message, site="a", applied_version=payload["version"])
    with pytest.raises(InvalidPlan, match="serves 'b'"):
        read_plan(message, site="b")
    tampered = {**payload, "apps": [{"app": "x", "plan": {}, "source": "evil", "source_sha256": "0" * 64}]}
    with pytest.raises(InvalidPlan, match="SHA-256"):
        read_plan(sign_plan(tampered, KEY), site="a")
    with pytest.raises(InvalidPlan, match="trusts only key ids"):  # a gateway cannot sign for the hub
        read_plan(sign_plan(payload, ROGUE), site="a")


def test_the_history_records_what_moved_and_the_baselines(sites: Sites, clock: Clock, tmp_path: Path) -> None:
    coordinator, _, _ = make(sites, clock, tmp_path)
    coordinator.deploy(APP, "app.py")
    first = coordinator.record("demo").history[0]
    assert first.moved == []
    assert first.baselines["central"]["objective"] == 2.0
    assert first.baselines["central"]["wan_bytes_per_s"] == 6000

    clock.now += 31
    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.check_drift() == ["demo"]
    moved = coordinator.record("demo").history[-1]
    assert moved.version == 2
    switch = {h.replica: h.switch_at for h in coordinator.record("demo").plan.handovers}
    assert moved.moved == [
        {"replica": "double", "from": "cloud", "to": "a", "switch_at": switch["double"]},
        {"replica": "out", "from": "cloud", "to": "a", "switch_at": switch["out"]},
    ]
    assert set(moved.baselines) == {"central"}

    owners = {a.replica: a.since for a in coordinator.record("demo").plan.assignments}
    assert {r for r, since in owners.items() if since} == {"double", "out"}  # moved: epoch 2
    assert {owners["double"], owners["out"]} == {2}

    coordinator.deploy(APP, "app.py")  # same inputs: nothing moves
    assert coordinator.record("demo").history[-1].moved == []
    assert {a.replica: a.since for a in coordinator.record("demo").plan.assignments} == owners
    again, _, _ = make(sites, clock, tmp_path)
    assert again.resume() == ["demo"]
    assert again.record("demo").history[1].moved == moved.moved


def test_replans_wait_while_a_spoke_of_the_app_is_silent(
    sites: Sites, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator, _, _ = make(sites, clock)
    coordinator.deploy(APP, "app.py")
    coordinator.registry.heartbeat("b", heartbeat("b"))
    clock.now += 31  # b was heard once, then fell silent (down_after_s is 15): cut off or down
    caplog.set_level(logging.INFO, logger="hub")
    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.drift("demo")  # the drift is there ...
    assert coordinator.check_drift() == []  # ... but a move could not be handed over to or from b now
    assert coordinator.check_drift() == []
    assert [r.getMessage() for r in caplog.records if "re-plans wait" in r.getMessage()] == [
        "app 'demo': re-plans wait until b is heard from again"
    ]
    assert coordinator.record("demo").plan.version == 1
    coordinator.registry.heartbeat("b", heartbeat("b"))
    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.check_drift() == ["demo"]
    assert coordinator.record("demo").plan.version == 2


def test_an_unchanged_redeploy_sends_nothing_and_a_move_only_the_sites_it_concerns(
    sites: Sites, clock: Clock, tmp_path: Path
) -> None:
    coordinator, publisher, _ = make(sites, clock, tmp_path)
    _, status = coordinator.deploy(APP, "app.py")
    assert status == {"a": "published", "b": "published", "cloud": "published"}
    sent = len(publisher.messages)

    record, status = coordinator.deploy(APP, "app.py")  # a new plan version; no site's part changed
    assert record.plan.version == 2
    assert status == {"a": "unchanged", "b": "unchanged", "cloud": "unchanged"}
    assert len(publisher.messages) == sent
    assert StateStore(tmp_path).load_apps()[0].plan.version == 2  # the record is still stored

    clock.now += 31  # a's link slows: 'double' and 'out' move from the hub to a
    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.check_drift() == ["demo"]
    assert publisher.sites()[sent:] == ["a", "cloud"]  # b runs only its source, fed by nobody: unchanged
    plan = publisher.last("a")["apps"][0]["plan"]
    assert (plan["version"], [h["replica"] for h in plan["handovers"]]) == (3, ["double", "out"])


def test_a_message_the_broker_did_not_acknowledge_is_sent_again(sites: Sites, clock: Clock) -> None:
    coordinator, publisher, _ = make(sites, clock)
    publisher.unreachable = {"b"}
    _, status = coordinator.deploy(APP, "app.py")
    assert status == {"a": "published", "b": "pending", "cloud": "published"}
    publisher.unreachable = set()
    _, status = coordinator.deploy(APP, "app.py")
    assert status == {"a": "unchanged", "b": "published", "cloud": "unchanged"}
    assert publisher.last("b")["apps"][0]["plan"]["version"] == 2


def test_a_site_view_holds_what_its_agent_builds_from_and_nothing_that_only_describes() -> None:
    def plan(version: int, why: str, rate: float, far: str, handovers: tuple[Handover, ...] = ()) -> Plan:
        return Plan(
            app="demo",
            version=version,
            hub="cloud",
            assignments=(
                Assignment("readings@a", "readings", "a", "a", why),
                Assignment("readings@b", "readings", "b", "b", why),
                Assignment("double@a", "double", "a", "a", why),
                Assignment("double@b", "double", "b", far, why),
                Assignment("out", "out", None, "cloud", why),
            ),
            flows=(
                Flow("readings@a", "double@a", rate, rate),
                Flow("readings@b", "double@b", rate, rate),
                Flow("double@a", "out", rate, rate),
                Flow("double@b", "out", rate, rate),
            ),
            totals=Totals(rate, rate, rate, rate),
            solver=SolverInfo("fake", "optimal", rate),
            handovers=handovers,
        )

    first = plan(1, "cheapest", 10.0, "b")
    # a new version, other reasons, rates and totals: no site's view changes
    for site in ("a", "b", "cloud"):
        assert site_view(plan(2, "ties", 12.5, "b"), site) == site_view(first, site)
    # double@b moves to the hub: b (its source feeds it) and the hub see it, a does not
    moved = plan(3, "cheapest", 10.0, "cloud", (Handover("double@b", "b", "cloud", 30.0, 0),))
    assert site_view(moved, "a") == site_view(first, "a")
    assert site_view(moved, "b") != site_view(first, "b")
    assert site_view(moved, "cloud") != site_view(first, "cloud")


def test_a_basis_keeps_measured_pairs_only_and_a_packed_one_still_loads(tmp_path: Path) -> None:
    import json

    demo = fake_planner(load_app(APP, "app.py"), parse_sites(SITES), **NO_OPTIONS)
    record = AppRecord(
        "demo", APP, "app.py", demo, basis={"latency": {"a|cloud": 61.25}, "rates": {"readings@a": 10.0}}
    )
    StateStore(tmp_path).save_app(record)
    stored = json.loads((tmp_path / "apps" / "demo.json").read_text())["basis"]
    assert stored == {"latency": {"a|cloud": 61.25}, "rates": {"readings@a": 10.0}}
    # a record stored by an earlier hub, with every pair's latency packed
    stored_file = tmp_path / "apps" / "demo.json"
    old = json.loads(stored_file.read_text())
    names = ["cloud", *(f"s{i:02d}" for i in range(30))]
    other = {"cloud|s03": 61.25, "s01|s02": 12.5}
    old["basis"] = {"latency_packed": {"sites": names, "common_ms": 40.0, "other_ms": other}, "rates": {}}
    stored_file.write_text(json.dumps(old))
    (loaded,) = StateStore(tmp_path).load_apps()
    assert len(loaded.basis["latency"]) == 31 * 30 // 2
    assert loaded.basis["latency"]["cloud|s03"] == 61.25
    assert loaded.basis["latency"]["s05|s06"] == 40.0


def _fast_again(coordinator: Coordinator, clock: Clock, **extra: Any) -> None:
    """Half a minute of a's hub link back at 10 ms: three probes, so the link's estimate follows."""
    for _ in range(3):
        clock.now += 10
        coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 10, "samples": 3}}, **extra))


def test_a_replan_weighs_and_records_the_state_the_moved_replica_held(sites: Sites, clock: Clock) -> None:
    coordinator, _, _ = make(sites, clock)
    given: list[Any] = []

    def remembering(app: App, sites: Sites, **options: Any) -> Plan:
        given.append(options.get("state_bytes"))
        return fake_planner(app, sites, **options)

    coordinator.planner = remembering
    coordinator.deploy(APP, "app.py")
    clock.now += 31  # the hub link of a slows down: 'double' moves from the hub to a
    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.check_drift() == ["demo"]
    assert all("state_bytes" not in m for m in coordinator.record("demo").history[-1].moved)  # the hub reports none
    _fast_again(coordinator, clock, state_bytes={"demo": {"double": 2048}})  # 'double' holds 2 kB at a
    assert coordinator.check_drift() == ["demo"]  # it moves back, and its state counts
    assert given == [None, {}, {"double": 2048.0}]
    moved = {m["replica"]: m for m in coordinator.record("demo").history[-1].moved}
    assert (moved["double"]["from"], moved["double"]["to"], moved["double"]["state_bytes"]) == ("a", "cloud", 2048)
    assert "state_bytes" not in moved["out"]  # a reported nothing for it


def test_the_history_marks_when_the_old_owner_handed_a_move_over(sites: Sites, clock: Clock) -> None:
    coordinator, _, _ = make(sites, clock)
    coordinator.deploy(APP, "app.py")
    clock.now += 31
    coordinator.registry.heartbeat("a", heartbeat("a", latency={"cloud": {"rtt_ms": 400, "samples": 3}}))
    assert coordinator.check_drift() == ["demo"]
    _fast_again(coordinator, clock)
    assert coordinator.check_drift() == ["demo"]
    record = coordinator.record("demo")
    at = record.history[-1].at
    marked = plan_history.handed_over(record, "double", "a", at + 12.5)
    assert marked is not None
    moved = {m["replica"]: m for m in marked.history[-1].moved}
    assert (moved["double"]["handed_over_at"], moved["double"]["handover_s"]) == (at + 12.5, 12.5)
    assert "handover_s" not in moved["out"]
    assert plan_history.handed_over(marked, "double", "a", at + 20) is None  # once
    assert plan_history.handed_over(record, "double", "b", at) is None  # b gave nothing up


def test_a_move_from_a_site_gone_for_good_says_what_is_at_risk_and_until_when() -> None:
    moved = [
        {"replica": "w@a", "from": "a", "to": "b", "switch_at": 1000.0},  # a is gone, its frontier known
        {"replica": "w@c", "from": "c", "to": "b", "switch_at": 1000.0},  # c is gone, it announced none
        {"replica": "w@d", "from": "d", "to": "b", "switch_at": 1000.0},  # d is alive
        {"replica": "x@a", "from": "a", "to": "cloud"},  # not handed over
    ]
    frontiers = {"a": 960.0}
    marked = plan_history.at_risk(moved, lambda site: site in ("a", "c"), frontiers.get, 600.0)
    assert marked == [
        {**moved[0], "at_risk_from": 960.0, "recover_by": 1600.0},
        {**moved[1], "recover_by": 1600.0},
        moved[2],
        moved[3],
    ]
    assert plan_history.at_risk(moved, lambda site: False, frontiers.get, 600.0) == moved


def test_the_hub_windows_wait_for_the_slowest_site_that_announces_a_frontier(sites: Sites, clock: Clock) -> None:
    coordinator, _, _ = make(sites, clock)
    coordinator.deploy(APP, "app.py")

    def no_mark(site: str, stream: str, epoch: int) -> int | None:
        return None

    assert coordinator.window_holds(lambda app: no_mark) == {"demo": None}
    coordinator.heartbeat("a", heartbeat("a", complete={"demo": 1_000.0}))
    coordinator.heartbeat("b", heartbeat("b", complete={"demo": 980.0}))
    assert coordinator.window_holds(lambda app: no_mark) == {"demo": 980.0}
    coordinator.frontiers.advance("demo", "b", 1_003.0)  # a batch of b's arrived
    assert coordinator.window_holds(lambda app: no_mark) == {"demo": 1_000.0}
    coordinator.heartbeat("a", heartbeat("a", complete={"demo": None}))  # a's input went idle
    assert coordinator.window_holds(lambda app: no_mark) == {"demo": 1_003.0}


def test_each_hub_query_waits_for_the_sites_of_the_plan_in_force(sites: Sites, clock: Clock) -> None:
    coordinator, _, _ = make(sites, clock)
    coordinator.deploy(APP, "app.py")

    def no_mark(site: str, stream: str, epoch: int) -> int | None:
        return None

    assert coordinator.reader_holds("demo", no_mark, {"r": "out"}) == {"r": math.inf}  # no frontier yet
    coordinator.heartbeat("a", heartbeat("a", complete={"demo": 1_000.0}))
    coordinator.heartbeat("b", heartbeat("b", complete={"demo": 980.0}))
    # this planner's plans list no flows: the query waits for every site, as the app's windows do
    assert coordinator.reader_holds("demo", no_mark, {"r": "out"}) == {"r": 980.0}
    assert coordinator.window_holds(lambda app: no_mark) == {"demo": 980.0}
    assert coordinator.reader_holds("unknown", no_mark, {"r": "out"}) == {}


def test_the_hub_windows_of_the_plan_in_force_say_where_the_ingest_seals_at_once(
    sites: Sites, clock: Clock, tmp_path: Path
) -> None:
    coordinator, _, _ = make(sites, clock, tmp_path)
    windowed = APP.replace(
        '.sink(sinks.console(), name="out")',
        '.window(name="per_2s", key="k", size="2s", aggs={"n": agg.count()}, scope="global")'
        '.sink(sinks.console(), name="out")',
    ).replace("import App, sinks", "import App, agg, sinks")
    coordinator.deploy(windowed, "app.py")
    assert coordinator.window_grid("demo") == 2.0
    assert coordinator.window_closings("demo").grids == ((2000, 0),)
    assert not coordinator.window_closings("unknown")
    coordinator.deploy(APP, "app.py")  # the window gone: nothing to seal for
    assert not coordinator.window_closings("demo")
