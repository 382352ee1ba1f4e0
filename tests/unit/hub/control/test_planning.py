"""Planning at the hub: a re-plan hands the plan in force to the planner, which keeps it when nothing changed."""

from __future__ import annotations

from typing import Any

import pytest

from hub.control.planning import default_planner, plan_app
from hub.control.registry import SiteRegistry
from spanedge.errors import InvalidSettings
from spanedge.plan import Plan
from tests.unit.placement.test_placement import heavy_local_app, offload_sites


def placement_of(plan: Plan) -> dict[str, str]:
    return {a.replica: a.site for a in plan.assignments}


def test_the_default_planner_keeps_the_previous_plan_when_nothing_changed() -> None:
    app, sites = heavy_local_app(), offload_sites()
    first = default_planner(app, sites, latency_rows=[], weights=None, slo_ms=None, version=1)
    again = default_planner(app, sites, latency_rows=[], weights=None, slo_ms=None, version=2, previous=first)
    assert placement_of(again) == placement_of(first)
    assert again.version == 2


def test_the_migration_weight_is_known_and_a_wrong_name_says_which_exist() -> None:
    app, sites = heavy_local_app(), offload_sites()
    plan = default_planner(app, sites, latency_rows=[], weights={"migration": 0.5}, slo_ms=None, version=1)
    assert plan.assignments
    with pytest.raises(
        InvalidSettings, match=r"^weights: unknown weight 'moves'; the weights are traffic, latency, migration$"
    ):
        default_planner(app, sites, latency_rows=[], weights={"moves": 1.0}, slo_ms=None, version=1)
    with pytest.raises(InvalidSettings, match=r"unknown weight 'evil';.* weights\.traffic must be .*, got -5"):
        default_planner(app, sites, latency_rows=[], weights={"evil": 1, "traffic": -5}, slo_ms=None, version=1)


def test_plan_app_passes_the_previous_plan_only_when_there_is_one() -> None:
    app, sites = heavy_local_app(), offload_sites()
    registry = SiteRegistry(sites)
    seen: list[dict[str, Any]] = []

    def planner(app: Any, sites: Any, **options: Any) -> Plan:
        seen.append(options)
        return default_planner(app, sites, **options)

    first = plan_app(planner, registry, app, 1, source="", filename="app.py", weights=None, slo_ms=None)
    again = plan_app(planner, registry, app, 2, source="", filename="app.py", weights=None, slo_ms=None, previous=first)
    assert "previous" not in seen[0]
    assert seen[1]["previous"] is first
    assert placement_of(again) == placement_of(first)
