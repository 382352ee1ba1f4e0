"""Which site may publish another site's records: the plans' assignments and handovers, at the ingest and the coordinator."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
import paho.mqtt.client as mqtt

from hub.control.coordinator import Coordinator
from hub.control.registry import SiteRegistry
from hub.control.state import StateStore
from hub.ingest import log as hub_log
from hub.ingest.consumer import Ingest
from hub.ingest.publishers import assigned, from_plans, own_sites_only
from spanedge import topics
from spanedge.app import App
from spanedge.operators import Kind
from spanedge.plan import Assignment, Flow, Handover, Plan, SolverInfo, Totals
from spanedge.sites import Broker, Sites, parse_sites
from spanedge.wire.batch import Record, encode_batch
from tests.plans import chain_plan
from tests.unit.fakes import FakeIngestClient, message

APP = "farm"


def make_plan(version: int, means_at: str, handovers: tuple[Handover, ...] = ()) -> Plan:
    """Field-east's source at field-east, its window ``means`` offloaded to ``means_at``, the sink at the hub."""
    chains = {"field-east": [("means", means_at, version)], "barn": [("means", "barn", 0)]}
    return chain_plan(APP, version, chains, source="probes", handovers=handovers)


def test_a_site_may_publish_the_streams_of_the_replicas_a_plan_runs_there() -> None:
    plan = make_plan(3, "barn")
    assert assigned([plan], "barn", "field-east", "means")
    assert not assigned([plan], "shed", "field-east", "means")  # not assigned there
    assert not assigned([plan], "barn", "field-east", "probes")  # field-east's source runs at field-east
    assert not assigned([plan], "barn", "field-west", "means")  # no such replica
    assert not assigned([plan], "field-east", "barn", "means")  # barn's own replica stays barn's
    assert not assigned([], "barn", "field-east", "means")


def test_both_owners_of_a_handover_and_the_replaced_plans_owner_may_publish() -> None:
    moved = make_plan(4, "shed", (Handover("means@field-east", "barn", "shed", 1_700_000_040.0, 3),))
    assert assigned([moved], "shed", "field-east", "means")
    assert assigned([moved], "barn", "field-east", "means")  # the old owner finishing its windows
    assert not assigned([moved], "field-west", "field-east", "means")
    without_handover = make_plan(4, "cloud")  # moved to the hub: no handover
    assert not assigned([without_handover], "barn", "field-east", "means")
    assert assigned([without_handover, make_plan(3, "barn")], "barn", "field-east", "means")


def test_the_policies_always_let_a_site_publish_its_own_records() -> None:
    assert own_sites_only(APP, "barn", "barn", "means")
    assert not own_sites_only(APP, "barn", "field-east", "means")
    policy = from_plans(lambda app: [make_plan(3, "barn")] if app == APP else [])
    assert policy(APP, "shed", "shed", "anything")
    assert policy(APP, "barn", "field-east", "means")
    assert not policy("other", "barn", "field-east", "means")
    assert not policy(APP, "shed", "field-east", "means")


# -- the ingest ----------------------------------------------------------------------------------


def _batch(site: str, stream: str, seqs: range, epoch: int = 0) -> bytes:
    return encode_batch(APP, [Record(site, stream, s, 1000.0 + s, "p1", {"n": s}, epoch) for s in seqs])


def _ingest(messages: list[mqtt.MQTTMessage], policy: Any) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
    """Write ``messages`` through an ingest with ``policy``: its stats, the logged records, the client."""
    with tempfile.TemporaryDirectory() as log_dir:
        ingest = Ingest(Broker(scheme="mqtt", host="127.0.0.1", port=9), Path(log_dir), may_publish=policy)
        client = FakeIngestClient()
        ingest._client = client  # type: ignore[assignment]
        ingest._write_group(messages)
        stats = ingest.stats()
        ingest.stop()
        app_dir = Path(log_dir) / APP
        logged = list(hub_log.iter_lines(app_dir, hub_log.head(app_dir), hub_log.tail(app_dir)))
    return stats, logged, client


def test_the_ingest_accepts_an_assigned_replicas_batch_on_its_hosts_topic_and_dedupes_by_envelope_site() -> None:
    asked: list[tuple[str, str, str, str]] = []

    def policy(app: str, topic_site: str, envelope_site: str, stream: str) -> bool:
        asked.append((app, topic_site, envelope_site, stream))
        return (topic_site, envelope_site, stream) == ("barn", "field-east", "means")

    on_barn = topics.data(APP, "means", "barn")
    messages = [
        message(1, on_barn, _batch("field-east", "means", range(1, 4))),
        message(2, on_barn, _batch("field-east", "means", range(2, 6))),  # a resend overlapping: duplicates
        message(3, on_barn, _batch("barn", "means", range(1, 3))),  # barn's own, its own sequence
        message(4, topics.data(APP, "means", "shed"), _batch("field-east", "means", range(6, 8))),  # not assigned
    ]
    stats, logged, client = _ingest(messages, policy)
    east = [("field-east", s) for s in range(1, 6)]
    assert [(r["site"], r["seq"]) for r in logged] == [*east, ("barn", 1), ("barn", 2)]
    assert stats["apps"][APP]["field-east"]["means"]["records"] == 5
    assert stats["apps"][APP]["field-east"]["means"]["duplicates"] == 2
    assert stats["apps"][APP]["barn"]["means"]["records"] == 2
    assert stats["site_mismatch"] == 1
    assert stats["malformed"] == 1
    assert [t for t, _ in client.published] == [topics.dlq(APP, "shed")]
    assert "records of site 'field-east'" in orjson.loads(client.published[0][1])["reason"]
    assert sorted(client.acked) == [1, 2, 3, 4]
    assert asked == [(APP, "barn", "field-east", "means")] * 2 + [(APP, "shed", "field-east", "means")]


def test_the_ingest_refuses_other_sites_records_by_default_and_when_the_streams_differ_or_the_policy_fails() -> None:
    def failing(app: str, topic_site: str, envelope_site: str, stream: str) -> bool:
        raise RuntimeError("no plans")

    forged = [message(1, topics.data(APP, "means", "barn"), _batch("field-east", "means", range(1, 3)))]
    for policy in (own_sites_only, failing):
        stats, logged, _ = _ingest(forged, policy)
        assert logged == []
        assert stats["site_mismatch"] == 1
    # the topic's stream must be the batch's: a site assigned 'means' cannot slip in another stream
    other_stream = [message(1, topics.data(APP, "means", "barn"), _batch("field-east", "probes", range(1, 3)))]
    stats, logged, _ = _ingest(other_stream, lambda *_: True)
    assert logged == []
    assert stats["site_mismatch"] == 1


# -- the coordinator's plans --------------------------------------------------------------------

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
"""

SOURCE = """
from spanedge import App, sinks

app = App("demo")
app.source("readings").map(lambda r: r, name="double").sink(sinks.console(), name="out")
"""


def planner_placing(double_at: str) -> Any:
    """A planner that runs site a's 'double' replica at ``double_at``."""

    def plan(app: App, sites: Sites, *, version: int, **_: Any) -> Plan:
        assignments = []
        for op in app.operators.values():
            if op.kind is Kind.SOURCE:
                assignments.append(Assignment(f"{op.name}@a", op.name, "a", "a", "source"))
            elif op.name == "double":
                assignments.append(Assignment("double@a", "double", "a", double_at, "placed"))
            else:
                assignments.append(Assignment(op.name, op.name, None, "cloud", "@global_"))
        return Plan(
            app=app.name,
            version=version,
            hub="cloud",
            assignments=tuple(assignments),
            flows=(Flow("double@a", "out", 1.0, 100.0),),
            totals=Totals(1.0, 1.0, 1.0, 1.0),
            solver=SolverInfo("fake", "optimal", 0.0),
        )

    return plan


def test_the_coordinator_gives_the_plan_in_force_and_the_one_it_replaced() -> None:
    registry = SiteRegistry(parse_sites(SITES), down_after_s=15)
    coordinator = Coordinator(registry, planner=planner_placing("b"))
    policy = from_plans(coordinator.plans_of)
    assert coordinator.plans_of("demo") == ()
    assert not policy("demo", "b", "a", "double")
    coordinator.deploy(SOURCE)
    assert [p.version for p in coordinator.plans_of("demo")] == [1]
    assert policy("demo", "b", "a", "double")
    assert not policy("demo", "cloud", "a", "double")
    coordinator.planner = planner_placing("cloud")
    coordinator.replan("demo", "b overloaded")
    assert [p.version for p in coordinator.plans_of("demo")] == [2, 1]
    assert policy("demo", "b", "a", "double")  # b's outbox may still hold what it computed under v1
    assert policy("demo", "cloud", "a", "double")
    coordinator.replan("demo", "nothing changed")  # the same placement: no new version, same plans
    assert [p.version for p in coordinator.plans_of("demo")] == [2, 1]
    coordinator.planner = planner_placing("a")
    coordinator.deploy(SOURCE)
    assert [p.version for p in coordinator.plans_of("demo")] == [3, 2]
    # b ran it two versions ago, but v2 (the plan v3 replaced) hands it over from b to the hub:
    # b may still be sending the results of its windows before that switch
    assert policy("demo", "b", "a", "double")
    assert not policy("demo", "c", "a", "double")
    coordinator.delete("demo")
    assert coordinator.plans_of("demo") == ()


def test_a_restarted_hub_still_knows_the_plan_the_one_in_force_replaced(tmp_path: Path) -> None:
    registry = SiteRegistry(parse_sites(SITES), down_after_s=15)
    coordinator = Coordinator(registry, planner=planner_placing("b"), store=StateStore(tmp_path))
    coordinator.deploy(SOURCE)
    coordinator.planner = planner_placing("cloud")
    coordinator.replan("demo", "b overloaded")
    coordinator.replan("demo", "nothing changed")  # no new version: the replaced plan stays
    restarted = Coordinator(registry, planner=planner_placing("cloud"), store=StateStore(tmp_path))
    assert restarted.resume() == ["demo"]
    assert [p.version for p in restarted.plans_of("demo")] == [2, 1]
    assert restarted.plans_of("demo")[1] == coordinator.plans_of("demo")[1]
    # b's outbox may still hold what it computed for a's replica under v1: accepted after the restart too
    assert from_plans(restarted.plans_of)("demo", "b", "a", "double")
    restarted.delete("demo")
    again = Coordinator(registry, planner=planner_placing("cloud"), store=StateStore(tmp_path))
    assert again.resume() == []
    assert again.plans_of("demo") == ()


def test_a_record_from_before_the_replaced_plan_was_kept_loads_without_it(tmp_path: Path) -> None:
    registry = SiteRegistry(parse_sites(SITES), down_after_s=15)
    Coordinator(registry, planner=planner_placing("b"), store=StateStore(tmp_path)).deploy(SOURCE)
    [path] = (tmp_path / "apps").glob("*.json")
    data = orjson.loads(path.read_bytes())
    assert "replaced" not in data  # a first deploy replaced nothing
    restarted = Coordinator(registry, planner=planner_placing("b"), store=StateStore(tmp_path))
    assert restarted.resume() == ["demo"]
    assert [p.version for p in restarted.plans_of("demo")] == [1]
