"""The processor: it acknowledges what it committed, and leaves messages of closed connections to the broker."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson

from edge_agent.apps import Apps
from edge_agent.config import AgentConfig
from edge_agent.intake import Intake
from edge_agent.mqtt.transport import Inbox, Message
from edge_agent.outbox import Outbox
from edge_agent.processing import Processor
from edge_agent.sinks import LocalSinks
from spanedge.loader import load_app
from spanedge.sites import parse_sites
from spanedge.testing import local_plan
from tests.unit.edge_agent.test_agent import APP_FILE, SITES, FakeTransport


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
