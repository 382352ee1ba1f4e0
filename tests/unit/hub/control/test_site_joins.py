"""A site added with ``spanedge site add`` is planned nowhere until its agent is heard; then it joins the apps."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.control.brokers import BrokerFiles
from hub.control.coordinator import Coordinator
from hub.control.enrolment import Enrolment
from hub.control.fleet import Fleet
from hub.control.join_tokens import JoinTokens
from hub.control.planning import load_app, planned_sites
from hub.control.registry import SiteRegistry
from hub.control.site_health import SiteHealth
from hub.control.state import StateStore
from spanedge.ca import CertificateAuthority
from spanedge.errors import InvalidSites
from spanedge.sites import Sites, parse_sites
from tests.keys import KEY

T0 = 1_700_000_000.0

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883", cpu: 4}
  truck-7:
    tier: spoke
    broker: "mqtt://127.0.0.1:1883"
    streams: {readings: {topic: "trucks/7/#", rate: 5}}
  truck-9:
    tier: spoke
    broker: "mqtt://127.0.0.1:1883"
    streams: {readings: {topic: "trucks/9/#", rate: 5}}
"""

APP = """
from spanedge import App, agg, local, sinks


@local
def tag(raw: dict) -> dict:
    return {"unit": str(raw["unit"]), "ts": float(raw["ts"]), "v": int(raw["v"])}


app = App("fleet")
readings = app.source("readings", time_field="ts").map(tag)
totals = readings.window(name="totals", key="unit", size="5s", aggs={"n": agg.count(), "total": agg.sum("v")},
                         scope="global")
totals.sink(sinks.console(), name="out")
"""

FLEET_APP = load_app(APP, "app.py")
TRUCK_13 = {"readings": {"topic": "trucks/13/#", "rate": 5.0}}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def beat(site: str) -> bytes:
    return orjson.dumps({"site": site, "cpu_percent": 5.0})


def with_truck_13(sites: Sites) -> Sites:
    data = sites.to_data()
    data["sites"]["truck-13"] = {"tier": "spoke", "broker": "mqtt://127.0.0.1:1883", "streams": TRUCK_13}
    return Sites.of(data)


def deployed(clock: Clock, tmp_path: Path) -> tuple[Coordinator, list[tuple[str, float]]]:
    """The fleet app deployed on truck-7 and truck-9; truck-13 added since, not heard yet."""
    registry = SiteRegistry(parse_sites(SITES), clock=clock)
    coordinator = Coordinator(registry, clock=clock, store=StateStore(tmp_path))
    joins: list[tuple[str, float]] = []
    coordinator.on_join = lambda site, at: joins.append((site, at))
    for site in ("truck-7", "truck-9"):
        assert coordinator.heartbeat(site, beat(site))
    coordinator.deploy(APP, "app.py")
    coordinator.await_join("truck-13")
    registry.grow(with_truck_13(registry.sites))
    coordinator.analysis.add_spoke(registry.sites.sites["truck-13"])
    return coordinator, joins


def test_a_site_not_heard_yet_is_planned_nowhere_even_by_a_replan(tmp_path: Path) -> None:
    clock = Clock()
    coordinator, joins = deployed(clock, tmp_path)
    registry = coordinator.registry
    assert "truck-13" not in planned_sites(registry, FLEET_APP).sites
    # a peer's probe of it, which its agent answered before its first heartbeat, is left out too
    probe = {"site": "truck-7", "latency": {"truck-13": {"rtt_ms": 2, "p95_ms": 3, "samples": 5}}}
    assert coordinator.heartbeat("truck-7", orjson.dumps(probe))
    assert {(r["src"], r["dst"]) for r in registry.latency_rows()} >= {("truck-7", "truck-13")}
    clock.now += 1
    record = coordinator.replan("fleet", "a re-plan for the test")
    assert record is not None
    assert record.plan.source_sites() == {"truck-7", "truck-9"}
    assert all(a.site != "truck-13" for a in record.plan.assignments)
    assert record.plan.joins == ()
    assert coordinator.check_sites() == []
    row = next(r for r in registry.status() if r["site"] == "truck-13")
    assert (row["joining"], row["alive"]) == (True, False)
    assert joins == []


def test_its_first_heartbeat_replans_the_apps_that_read_its_streams_with_a_join_switch(tmp_path: Path) -> None:
    clock = Clock()
    coordinator, joins = deployed(clock, tmp_path)
    version = coordinator.records()[0].plan.version
    clock.now += 2.5
    assert coordinator.heartbeat("truck-13", beat("truck-13"))
    assert joins == [("truck-13", clock.now)]
    assert "truck-13" not in coordinator.registry.joining
    for site in ("truck-7", "truck-9"):
        assert coordinator.heartbeat(site, beat(site))
    assert coordinator.check_sites() == ["fleet"]
    record = coordinator.records()[0]
    assert record.plan.version == version + 1
    assert record.history[-1].reason == "site truck-13 joined"
    assert record.plan.site_of("readings@truck-13") == "truck-13"
    assert record.plan.site_of("tag@truck-13") == "truck-13"
    assert record.plan.handovers == ()  # nothing the other sites ran moved
    (join,) = record.plan.joins
    # on the hub window's 5 s grid, at least the handover delay after the re-plan
    assert join.site == "truck-13"
    assert clock.now + coordinator.handover_delay_s <= join.switch_at < clock.now + coordinator.handover_delay_s + 5
    assert join.switch_at % 5 == 0
    # heard again: it has joined, nothing more to re-plan
    clock.now += 5
    for site in ("truck-7", "truck-9", "truck-13"):
        assert coordinator.heartbeat(site, beat(site))
    assert coordinator.check_sites() == []
    assert joins == [("truck-13", T0 + 2.5)]
    # the plan in force keeps its join across a restart of the hub
    restarted = Coordinator(SiteRegistry(coordinator.registry.sites, clock=clock), store=StateStore(tmp_path))
    assert restarted.resume() == ["fleet"]
    assert restarted.records()[0].plan.joins == (join,)


def test_a_join_waits_like_any_site_change_while_another_spoke_of_the_app_is_silent(tmp_path: Path) -> None:
    clock = Clock()
    coordinator, _ = deployed(clock, tmp_path)
    clock.now += 20  # past down_after_s: truck-7 and truck-9 are silent, not gone
    assert coordinator.heartbeat("truck-13", beat("truck-13"))
    assert coordinator.check_sites() == []
    assert coordinator.records()[0].plan.joins == ()
    for site in ("truck-7", "truck-9"):
        assert coordinator.heartbeat(site, beat(site))
    assert coordinator.check_sites() == ["fleet"]
    assert coordinator.records()[0].history[-1].reason == "site truck-13 joined"


def test_a_revoked_site_never_joins() -> None:
    health = SiteHealth(with_truck_13(parse_sites(SITES)))
    health.revoke("truck-13", T0)
    health.join("truck-13", ["readings"])
    changes = health.review(T0, {})
    assert [c.reason for c in changes] == ["site truck-13 revoked: re-planned without it"]
    assert changes[0].streams == frozenset()


# -- the fleet file and the enrolment ----------------------------------------------------------


def enrolment(tmp_path: Path) -> Enrolment:
    fleet = Fleet(parse_sites(SITES), tmp_path / "fleet.json")
    ca = CertificateAuthority.open(tmp_path / "ca")
    coordinator = Coordinator(SiteRegistry(fleet.sites))
    done = Enrolment(
        fleet,
        JoinTokens(tmp_path / "join-tokens.json"),
        ca,
        BrokerFiles(None),
        coordinator,
        KEY.public_key,
        default_broker="mqtt://127.0.0.1:1883",
    )
    done.start()
    return done


def test_an_added_site_joins_at_its_first_heartbeat_and_stays_joined_across_restarts(tmp_path: Path) -> None:
    hub = enrolment(tmp_path)
    invitation = hub.add("truck-13", streams=TRUCK_13)
    hub.add("truck-14")
    assert invitation.streams == {"readings": {"topic": "trucks/13/#", "rate": 5.0}}
    assert hub.coordinator.registry.sites.sites["truck-13"].streams["readings"].topic == "trucks/13/#"
    assert hub.coordinator.registry.joining == {"truck-13", "truck-14"}
    assert hub.fleet.joining() == ["truck-13", "truck-14"]
    assert hub.coordinator.heartbeat("truck-13", beat("truck-13"))
    assert hub.fleet.joining() == ["truck-14"]
    assert json.loads((tmp_path / "fleet.json").read_text())["joined"].keys() == {"truck-13"}
    hub.add("truck-13", streams=TRUCK_13)  # a new token for a joined site: it stays joined
    assert hub.coordinator.registry.joining == {"truck-14"}
    again = enrolment(tmp_path)
    assert again.coordinator.registry.joining == {"truck-14"}
    assert "truck-13" in planned_sites(again.coordinator.registry, FLEET_APP).sites
    assert "truck-14" not in planned_sites(again.coordinator.registry, FLEET_APP).sites


def test_the_fleet_file_of_an_older_hub_counts_its_added_sites_joined(tmp_path: Path) -> None:
    site = {"tier": "spoke", "broker": "mqtt://127.0.0.1:1883", "streams": TRUCK_13}
    (tmp_path / "fleet.json").write_text(json.dumps({"added": {"truck-13": site}, "revoked": {}}))
    hub = enrolment(tmp_path)
    assert hub.fleet.joining() == []
    assert hub.coordinator.registry.joining == set()


@pytest.mark.parametrize("revoked", [True, False])
def test_a_site_revoked_before_it_joined_stays_planned_nowhere_after_a_restart(tmp_path: Path, revoked: bool) -> None:
    hub = enrolment(tmp_path)
    hub.add("truck-13", streams=TRUCK_13)
    if revoked:
        hub.revoke("truck-13")
    again = enrolment(tmp_path)
    assert again.fleet.joining() == ["truck-13"]
    row = next(r for r in again.coordinator.registry.status() if r["site"] == "truck-13")
    assert (row["joining"], row["revoked"]) == (not revoked, revoked)
    assert "truck-13" not in planned_sites(again.coordinator.registry, FLEET_APP).sites


def test_a_stream_no_deployed_app_reads_is_refused_before_the_site_is_added(tmp_path: Path) -> None:
    hub = enrolment(tmp_path)
    hub.coordinator.deploy(APP, "app.py")
    with pytest.raises(InvalidSites, match="stream 'redings': deployed app 'fleet' has no source by that name"):
        hub.add("truck-13", streams={"redings": {"topic": "trucks/13/#", "rate": 5}})
    assert "truck-13" not in hub.fleet.sites.sites
    assert hub.add("truck-13", streams=TRUCK_13).streams == {"readings": {"topic": "trucks/13/#", "rate": 5.0}}


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["add", "join", "revoke", "restart"]), st.sampled_from(["t-1", "t-2", "t-3"])),
        max_size=14,
    )
)
def test_the_fleet_file_keeps_which_added_sites_joined_whatever_the_order(steps: list[tuple[str, str]]) -> None:
    declared = parse_sites(SITES)
    added: set[str] = set()
    joined: set[str] = set()
    revoked: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.json"
        fleet = Fleet(declared, path)
        for step, name in steps:
            if step == "add" and name in revoked:
                with pytest.raises(InvalidSites, match="was revoked"):
                    fleet.add(name, {"tier": "spoke", "broker": "mqtt://127.0.0.1:1883"})
            elif step == "add":
                fleet.add(name, {"tier": "spoke", "broker": "mqtt://127.0.0.1:1883"})
                added.add(name)
            elif step == "join":
                fleet.join(name, T0)
                joined |= {name} & added
            elif step == "revoke" and name in added and name not in revoked:
                fleet.revoke(name, T0, [])
                revoked.add(name)
            elif step == "restart":
                fleet = Fleet(declared, path)
            assert set(fleet.joining()) == added - joined
            assert all(fleet.joined(n) == (n not in added or n in joined) for n in ("t-1", "t-2", "t-3", "truck-7"))
