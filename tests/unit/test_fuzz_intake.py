"""Fuzzing with nothing lost: arbitrary payloads among good ones at the agent's intake and the hub's ingest.

Every bad payload is dead-lettered with a reason (and counted), every good one
reaches its result, every QoS 1 message is acknowledged, nothing raises.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.transport import Message
from hub.ingest import log as hub_log
from hub.ingest.consumer import Ingest
from spanedge import topics
from spanedge.loader import load_app_source
from spanedge.runtime.outputs import EXCERPT_BYTES
from spanedge.sites import Broker, parse_sites
from spanedge.testing import local_plan
from spanedge.wire.batch import Record, encode_batch
from tests.unit.fakes import FakeIngestClient, FakeTransport, message

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

APP = "fuzz-intake"
APP_SOURCE = f"""
from spanedge import App, agg, sinks

app = App("{APP}")
readings = app.source("readings", time_field="ts")
counts = readings.window(key="unit", size="10s", aggs={{"n": agg.count()}}, name="counts")
counts.sink(sinks.memory("counts"), name="counts_out")
"""
SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:9"}
  truck-7:
    tier: spoke
    broker: "mqtt://127.0.0.1:9"
    streams:
      readings: {topic: "trucks/7/+/temp", rate: 10}
"""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _is_record(payload: bytes) -> bool:
    """True if ``payload`` is a JSON object with the event-time field (it would count as a record)."""
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and "ts" in value


#: Payloads a sensor must never send: bytes, any JSON that is not a record, huge ones.
sensor_junk = (
    st.binary(max_size=200)
    | json_values.map(orjson.dumps)
    | st.integers(EXCERPT_BYTES, 4 * EXCERPT_BYTES).map(lambda n: b"[" * n)
).filter(lambda p: not _is_record(p))
units = st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True)


@FUZZ
@given(
    junk=st.lists(st.tuples(units, sensor_junk), min_size=1, max_size=6),
    good_units=st.lists(st.sampled_from(["u1", "u2"]), min_size=1, max_size=8),
    slots=st.lists(st.integers(min_value=0, max_value=8), min_size=6, max_size=6),
    stray=st.integers(min_value=0, max_value=2),
)
def test_the_agent_intake_dead_letters_junk_and_counts_every_good_record(
    junk: list[tuple[str, bytes]], good_units: list[str], slots: list[int], stray: int
) -> None:
    sites = parse_sites(SITES)
    plan = dataclasses.replace(local_plan(load_app_source(APP_SOURCE, "fuzz_app.py"), sites), app_source=APP_SOURCE)
    with tempfile.TemporaryDirectory() as state:
        agent = Agent(AgentConfig("truck-7", sites, Path(state)), [plan], connect=FakeTransport)
        agent.apply([plan])
        source = agent.intake.transports["truck-7"]
        good = [
            (f"trucks/7/{unit}/temp", orjson.dumps({"unit": unit, "ts": 1000.0 + i, "temp_f": 40.0}))
            for i, unit in enumerate(good_units)
        ]
        # the same records on topics the filter does not match: routed nowhere, counted nowhere
        others = [(topic.replace("trucks/7/", "trucks/8/"), body) for topic, body in good[:stray]]
        stream = list(good)
        for (unit, payload), slot in zip(junk, slots, strict=False):
            stream.insert(min(slot, len(stream)), (f"trucks/7/{unit}/temp", payload))
        stream += others
        messages = [
            Message(topic, payload, 1, mid, source, 0.0)  # type: ignore[arg-type]
            for mid, (topic, payload) in enumerate(stream, start=1)
        ]
        agent._handle(messages)  # never raises
        agent.processor.flush()
        pipeline = agent.pipelines[APP]
        pipeline.flush()  # event time ends: every window fires
        agent.processor.touched.add(APP)
        agent.processor.flush()
        hub = agent.hub
        assert isinstance(hub, FakeTransport)
        dead = [orjson.loads(body) for topic, body in hub.published if topic == topics.dlq(APP, "truck-7")]
        windows = agent.sinks.memory["counts"]
        acked = source.acked
        agent.outbox.close()
    assert agent.dlq_count == len(junk)
    assert len(dead) == len(junk)
    assert all(isinstance(d["reason"], str) and d["reason"] for d in dead)
    assert all(len(d["payload"].encode()) <= EXCERPT_BYTES for d in dead)
    assert sorted(d["size"] for d in dead) == sorted(len(p) for _, p in junk)
    for unit in ("u1", "u2"):
        assert sum(w["n"] for w in windows if w["unit"] == unit) == good_units.count(unit)
    assert sorted(acked) == [m.mid for m in messages]


def _batch(site: str, seqs: range, app: str = APP) -> bytes:
    return encode_batch(app, [Record(site, "readings", s, 1000.0 + s, "u1", {"temp_f": 40.0 + s}) for s in seqs])


#: Batches the hub must refuse: anything at all, another app's, another site's (a forged one), no records.
batch_junk = (
    st.binary(max_size=300)
    | json_values.map(orjson.dumps)
    | st.builds(_batch, st.just("truck-9"), st.just(range(1, 3)))
    | st.builds(_batch, st.just("truck-7"), st.just(range(1, 3)), st.just("other-app"))
    | st.just(b'{"v": 1, "app": "fuzz-intake", "site": "truck-7", "stream": "readings", "records": [{}]}')
)


@FUZZ
@given(
    junk=st.lists(batch_junk, min_size=1, max_size=6),
    sizes=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=5),
    slots=st.lists(st.integers(min_value=0, max_value=6), min_size=6, max_size=6),
)
def test_the_hub_ingest_dead_letters_junk_and_logs_every_good_batch(
    junk: list[bytes], sizes: list[int], slots: list[int]
) -> None:
    topic = topics.data(APP, "readings", "truck-7")
    good, seq = [], 1
    for size in sizes:
        good.append(_batch("truck-7", range(seq, seq + size)))
        seq += size
    payloads = list(good)
    for payload, slot in zip(junk, slots, strict=False):
        payloads.insert(min(slot, len(payloads)), payload)
    messages = [message(mid, topic, p) for mid, p in enumerate(payloads, start=1)]
    with tempfile.TemporaryDirectory() as log_dir:
        ingest = Ingest(Broker(scheme="mqtt", host="127.0.0.1", port=9), Path(log_dir))
        client = FakeIngestClient()
        ingest._client = client  # type: ignore[assignment]
        ingest._write_group(messages)  # never raises
        stats = ingest.stats()
        ingest.stop()
        app_dir = Path(log_dir) / APP
        logged = list(hub_log.iter_lines(app_dir, hub_log.head(app_dir), hub_log.tail(app_dir)))
    assert stats["records"] == seq - 1
    assert [r["seq"] for r in logged] == list(range(1, seq))  # every good record, once, in order
    assert all(r["site"] == "truck-7" for r in logged)
    assert stats["malformed"] == len(junk)
    dead = [orjson.loads(body) for t, body in client.published]
    assert [t for t, _ in client.published] == [topics.dlq(APP, "truck-7")] * len(junk)
    assert all(d["reason"] and d["topic"] == topic for d in dead)
    assert sorted(client.acked) == [m.mid for m in messages]
