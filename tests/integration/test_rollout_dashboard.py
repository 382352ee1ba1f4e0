"""The dashboard's rollout panel in headless Chromium: stage, sites per version and gate values as a rollout moves.

The hub's REST app runs under uvicorn over HTTPS, over a coordinator whose
rollout is driven step by step (a fake planner and publisher, a clock moved by
hand, heartbeats that say what each site runs), as in the runner's unit tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.test_dashboard import browser, hub_parts, serving, signed_in  # noqa: F401
from tests.unit.hub.control.rollout.test_runner import V1, V2, Fleet

TOKEN = "rollout-read-token-0123456789abcdef0123"
ADMIN = "rollout-admin-token-0123456789abcdef012"


def test_the_rollout_panel_shows_stages_versions_and_gate_values(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from playwright.sync_api import expect

    from hub.api.app import create_app
    from spanedge.loader import source_hash
    from spanedge.tokens import Tokens, TokenScope

    expect.set_options(timeout=20_000)  # deadlines, not timings: a busy machine renders slowly
    fleet = Fleet(tmp_path)
    fleet.coordinator.deploy(V1, "app.py")
    fleet.deliver()
    api = create_app(
        fleet.coordinator,
        Tokens([(TokenScope.ADMIN, ADMIN, "test"), (TokenScope.READ, TOKEN, "test")]),
        dashboard_stream_s=3,
    )
    v1, v2 = source_hash(V1), source_hash(V2)
    with serving(api) as (base, _):
        page = signed_in(browser, base, TOKEN)
        panel = page.get_by_test_id("rollout")
        expect(page.get_by_test_id("dag")).to_be_visible()
        expect(panel).to_be_hidden()  # no rollout yet

        record = fleet.coordinator.rollouts.deploy(
            V2, "app_v2.py", stages="kind=truck:1, *", gates="dead_letter_rate<1%", hold_s=30
        )
        (canary,) = record.rollout.stages[0].sites
        fleet.deliver()
        fleet.advance(5)
        summary = page.get_by_test_id("rollout-summary")
        expect(panel).to_be_visible()
        expect(summary).to_have_attribute("data-status", "holding")
        expect(summary).to_contain_text("holding at stage 1/2 kind=truck:1")
        stages = page.get_by_test_id("rollout-stage")
        expect(stages).to_have_count(2)
        expect(stages.nth(0)).to_have_attribute("data-state", "holding")
        expect(stages.nth(0)).to_contain_text(canary)
        expect(stages.nth(1)).to_have_attribute("data-state", "waiting")
        new = page.locator(f'[data-testid=rollout-version][data-version="{v2}"]')
        expect(new).to_have_attribute("data-count", "1")
        expect(new).to_contain_text(canary)
        expect(page.locator(f'[data-testid=rollout-version][data-version="{v1}"]')).to_have_attribute("data-count", "3")

        # the canary dead-letters everything: the stage fails and v1 goes back to it
        fleet.advance(30, dead_letter={canary})
        fleet.deliver()
        fleet.advance(5)
        expect(summary).to_have_attribute("data-status", "rolled_back")
        failed = page.locator("[data-testid=rollout-step][data-status=failed]")
        expect(failed).to_have_count(1)
        gate = failed.get_by_test_id("rollout-gate")
        expect(gate).to_have_attribute("data-gate", "dead_letter_rate<1%")
        expect(gate).to_have_attribute("data-passed", "false")
        expect(gate).to_have_attribute("data-value", "1")
        expect(gate).to_contain_text(f"at {canary}")
        expect(failed).to_contain_text(f"given back to {canary}")
        expect(page.locator(f'[data-testid=rollout-version][data-version="{v1}"]')).to_have_attribute("data-count", "4")
        # the plan history shows the rollout's steps next to the deploys
        expect(page.get_by_test_id("history")).to_contain_text("rollout: stage 1/2 kind=truck:1 failed")
        page.context.close()
