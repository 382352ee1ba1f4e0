"""Plan distribution: versions that never go back, across restarts and clock steps, and expiring plans re-issued."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.control.distribution import PLAN_TTL_S, PlanDistributor
from hub.control.state import StateStore
from tests.keys import KEY, read_plan

SECOND = 1_000_000_000


class Publisher:
    """Keeps what is published; the broker acknowledges everything."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []

    def publish_all(self, messages: Sequence[tuple[str, bytes]]) -> list[bool]:
        self.messages.extend(messages)
        return [True] * len(messages)

    def payloads(self, site: str) -> list[dict[str, Any]]:
        return [read_plan(p, site=site) for t, p in self.messages if t == f"spanedge/v1/control/{site}/plan"]


@settings(database=None, max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=2**62), st.booleans(), st.booleans()), min_size=1, max_size=15
    )
)
def test_versions_strictly_increase_whatever_the_clock_and_restarts_do(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, bool, bool]]
) -> None:
    """Any clock readings (stepping back or forth), hub restarts between publishes, re-issues: never a reused version."""
    root = tmp_path_factory.mktemp("hub")
    publisher = Publisher()
    now = [0]
    distributor = PlanDistributor(publisher, KEY, StateStore(root), clock_ns=lambda: now[0], ttl_s=1.0)
    for clock, restart, refresh in steps:
        now[0] = clock
        if restart:
            distributor = PlanDistributor(publisher, KEY, StateStore(root), clock_ns=lambda: now[0], ttl_s=1.0)
        if refresh:
            distributor.refresh()
        else:
            distributor.publish({}, ["a"])
    versions = [p["version"] for p in publisher.payloads("a")]
    assert versions == sorted(set(versions))
    assert StateStore(root).load_versions() == ({"a": versions[-1]} if versions else {})


def test_a_restarted_hub_continues_from_the_persisted_version_with_the_clock_stepped_back(tmp_path: Path) -> None:
    publisher = Publisher()
    now = [2_000 * SECOND]
    PlanDistributor(publisher, KEY, StateStore(tmp_path), clock_ns=lambda: now[0]).publish({}, ["a", "b"])
    now[0] = 1_000 * SECOND  # the clock stepped back while the hub was down
    PlanDistributor(publisher, KEY, StateStore(tmp_path), clock_ns=lambda: now[0]).publish({}, ["a"])
    assert [p["version"] for p in publisher.payloads("a")] == [2_000 * SECOND, 2_000 * SECOND + 1]
    assert StateStore(tmp_path).load_versions() == {"a": 2_000 * SECOND + 1, "b": 2_000 * SECOND}


def test_a_plan_expires_a_ttl_after_it_is_issued() -> None:
    publisher = Publisher()
    PlanDistributor(publisher, KEY, clock_ns=lambda: 1_000 * SECOND).publish({}, ["a"])
    (payload,) = publisher.payloads("a")
    assert payload["issued_at"] == 1_000.0
    assert payload["expires_at"] == 1_000.0 + PLAN_TTL_S


def test_plans_are_re_issued_with_a_new_version_once_half_their_ttl_is_over() -> None:
    publisher = Publisher()
    now = [1_000 * SECOND]
    distributor = PlanDistributor(publisher, KEY, clock_ns=lambda: now[0], ttl_s=100.0)
    distributor.publish({}, ["a", "b"])
    now[0] += 49 * SECOND
    assert distributor.refresh() == {}
    now[0] += 1 * SECOND
    assert distributor.refresh() == {"a": "published", "b": "published"}
    first, again = publisher.payloads("a")
    assert again["version"] > first["version"]
    assert again["apps"] == first["apps"]
    assert (again["issued_at"], again["expires_at"]) == (1_050.0, 1_150.0)
    assert distributor.refresh() == {}  # just re-issued
    assert distributor.publish({}, ["a"]) == {"a": "unchanged"}  # the re-issued message still carries a's part
