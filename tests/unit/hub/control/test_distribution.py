"""Plan distribution: versions that never go back, across restarts and clock steps, and expiring plans re-issued."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.control.distribution import PLAN_TTL_S, PlanDistributor, SiteApp, site_view, sites_of
from hub.control.state import StateStore
from spanedge.loader import source_hash
from spanedge.plan import Assignment, Flow, Handover, Plan, SolverInfo, Totals
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


def demo_plan(version: int, rate: float, far: str, handovers: tuple[Handover, ...] = ()) -> Plan:
    """Two sites feeding the hub; ``double@b`` runs at ``far``."""
    return Plan(
        app="demo",
        version=version,
        hub="cloud",
        assignments=(
            Assignment("readings@a", "readings", "a", "a", f"v{version}"),
            Assignment("readings@b", "readings", "b", "b", f"v{version}"),
            Assignment("double@a", "double", "a", "a", f"v{version}"),
            Assignment("double@b", "double", "b", far, f"v{version}"),
            Assignment("out", "out", None, "cloud", f"v{version}"),
        ),
        flows=(
            Flow("readings@a", "double@a", rate, rate),
            Flow("readings@b", "double@b", rate, rate),
            Flow("double@a", "out", rate, rate),
            Flow("double@b", "out", rate, rate),
        ),
        totals=Totals(rate, rate, rate, rate),
        solver=SolverInfo("fake", "optimal", rate),
        handovers=handovers,
    )


def reference_digest(apps: dict[str, SiteApp], site: str) -> str:
    """A site's digest worked out from scratch, as every publish did before views were kept."""
    views = [
        (a.plan.app, source_hash(a.source), site_view(a.plan, site)) for a in apps.values() if site in sites_of(a.plan)
    ]
    return hashlib.sha256(repr(sorted(views)).encode()).hexdigest()


def test_kept_views_give_the_digests_of_views_cut_afresh_and_the_same_messages() -> None:
    publisher = Publisher()
    distributor = PlanDistributor(publisher, KEY)
    other = SiteApp(dataclasses.replace(demo_plan(1, 3.0, "a"), app="zeta"), "z = 1")  # another app at a and b
    steps = [
        demo_plan(1, 10.0, "b"),
        demo_plan(2, 12.5, "b"),  # other rates, reasons and version: the same views
        demo_plan(3, 12.5, "cloud", (Handover("double@b", "b", "cloud", 30.0, 0),)),  # double@b moves
        demo_plan(4, 12.5, "cloud"),  # the handover is over
        demo_plan(5, 9.0, "cloud"),
    ]
    published, cut_from = [], []
    for plan in steps:
        apps = {"demo": SiteApp(plan, "source = 1"), "zeta": other}
        status = distributor.publish(apps, ["a", "b", "cloud"])
        published.append(sorted(site for site, s in status.items() if s == "published"))
        cut_from.append(distributor._views["demo"].plan.version)  # the plan its kept views were cut from
        assert distributor._delivered == {s: reference_digest(apps, s) for s in ("a", "b", "cloud")}
    assert published == [["a", "b", "cloud"], [], ["b", "cloud"], ["b", "cloud"], []]
    assert cut_from == [1, 1, 3, 4, 4]
    # a new source is a new view of every site, even with the placement unchanged
    status = distributor.publish({"demo": SiteApp(steps[-1], "source = 2"), "zeta": other}, ["a", "b", "cloud"])
    assert set(status.values()) == {"published"}


def test_a_version_on_trial_and_its_promotion_are_new_views() -> None:
    publisher = Publisher()
    distributor = PlanDistributor(publisher, KEY)
    plan = demo_plan(1, 10.0, "b")
    assert distributor.publish({"demo": SiteApp(plan, "v2")}, ["a", "b"]) == {"a": "published", "b": "published"}
    trial = SiteApp(dataclasses.replace(plan, trial=True), "v2")
    assert distributor.publish({"demo": trial}, ["a"]) == {"a": "published"}
    assert publisher.payloads("a")[-1]["apps"][0]["plan"]["trial"] is True
    assert distributor.publish({"demo": trial}, ["a"]) == {"a": "unchanged"}
    # the rollout passed: the same plan and source, no longer on trial, is news to the site that had it on trial
    assert distributor.publish({"demo": SiteApp(plan, "v2")}, ["a", "b"]) == {"a": "published", "b": "unchanged"}
