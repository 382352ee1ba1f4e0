"""The agent's parts on their own, each given its connections: processing, local sinks, apps."""

from __future__ import annotations

import dataclasses
import time
import types
from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.apps import Apps
from edge_agent.config import AgentConfig
from edge_agent.intake import Intake
from edge_agent.outbox import Outbox
from edge_agent.processing import Processor
from edge_agent.sinks import LocalSinks
from edge_agent.transport import Inbox, Message
from spanedge.loader import load_app
from spanedge.plan import Handover
from spanedge.sites import parse_sites
from spanedge.testing import local_plan
from tests.unit.test_agent_intake import APP_FILE, SITES, FakeTransport


def _parts(state: Path) -> tuple[Apps, Processor, FakeTransport, Outbox]:
    sites = parse_sites(SITES)
    plan = dataclasses.replace(local_plan(load_app(APP_FILE), sites), app_source=APP_FILE.read_text())
    outbox = Outbox(state / "agent.db")
    apps = Apps(AgentConfig("truck-7", sites, state), outbox)
    apps.apply([plan])
    intake = Intake("truck-7", sites, Inbox(), FakeTransport)
    intake.rewire(apps.pipelines)
    hub = FakeTransport(None, "hub", "hub broker")
    sinks = LocalSinks("truck-7", state, 2**20, hub, lambda: intake.transports["truck-7"])  # type: ignore[arg-type]
    return apps, Processor(apps.pipelines, outbox, intake, sinks), intake.transports["truck-7"], outbox  # type: ignore[return-value]


def _msg(source: Any, mid: int, ts: float, temp_f: float = 41.0) -> Message:
    body = orjson.dumps({"unit": "u1", "ts": ts, "temp_f": temp_f})
    return Message("trucks/7/u1/temp", body, 1, mid, source, 0.0)


def test_the_processor_acknowledges_only_what_it_committed(tmp_path: Path) -> None:
    apps, processor, source, outbox = _parts(tmp_path)
    assert source.filters == [("trucks/7/+/temp", 1)]
    processor.handle([_msg(source, 1, 1000.0), _msg(source, 2, 1001.0)])
    assert source.acked == []
    assert processor.touched == {"cold-chain"}
    processor.flush()
    assert source.acked == [1, 2]
    assert outbox.load_state("__intake__") is not None
    processor.handle([_msg(source, 2, 1001.0)])  # a redelivery: acknowledged, not counted again
    processor.flush()
    assert source.acked == [1, 2, 2]
    assert apps.pipelines["cold-chain"].metrics()["readings@truck-7"]["in"] == 2
    outbox.close()


def test_a_message_from_a_closed_connection_is_left_to_the_broker(tmp_path: Path) -> None:
    apps, processor, source, outbox = _parts(tmp_path)
    stale = FakeTransport(None, "old", "site broker (truck-7)")
    processor.handle([_msg(stale, 1, 1000.0)])
    processor.flush()
    assert stale.acked == source.acked == []
    assert apps.pipelines["cold-chain"].metrics()["readings@truck-7"]["in"] == 0
    outbox.close()


def test_sinks_serve_a_window_after_its_commit(tmp_path: Path) -> None:
    _apps, processor, source, outbox = _parts(tmp_path)
    processor.handle([_msg(source, mid, 1000.0 + mid) for mid in range(1, 4)])
    processor.handle([_msg(source, 9, 1030.0)])  # moves the watermark past [1000, 1010)
    assert source.published == []
    processor.flush()
    assert [(t, orjson.loads(b)["n"]) for t, b in source.published] == [("cold-chain/unit-stats", 3)]
    assert outbox.records == 1
    outbox.close()


def test_a_sink_value_counts_as_delivered_once_its_broker_acknowledged_it(tmp_path: Path) -> None:
    _apps, processor, source, outbox = _parts(tmp_path)
    sinks = processor.sinks
    processor.handle([_msg(source, 1, 1000.0)])
    processor.flush()
    floor = processor.checkpointer.sink_frontiers["cold-chain"]  # the window [1000, 1010) ends past it
    processor.handle([_msg(source, 2, 1030.0)])
    processor.flush()
    assert len(source.published) == 1
    assert sinks.unacknowledged.bounds() == {"cold-chain": floor}  # the value lies at or past the frontier before
    assert source.on_published is not None
    source.on_published(1)  # the broker's PUBACK
    assert sinks.unacknowledged.bounds() == {}
    processor.handle([_msg(source, 3, 1045.0)])
    processor.flush()
    assert len(source.published) == 2
    sinks.closed(source)  # the connection closed before its PUBACK: not waited for any more
    assert sinks.unacknowledged.bounds() == {}
    outbox.close()


def test_an_acknowledgement_may_come_before_the_publish_is_recorded() -> None:
    from edge_agent.sinks import Unacknowledged
    from tests.unit.fakes import FakeTransport

    pending, link = Unacknowledged(), FakeTransport(None, "sink", "site broker (truck-7)")
    pending.hook(link)
    assert link.on_published is not None
    link.on_published(7)  # the connection's thread heard the PUBACK first
    pending.published(link, 7, "farm", 100.0)
    pending.published(link, 8, "farm", 101.0)
    pending.published(link, 9, "farm", None)  # a first commit: no bound known
    assert (pending.bounds(), len(pending)) == ({"farm": 101.0}, 2)
    link.on_published(8)
    link.on_published(9)
    assert (pending.bounds(), len(pending)) == ({}, 0)


def test_apps_stop_an_app_no_longer_planned(tmp_path: Path) -> None:
    apps, _processor, _source, outbox = _parts(tmp_path)
    assert list(apps.pipelines) == ["cold-chain"]
    pipelines = apps.pipelines
    apps.apply([])
    assert apps.pipelines == {} == apps.plans
    assert apps.pipelines is pipelines  # the checkpointer shares this dict
    outbox.close()


def test_apps_drop_the_replicas_they_handed_over_once_their_windows_fired(tmp_path: Path) -> None:
    from spanedge.plan import Handover

    apps, _processor, _source, outbox = _parts(tmp_path)
    plan = apps.plans["cold-chain"]
    moving = [a.replica for a in plan.assignments if a.site == "truck-7" and a.operator != "readings"]
    switch = 1_700_000_100.0
    moved = dataclasses.replace(
        plan,
        version=2,
        assignments=tuple(
            dataclasses.replace(a, site="truck-9", since=2) if a.replica in moving else a for a in plan.assignments
        ),
        handovers=tuple(Handover(r, "truck-7", "truck-9", switch, 0) for r in moving),
    )
    apps.apply([moved])
    pipeline = apps.pipelines["cold-chain"]
    assert {n.replica for n in pipeline.nodes} == {"readings@truck-7", *moving}  # still finishing its windows
    pipeline.process("readings@truck-7", orjson.dumps({"unit": "u1", "ts": switch - 5, "temp_f": 41.0}))
    assert apps.retire_drained() == []
    pipeline.process("readings@truck-7", orjson.dumps({"unit": "u1", "ts": switch + 1000, "temp_f": 41.0}))
    assert apps.retire_drained() == ["cold-chain"]
    assert apps.pipelines["cold-chain"].nodes == []  # nothing left to run here for this app
    apps.apply([moved])  # the same plan again: what was handed over stays dropped
    assert apps.pipelines["cold-chain"].nodes == []
    outbox.close()


PEER_SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1"}
  a: {tier: spoke, broker: "mqtt://127.0.0.1:2", streams: {readings: {topic: "a/+", rate: 1}}}
  b: {tier: spoke, broker: "mqtt://127.0.0.1:3", streams: {readings: {topic: "b/+", rate: 1}}}
"""
"""Spoke ``a``, whose telemetry probes the broker of its one peer spoke ``b`` (port 3)."""


def _fake_peer_roundtrips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Peer broker round trips of 12 ms without a network; the ports probed, in order."""
    from edge_agent import telemetry as telemetry_module

    probed: list[int] = []

    async def roundtrip(host: str, port: int, timeout: float = 3.0, tls: object = None, **login: object) -> float:
        assert login == {"username": None, "password": None}  # the sites file gives no credentials
        probed.append(port)
        return 12.0

    monkeypatch.setattr(telemetry_module, "mqtt_roundtrip_ms", roundtrip)
    return probed


async def test_peer_brokers_are_probed_every_peer_interval_not_every_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_agent import telemetry as telemetry_module
    from edge_agent.telemetry import Telemetry

    sites = parse_sites(PEER_SITES)
    probed = _fake_peer_roundtrips(monkeypatch)

    class Hub:
        connected = False

    now = [100.0]
    clock = types.SimpleNamespace(monotonic=lambda: now[0], time=time.time, perf_counter=time.perf_counter)
    monkeypatch.setattr(telemetry_module, "time", clock)  # the module's clock only, not the event loop's
    telemetry = Telemetry("a", sites, "cloud", Hub(), 2.0, peer_interval=10.0)  # type: ignore[arg-type]
    for _ in range(5):  # five heartbeats, 2 s apart: one peer probe
        await telemetry.probe()
        now[0] += 2.0
    assert probed == [3]
    await telemetry.probe()  # 10 s after the first
    assert probed == [3, 3]
    assert telemetry.peer_rtt["b"].to_dict()["samples"] == 2


async def test_a_heartbeat_goes_at_once_when_the_hub_link_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A site back from a partition is heard from then, not up to a heartbeat interval later."""
    import asyncio

    from edge_agent.telemetry import Telemetry

    sites = parse_sites(PEER_SITES)
    probed = _fake_peer_roundtrips(monkeypatch)

    class Hub:
        def __init__(self) -> None:
            self.connected = False
            self.beats: list[dict[str, Any]] = []

        def publish(self, topic: str, payload: bytes, qos: int) -> int:
            if topic.endswith("/heartbeat"):
                self.beats.append(orjson.loads(payload))
            return 1

    hub = Hub()
    telemetry = Telemetry("a", sites, "cloud", hub, 3600.0, peer_interval=0.0)  # type: ignore[arg-type]
    stop = asyncio.Event()
    count = iter(range(100))
    running = asyncio.create_task(telemetry.run(stop, lambda: {"n": next(count)}))
    for _ in range(50):
        await asyncio.sleep(0.01)
    assert hub.beats == []  # not connected: the first heartbeat went nowhere
    assert probed == [3]
    hub.connected = True
    telemetry.reconnected()  # what the transport calls once the link is back
    for _ in range(50):
        await asyncio.sleep(0.01)
    assert hub.beats == [{"n": 1}]  # at once, an hour before the next interval
    assert probed == [3]  # without probing the peers again first
    stop.set()
    await asyncio.wait_for(running, 10.0)
    assert hub.beats == [{"n": 1}]


def test_an_old_owner_reports_the_last_record_it_sent_for_a_part_it_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apps, processor, source, outbox = _parts(tmp_path)
    processor.handle([_msg(source, mid, 1000.0 + mid) for mid in range(1, 4)])
    processor.handle([_msg(source, 9, 1030.0)])  # closes [1000, 1010): one result for the hub
    processor.flush()
    assert outbox.last_seqs("cold-chain", "truck-7", 0) == [("unit_stats", 1)]
    plan = apps.plans["cold-chain"]
    moved = dataclasses.replace(plan, handovers=(Handover("unit_stats@truck-7", "truck-7", "warehouse-north", 1040.0),))
    apps.plans["cold-chain"] = moved
    assert apps.newly_delivered() == []  # its last window before the switch has not fired yet
    pipeline = apps.pipelines["cold-chain"]
    monkeypatch.setattr(pipeline, "delivered", lambda: ["unit_stats@truck-7"])  # now it has
    assert apps.newly_delivered() == [("cold-chain", "unit_stats@truck-7")]
    apps.record_sent(apps.newly_delivered())
    sent = [["truck-7", "unit_stats", 0, 1]]
    reported = [{"app": "cold-chain", "replica": "unit_stats@truck-7", "switch_at": 1040.0, "sent": sent}]
    assert apps.handed_over() == reported
    assert apps.newly_delivered() == []  # reported once
    monkeypatch.setattr(pipeline, "drained", lambda: ["unit_stats@truck-7"])  # dropped later
    monkeypatch.setattr(apps, "apply_one", lambda plan: None)  # the rebuild is another test's
    assert apps.retire_drained() == ["cold-chain"]
    assert apps.handed_over() == reported
    apps.plans["cold-chain"] = plan  # a later plan without the handover: nothing left to report
    assert apps.handed_over() == []
    outbox.close()
