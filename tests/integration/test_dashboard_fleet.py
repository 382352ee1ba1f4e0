"""The dashboard at fleet scale in headless Chromium: 120 sites paged, problems first, filtered by label.

Above 20 sites the snapshot carries only the measured links and the page lists
the slowest of them instead of the matrix. The hub's REST app runs under
uvicorn over HTTPS over a coordinator whose registry takes the heartbeats
agents send.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.integration.test_dashboard import browser, hub_parts, serving, signed_in  # noqa: F401

TOKEN = "fleet-read-token-0123456789abcdef012345"
ADMIN = "fleet-admin-token-0123456789abcdef01234"
SPOKES = [f"truck-{i:03d}" for i in range(100)] + [f"van-{i:03d}" for i in range(20)]
SILENT = {"truck-007", "van-003"}  # never send a heartbeat: down


def _sites_yaml() -> str:
    lines = ["sites:", '  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883", cpu: 4}']
    for name in SPOKES:
        kind = name.split("-")[0]
        lines.append(
            f'  {name}: {{tier: spoke, broker: "mqtt://127.0.0.1:1883", labels: {{kind: {kind}}}, '
            f'streams: {{readings: {{topic: "s/{name}/+", rate: 1}}}}}}'
        )
    return "\n".join(lines) + "\n"


def test_a_fleet_of_sites_is_paged_problems_first_and_filtered_by_label(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from playwright.sync_api import expect

    from hub.api.app import create_app
    from hub.api.dashboard.snapshot import build_snapshot
    from hub.control.coordinator import Coordinator
    from hub.control.registry import SiteRegistry
    from spanedge.sites import parse_sites
    from spanedge.tokens import Tokens, TokenScope

    expect.set_options(timeout=20_000)  # deadlines, not timings: a busy machine renders slowly
    coordinator = Coordinator(SiteRegistry(parse_sites(_sites_yaml())))
    for i, site in enumerate(SPOKES):
        if site in SILENT:
            continue
        rtt = 400.0 if site == "truck-042" else 20.0 + i % 7  # one slow link to the hub
        beat = {"site": site, "ts": time.time(), "latency": {"cloud": {"rtt_ms": rtt, "p95_ms": rtt, "samples": 5}}}
        assert coordinator.heartbeat(site, beat)
    snapshot = build_snapshot(coordinator)
    assert snapshot["links_scope"] == "measured"
    heard = [s for s in SPOKES if s not in SILENT]
    pairs = {(s, "cloud") for s in heard} | {("cloud", s) for s in heard}  # a round trip measures both ways
    assert {(link["src"], link["dst"]) for link in snapshot["links"]} == pairs  # not all 14,520
    api = create_app(coordinator, Tokens([(TokenScope.ADMIN, ADMIN, "t"), (TokenScope.READ, TOKEN, "t")]))
    with serving(api) as (base, _):
        page = signed_in(browser, base, TOKEN)
        rows = page.get_by_test_id("site-row")
        count = page.get_by_test_id("sites-count")
        expect(count).to_have_attribute("data-total", str(len(SPOKES) + 1))
        expect(count).to_have_attribute("data-down", str(len(SILENT)))
        expect(rows).to_have_count(50)
        for i, site in enumerate(sorted(SILENT)):  # the sites that are down come first
            expect(rows.nth(i)).to_have_attribute("data-site", site)
            expect(rows.nth(i)).to_have_attribute("data-state", "down")
        page.get_by_test_id("sites-next").click()
        page.get_by_test_id("sites-next").click()
        expect(rows).to_have_count(len(SPOKES) + 1 - 100)
        expect(page.get_by_test_id("sites-next")).to_be_disabled()
        expect(page.get_by_test_id("sites-page")).to_contain_text("page 3/3")

        page.get_by_test_id("sites-filter").fill("kind=van")
        expect(count).to_have_attribute("data-matching", "20")
        expect(rows).to_have_count(20)
        expect(rows.nth(0)).to_have_attribute("data-site", "van-003")
        page.get_by_test_id("sites-filter").fill("kind=van van-01")
        expect(rows).to_have_count(10)  # van-010 .. van-019

        slow = page.get_by_test_id("slow-link")
        expect(page.get_by_test_id("links-note")).to_contain_text(f"{len(pairs)} measured links")
        expect(slow).to_have_count(20)
        for i in range(2):  # the slow link, both ways
            expect(slow.nth(i)).to_contain_text("truck-042")
        expect(page.get_by_test_id("link-cell")).to_have_count(0)  # no matrix
