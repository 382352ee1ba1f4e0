"""The agent's intake without a broker: commit before ack, and redeliveries counted once."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.agent import Agent, AgentConfig
from edge_agent.mqtt.transport import Message
from spanedge.loader import load_app
from spanedge.sites import parse_sites
from spanedge.testing import local_plan
from tests.unit.fakes import FakeTransport

ROOT = Path(__file__).resolve().parents[3]
APP_FILE = ROOT / "examples" / "cold_chain" / "app.py"
SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:9"}
  truck-7:
    tier: spoke
    broker: "mqtt://127.0.0.1:9"
    streams:
      readings: {topic: "trucks/7/+/temp", rate: 10}
"""


@pytest.fixture
def make_agent(tmp_path: Path) -> Any:
    sites = parse_sites(SITES)
    plan = dataclasses.replace(local_plan(load_app(APP_FILE), sites), app_source=APP_FILE.read_text())

    def make(**options: Any) -> Agent:
        agent = Agent(AgentConfig("truck-7", sites, tmp_path / "state", **options), [plan], connect=FakeTransport)
        agent.apply([plan])
        return agent

    return make


def _msg(agent: Agent, mid: int, ts: float) -> Message:
    source = agent.intake.transports["truck-7"]
    body = orjson.dumps({"unit": "u1", "ts": ts, "temp_f": 41.0})
    return Message("trucks/7/u1/temp", body, 1, mid, source, 0.0)  # type: ignore[arg-type]


def _count(agent: Agent) -> int:
    window = agent.pipelines["cold-chain"].windows[0].window
    assert window is not None
    return sum(slot[3][0] for slot in window.snapshot()["open"])


def test_acks_only_after_commit_and_redeliveries_count_once(make_agent: Any) -> None:
    first = make_agent()
    source = first.intake.transports["truck-7"]
    assert source.filters == [("trucks/7/+/temp", 1)]
    first._handle([_msg(first, mid, 1000.0 + mid) for mid in range(1, 6)])
    assert source.acked == []  # processed, not yet committed
    first.processor.flush()
    assert source.acked == [1, 2, 3, 4, 5]
    assert _count(first) == 5
    first.outbox.close()

    # a crash after the commit, before the broker saw the acks: it redelivers 3..5
    second = make_agent()
    assert _count(second) == 5  # restored from the checkpoint
    second._handle([_msg(second, mid, 1000.0 + mid) for mid in (3, 4, 5, 6)])
    second.processor.flush()
    assert second.intake.transports["truck-7"].acked == [3, 4, 5, 6]
    assert _count(second) == 6
    assert second.pipelines["cold-chain"].metrics()["readings@truck-7"]["in"] == 1


def test_uncommitted_messages_are_processed_again_after_a_crash(make_agent: Any) -> None:
    first = make_agent()
    first._handle([_msg(first, 1, 1000.0)])
    first.processor.flush()
    first._handle([_msg(first, 2, 1001.0)])  # crash before this commit: not acked, not in the checkpoint
    first.outbox.close()
    second = make_agent()
    second._handle([_msg(second, 2, 1001.0)])
    second.processor.flush()
    assert _count(second) == 2


def test_an_idle_tick_commits_what_it_fired_like_any_output(make_agent: Any) -> None:
    first = make_agent(idle_timeout=5.0)
    pipeline = first.pipelines["cold-chain"]
    assert pipeline.idle_timeout == 5.0
    now = [2000.0]
    pipeline.clock = lambda: now[0]
    first._handle([_msg(first, mid, 1000.0 + mid) for mid in range(1, 4)])
    first.processor.flush()
    assert first.outbox.records == 0  # the window [1000, 1010) is open
    first.processor.tick()
    assert first.processor.touched == set()  # not idle yet
    now[0] = 2005.0
    first.processor.tick()
    assert first.processor.touched == {"cold-chain"}
    first.processor.flush()
    assert first.outbox.records == 1  # the window result, bound for the hub
    sink = first.intake.transports["truck-7"]
    assert [(t, orjson.loads(b)["n"]) for t, b in sink.published] == [("cold-chain/unit-stats", 3)]
    saved = orjson.loads(first.outbox.load_state("cold-chain") or b"{}")
    assert saved["watermark"] == pytest.approx(2005.0 - 5.0 - 1.0)
    first.outbox.close()

    second = make_agent(idle_timeout=5.0)
    assert second.pipelines["cold-chain"].watermark == pytest.approx(1999.0)
    assert _count(second) == 0
    second._handle([_msg(second, 9, 1004.0)])  # its window fired at the idle tick: late
    second.processor.flush()
    assert second.late_count == 1
    assert second.outbox.records == 1
    second.outbox.close()


def test_without_idle_timeout_the_agent_does_not_tick(make_agent: Any) -> None:
    agent = make_agent()
    assert agent.processor.tick_interval is None
    assert agent.pipelines["cold-chain"].idle_timeout is None
    agent.outbox.close()


def _moved(plan: Any, to: dict[str, str]) -> Any:
    """The plan with the replicas named in ``to`` moved to other sites."""
    moved = tuple(dataclasses.replace(a, site=to.get(a.replica, a.site)) for a in plan.assignments)
    return dataclasses.replace(plan, assignments=moved)


def test_offloaded_replicas_subscribe_to_the_source_sites_broker(tmp_path: Path) -> None:
    sites = parse_sites((ROOT / "examples" / "cold_chain" / "sites.yaml").read_text())
    base = dataclasses.replace(local_plan(load_app(APP_FILE), sites), app_source=APP_FILE.read_text())
    offload = {f"{op}@truck-9": "warehouse-north" for op in ("to_celsius", "plausible", "unit_stats", "local_stats")}
    plan = _moved(base, offload)
    agent = Agent(AgentConfig("warehouse-north", sites, tmp_path / "state"), [plan], connect=FakeTransport)
    agent.apply([plan])
    assert sorted(agent.intake.transports) == ["truck-9", "warehouse-north"]
    assert agent.intake.transports["truck-9"].filters == [("trucks/9/+/temp", 1)]
    pipeline = agent.pipelines["cold-chain"]
    assert sorted(pipeline.sources) == ["readings@truck-9", "readings@warehouse-north"]
    source = agent.intake.transports["truck-9"]
    body = orjson.dumps({"unit": "t9", "ts": 1000.0, "temp_f": 41.0})
    agent._handle([Message("trucks/9/t9/temp", body, 1, 1, source, 0.0)])  # type: ignore[arg-type]
    assert pipeline.metrics()["to_celsius@truck-9"]["in"] == 1
    assert pipeline.metrics()["to_celsius@warehouse-north"]["in"] == 0
    pipeline.flush()
    out = pipeline.take()
    assert [(r.site, r.stream) for r in out.to_hub] == [("truck-9", "unit_stats")]  # the group site, not the host
    agent.outbox.close()

    # truck-9's own agent now runs only its source replica, with no consumer here: it subscribes to nothing
    own = Agent(AgentConfig("truck-9", sites, tmp_path / "state9"), [plan], connect=FakeTransport)
    own.apply([plan])
    assert own.intake.transports == {}
    own.outbox.close()


def test_central_placement_forwards_raw_readings(tmp_path: Path) -> None:
    from spanedge.testing import run_edge

    sites = parse_sites((ROOT / "examples" / "cold_chain" / "sites.yaml").read_text())
    app = load_app(APP_FILE)
    base = local_plan(app, sites)
    central = _moved(base, {a.replica: "cloud" for a in base.assignments if not a.replica.startswith("readings@")})
    result = run_edge(app, {"readings": [{"unit": "u", "ts": 5.0, "temp_f": 50.0}]}, site="truck-7", plan=central)
    assert [(r.stream, r.site, r.value) for r in result.to_hub["readings"]] == [
        ("readings", "truck-7", {"unit": "u", "ts": 5.0, "temp_f": 50.0})
    ]
    assert result.sinks == {}
