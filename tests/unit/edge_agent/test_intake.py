"""MQTT topic filters as the intake matches them, and how long its inputs have been up (no broker)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import edge_agent.intake as intake_module
from edge_agent.apps import Apps
from edge_agent.config import AgentConfig
from edge_agent.intake import Intake, topic_matches
from edge_agent.mqtt.transport import Inbox
from edge_agent.outbox import Outbox
from spanedge.loader import load_app
from spanedge.sites import parse_sites
from spanedge.testing import local_plan
from tests.unit.edge_agent.test_agent import APP_FILE, SITES
from tests.unit.fakes import FakeTransport


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("a/+/c", "a/b/c", True),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("a/+", "a/b/c", False),
        ("a/+", "a", False),
        ("+/+", "/x", True),
        ("a/b", "a/c", False),
        ("#", "$SYS/broker", False),
        ("$SYS/#", "$SYS/broker", True),
    ],
)
def test_topic_matching_follows_mqtt(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_matches(topic_filter, topic) is expected


def test_inputs_count_as_live_only_from_their_last_reconnection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(intake_module.time, "monotonic", lambda: now[0])
    sites = parse_sites(SITES)
    plan = dataclasses.replace(local_plan(load_app(APP_FILE), sites), app_source=APP_FILE.read_text())
    apps = Apps(AgentConfig("truck-7", sites, tmp_path), Outbox(tmp_path / "agent.db"))
    apps.apply([plan])
    intake = Intake("truck-7", sites, Inbox(), FakeTransport)
    intake.rewire(apps.pipelines)
    (transport,) = intake.transports.values()
    assert intake.live_for() == 0.0  # not connected yet: silence says nothing
    now[0] = 110.0
    transport.connected = True
    transport.on_connected()
    now[0] = 125.0
    assert intake.live_for() == 15.0
    transport.connected = False
    assert intake.live_for() == 0.0  # down
    now[0] = 130.0
    transport.connected = True
    assert intake.live_for() == 5.0  # counted again from when it was seen down
