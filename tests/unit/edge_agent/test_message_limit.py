"""A stream's max_message_bytes at the agent: larger messages are dead-lettered with size and topic, unread."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.transport import Message
from edge_agent.outbox import Outbox
from spanedge import topics
from spanedge.errors import InvalidSites
from spanedge.loader import load_app
from spanedge.runtime import HubRecord
from spanedge.sites import MAX_MESSAGE_BYTES, parse_sites
from spanedge.testing import local_plan
from tests.unit.edge_agent.test_agent import APP_FILE
from tests.unit.fakes import FakeTransport

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:9", max_message_bytes: 4096}
  truck-7:
    tier: spoke
    broker: "mqtt://127.0.0.1:9"
    streams:
      readings: {topic: "trucks/7/+/temp", rate: 10, max_message_bytes: 200}
"""


def _agent(state: Path) -> Agent:
    sites = parse_sites(SITES)
    plan = dataclasses.replace(local_plan(load_app(APP_FILE), sites), app_source=APP_FILE.read_text())
    agent = Agent(AgentConfig("truck-7", sites, state), [plan], connect=FakeTransport)
    agent.apply([plan])
    return agent


def _reading(ts: float, pad: int = 0) -> bytes:
    return orjson.dumps({"unit": "u1", "ts": ts, "temp_f": 41.0, "note": "x" * pad})


def test_an_oversize_message_is_dead_lettered_with_its_size_and_topic_and_acknowledged(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    source = agent.intake.transports["truck-7"]
    assert source.max_message_bytes == 200  # the connection keeps no larger payload (the asyncio client)
    assert agent.drainer.max_batch_bytes == 4096  # and no batch to the hub is larger than the hub takes
    whole = _reading(1000.0, pad=300)  # as paho hands it: the whole payload
    messages = [
        Message("trucks/7/u1/temp", _reading(1000.0), 1, 1, source, 0.0),  # type: ignore[arg-type]
        Message("trucks/7/u1/temp", whole, 1, 2, source, 0.0),  # type: ignore[arg-type]
        Message("trucks/7/u2/temp", b"", 1, 3, source, 0.0, oversize=50_000_000),  # type: ignore[arg-type]
    ]
    agent._handle(messages)
    assert source.acked == []  # nothing before the commit
    agent.processor.flush()
    assert source.acked == [1, 2, 3]
    letters = [orjson.loads(p) for t, p in agent.hub.published if t == topics.dlq("cold-chain", "truck-7")]
    assert [(d["topic"], d["size"], d["payload"], d["truncated"]) for d in letters] == [
        ("trucks/7/u1/temp", len(whole), "", True),
        ("trucks/7/u2/temp", 50_000_000, "", True),
    ]
    assert "over the stream's limit of 200 bytes" in letters[0]["reason"]
    assert "max_message_bytes" in letters[0]["reason"]
    metrics = agent.pipelines["cold-chain"].metrics()["readings@truck-7"]
    assert (metrics["in"], metrics["out"]) == (3, 1)  # only the small one went on
    assert agent.dlq_count == 2
    agent.outbox.close()


def test_the_limit_defaults_to_1_mib_and_only_a_hub_takes_one_of_its_own() -> None:
    sites = parse_sites(SITES.replace(", max_message_bytes: 200", "").replace(", max_message_bytes: 4096", ""))
    assert sites.site("truck-7").streams["readings"].max_message_bytes == MAX_MESSAGE_BYTES == 2**20
    assert sites.site("cloud").message_limit == MAX_MESSAGE_BYTES
    with pytest.raises(InvalidSites, match=r"sites\.truck-7\.max_message_bytes: only a hub takes one"):
        parse_sites(SITES.replace("    tier: spoke", "    tier: spoke\n    max_message_bytes: 10"))
    with pytest.raises(InvalidSites, match=r"streams\.readings\.max_message_bytes: Expected `int` >= 1 \(got 0\)"):
        parse_sites(SITES.replace("max_message_bytes: 200", "max_message_bytes: 0"))


def test_batches_to_the_hub_stay_within_its_limit(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "agent.db")
    value = {"note": "x" * 900}
    records = [HubRecord("stats", "truck-7", 1000.0 + i, "k", value, orjson.dumps(value)) for i in range(30)]
    big = {"note": "y" * 9000}
    records.append(HubRecord("stats", "truck-7", 2000.0, "k", big, orjson.dumps(big)))
    outbox.commit({"cold-chain": records})
    batches = outbox.batches(0, 100, batch_size=100, max_bytes=4096)
    assert sum(len(b.ids) for b in batches) == 31
    assert all(len(b.payload) <= 4096 for b in batches[:-1])
    assert len(batches[-1].ids) == 1  # a record that alone is over the limit goes alone; the hub dead-letters it
    assert len(outbox.batches(0, 100, batch_size=100)) == 1  # no limit: as before
    outbox.close()
