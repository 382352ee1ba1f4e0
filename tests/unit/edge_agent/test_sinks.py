"""Local sinks: served after the commit, MQTT ones through their publisher, delivered once their broker acknowledged them."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from edge_agent.checkpoint import Committed
from edge_agent.connectors.api import Publisher
from edge_agent.connectors.mqtt import MqttSink
from edge_agent.sinks import LocalSinks
from spanedge import sinks
from spanedge.runtime import SinkItem
from tests.unit.edge_agent.test_processing import _msg, _parts
from tests.unit.fakes import FakeTransport


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
    from edge_agent.connectors.mqtt import Unacknowledged

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


def test_sinks_report_the_latency_of_their_results_from_event_time_to_written(tmp_path: Path) -> None:
    import time

    _apps, processor, source, outbox = _parts(tmp_path)
    now = time.time()
    processor.handle([_msg(source, mid, now - 30.0 + mid) for mid in range(1, 4)])
    processor.handle([_msg(source, 9, now + 60.0)])  # moves the watermark past the first window
    processor.flush()
    assert len(source.published) >= 1
    (sink,) = processor.sinks.result_latency()["cold-chain"].values()
    assert sink["results"] == len(source.published)
    assert 0 < sink["p50_ms"] <= sink["p95_ms"] < 60_000  # from each window's end to its publication
    outbox.close()


def test_the_heartbeat_counts_each_app_s_dead_letters_late_records_and_operator_errors(tmp_path: Path) -> None:
    import dataclasses

    from edge_agent.agent import Agent, AgentConfig
    from edge_agent.mqtt.transport import Message
    from spanedge.loader import load_app
    from spanedge.sites import parse_sites
    from spanedge.testing import local_plan
    from spanedge.wire.heartbeat import decode, encode
    from tests.unit.edge_agent.test_agent import APP_FILE, SITES
    from tests.unit.fakes import FakeTransport

    sites = parse_sites(SITES)
    plan = dataclasses.replace(local_plan(load_app(APP_FILE), sites), app_source=APP_FILE.read_text())
    agent = Agent(AgentConfig("truck-7", sites, tmp_path), [plan], connect=FakeTransport)
    agent.apply([plan])
    assert agent.heartbeat().counters == {"cold-chain": {"dlq": 0, "late": 0, "errors": 0}}
    source = agent.intake.transports["truck-7"]
    bodies = [b"not json", orjson.dumps({"unit": "u1", "ts": 1000.0, "temp_f": "hot"})]  # to_celsius raises
    bodies += [orjson.dumps({"unit": "u1", "ts": 1000.0 + i, "temp_f": "cold"}) for i in range(2)]
    agent._handle([Message("trucks/7/u1/temp", b, 1, i, source, 0.0) for i, b in enumerate(bodies, 1)])  # type: ignore[arg-type]
    agent.processor.flush()
    beat, dropped = decode(encode(agent.heartbeat()))
    assert dropped == []
    assert beat.counters == {"cold-chain": {"dlq": 4, "late": 0, "errors": 3}}
    assert beat.dlq == 4
    agent.outbox.close()


class QosTransport(FakeTransport):
    """A site-broker stand-in that also records the QoS of each publish."""

    def __init__(self, name: str) -> None:
        super().__init__(None, "sink", name)
        self.qos: list[int] = []

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        self.qos.append(qos)
        return super().publish(topic, payload, qos, retain)


def test_the_mqtt_sink_is_a_publisher_at_qos_1_that_warns_of_values_lost_with_their_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    link = QosTransport("site broker (truck-7)")
    sink = MqttSink(lambda: link)  # type: ignore[arg-type]
    publisher: Publisher = sink  # what the agent's sinks see of it
    publisher.publish("farm", "farm/valves", b'{"open": true}', 100.0)
    publisher.publish("farm", "farm/valves", b'{"open": false}', 105.0)
    assert link.published == [("farm/valves", b'{"open": true}'), ("farm/valves", b'{"open": false}')]
    assert link.qos == [1, 1]
    assert publisher.unacknowledged() == {"farm": 100.0}
    link.on_published(1)  # the broker's PUBACK of the first
    assert publisher.unacknowledged() == {"farm": 105.0}
    caplog.set_level("WARNING", "edge_agent.connectors.mqtt")
    sink.closed(link)  # type: ignore[arg-type]
    assert publisher.unacknowledged() == {}
    assert "1 MQTT sink value(s) published on site broker (truck-7) were never acknowledged" in caplog.text


class Recording:
    """A publisher that records what it was handed and reports every value as unacknowledged."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bytes, float | None]] = []

    def publish(self, app: str, target: str, body: bytes, bound: float | None) -> None:
        self.calls.append((app, target, body, bound))

    def unacknowledged(self) -> dict[str, float]:
        return {app: bound for app, _, _, bound in self.calls if bound is not None}


def test_local_sinks_hand_each_mqtt_value_to_the_publisher_of_its_kind_with_the_commits_floor(tmp_path: Path) -> None:
    hub = FakeTransport(None, "hub", "hub broker")
    local = LocalSinks("truck-7", tmp_path, 2**20, hub, lambda: hub)  # type: ignore[arg-type]
    recording = Recording()
    local.publishers["mqtt"] = recording
    done = Committed(
        sinks=[("farm", SinkItem("dashboard", sinks.mqtt("farm/dry"), {"zone": "z1"}, 12.0))], sink_floor={"farm": 10.0}
    )
    local.serve(done)
    assert recording.calls == [("farm", "farm/dry", b'{"zone":"z1"}', 10.0)]
    assert hub.published == []  # nothing went to the hub broker: no dead letter, no publish of its own
    assert local.unacknowledged_bounds() == {"farm": 10.0}
    assert local.result_latency()["farm"]["dashboard"]["results"] == 1
