"""The dashboard's site table marks the connectors a site's heartbeat reports down, with their last error."""

from __future__ import annotations

import threading
from typing import Any

import orjson

from .test_dashboard import TOKEN, browser, farm_control_plane, hub_parts, page_context, serving

__all__ = ["browser", "hub_parts"]  # the fixtures, used by name

CONNECTORS = {
    "probes": {
        "server": "opc.tcp://plc-1:4840/",
        "up": False,
        "reconnects": 4,
        "last_error": "TimeoutError: no answer",
    },
    "sink smart-farm/valve_bus": {"up": True, "reconnects": 0},
}


def test_a_connector_that_is_down_shows_on_its_site_row(browser: Any) -> None:
    from playwright.sync_api import expect

    coordinator, api = farm_control_plane()
    stop = threading.Event()

    def beats() -> None:
        while True:
            for site in ("barn", "shed", "field-east", "field-west"):
                beat: dict[str, Any] = {"site": site, "apps": [], "cpu_percent": 5.0}
                if site == "field-west":
                    beat["connectors"] = CONNECTORS
                coordinator.heartbeat(site, orjson.dumps(beat))
            if stop.wait(0.5):
                return

    thread = threading.Thread(target=beats, name="heartbeats", daemon=True)
    thread.start()
    with serving(api) as (base, _verify):
        context = page_context(browser, viewport={"width": 1440, "height": 1000})
        try:
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{base}/")
            page.get_by_test_id("token-input").fill(TOKEN)
            page.get_by_test_id("sign-in").click()
            west = page.locator('[data-testid=site-row][data-site="field-west"]')
            badge = west.get_by_test_id("site-connector-down")
            expect(badge).to_have_count(1, timeout=60_000)
            expect(badge).to_have_text("probes down")
            expect(badge).to_have_attribute("title", "TimeoutError: no answer")
            expect(
                page.locator('[data-testid=site-row][data-site="field-east"]').get_by_test_id("site-connector-down")
            ).to_have_count(0)
            assert errors == []
        finally:
            context.close()
            stop.set()
            thread.join(timeout=10)
