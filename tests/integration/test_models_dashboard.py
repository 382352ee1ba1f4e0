"""The dashboard's model panel in headless Chromium: each version's reason, rows and metrics, and each site's drift.

The hub's REST app runs under uvicorn over HTTPS, over a coordinator (as in
the rollout panel's test) and the hub's own model service, wired by
:func:`hub.models.assembly.hub_models` with the plan key; versions are stored
as training stores them and sent out by the model link, whose messages a list
takes in place of the broker. The sites' heartbeats carry their drift
reports as agents send them.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec

from tests.integration.test_dashboard import browser, hub_parts, serving, signed_in  # noqa: F401
from tests.keys import KEY
from tests.models import make_version
from tests.unit.hub.control.rollout.test_runner import SPOKES, Fleet

TOKEN = "models-read-token-0123456789abcdef01234"
ADMIN = "models-admin-token-0123456789abcdef0123"
APP = """
from spanedge import App, sinks

app = App("plant")
readings = app.source("readings")
wear = app.model("wear", algorithm="logistic_regression", features=["rms", "peak"], label="failed",
                 train_on=readings, every="1h", max_psi=0.25)
readings.predict(wear, output="p_fail").sink(sinks.memory("alerts"))
"""


def _models(fleet: Fleet, state: Path) -> Any:
    from hub.api.model_routes import coordinator_apps
    from hub.models.assembly import hub_models

    sent: list[tuple[str, bytes]] = []

    def publish_all(messages: list[tuple[str, bytes]]) -> list[bool]:
        """Take the model messages as a broker would, acknowledging each."""
        sent.extend(messages)
        return [True] * len(messages)

    hub = SimpleNamespace(
        state_dir=state,
        config=SimpleNamespace(plan_key=KEY, min_replan_interval_s=5, check_interval_s=5),
        engine=None,
        control=SimpleNamespace(publish_all=publish_all),
        coordinator=fleet.coordinator,
        registry=fleet.coordinator.registry,
        distributor=SimpleNamespace(),
    )
    return hub_models(hub, coordinator_apps(fleet.coordinator)), sent


def _beat(fleet: Fleet, site: str, report: dict[str, float]) -> None:
    beat = {"site": site, "ts": fleet.clock.now, "models": {"plant": {"wear": report}}}
    assert fleet.coordinator.heartbeat(site, beat)


def test_the_model_panel_shows_versions_and_where_each_site_drifts(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from playwright.sync_api import expect

    from hub.api.app import create_app
    from spanedge.tokens import Tokens, TokenScope

    expect.set_options(timeout=20_000)  # deadlines, not timings: a busy machine renders slowly
    fleet = Fleet(tmp_path / "hub")
    fleet.coordinator.deploy(APP, "app.py")
    fleet.deliver()
    service, sent = _models(fleet, tmp_path / "hub")
    first = make_version("plant", "wear", 1)
    service.registry.save(first)
    service.on_trained(first)
    api = create_app(
        fleet.coordinator,
        Tokens([(TokenScope.ADMIN, ADMIN, "test"), (TokenScope.READ, TOKEN, "test")]),
        dashboard_stream_s=3,
        models=service,
    )
    drifting, steady = SPOKES[0], SPOKES[1]
    with serving(api) as (base, _):
        page = signed_in(browser, base, TOKEN)
        panel = page.get_by_test_id("models")
        expect(panel).to_be_visible()
        expect(panel).to_contain_text("wear · logistic_regression on rms, peak")
        expect(panel.get_by_test_id("model-version")).to_have_count(1)
        sites = panel.get_by_test_id("model-site")
        expect(sites).to_have_count(len(SPOKES))  # version 1 went to every spoke the plan predicts at
        expect(sites.nth(0)).to_have_attribute("data-held", "")  # no heartbeat said it holds it yet

        # the sites report drift; the hub retrains and sends version 2 out
        _beat(fleet, drifting, {"held": 1.0, "version": 1.0, "records": 500.0, "psi": 0.41, "error": 0.2})
        _beat(fleet, steady, {"held": 1.0, "version": 1.0, "records": 500.0, "psi": 0.03})
        second = msgspec.structs.replace(make_version("plant", "wear", 2, bias=0.5), reason=f"drift at {drifting}")
        service.registry.save(second)
        service.on_trained(second)
        versions = panel.get_by_test_id("model-version")
        expect(versions).to_have_count(2)
        expect(versions.nth(0)).to_have_attribute("data-version", "2")  # newest first
        expect(versions.nth(0)).to_have_attribute("data-reason", f"drift at {drifting}")
        expect(versions.nth(0)).to_contain_text("10 (+2 held out)")
        expect(versions.nth(0)).to_contain_text("auc 0.9")
        expect(versions.nth(1)).to_have_attribute("data-version", "1")
        row = panel.locator(f"[data-testid=model-site][data-site={drifting}]")
        expect(row).to_have_attribute("data-psi", "0.41")
        expect(row).to_have_class("infeasible")  # above the model's max_psi
        expect(row).to_contain_text("v1")
        calm = panel.locator(f"[data-testid=model-site][data-site={steady}]")
        expect(calm).not_to_have_class("infeasible")
        expect(calm).to_contain_text("0.03")
    assert sent, "the model link sent no version to the sites"
