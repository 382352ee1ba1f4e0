"""MQTT topic filters as the intake matches them (no broker)."""

from __future__ import annotations

import pytest

from edge_agent.intake import topic_matches


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
