"""Live previews reach the hub: ``spanedge preview --site --for --hub-url`` posts its summary, the API lists it, the dashboard shows it.

The hub's REST app (``hub.api.app.create_app``) runs under uvicorn over HTTPS, over a
coordinator that keeps its state in a directory, with the cold-chain example deployed
through ``POST /apps`` and placed by the ILP. The preview runs as the command would, in
its own process, on truck-7's readings sent to a real Mosquitto; headless Chromium
shows the Previews card.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanedge.loader import source_hash
from tests.conftest import EXAMPLES
from tests.integration.agentkit import Sensor
from tests.integration.test_dashboard import ADMIN, TOKEN, browser, deploy, hub_parts, serving, signed_in  # noqa: F401
from tests.integration.test_preview_live import APP_V2, READINGS, Preview, write_sites
from tests.polling import wait_for

APP = "cold-chain"


@pytest.fixture
def hub(hub_parts: None, tmp_path: Path) -> Iterator[tuple[str, ssl.SSLContext, Path]]:  # noqa: F811
    """The hub's API over HTTPS with the cold-chain app deployed: its URL, a context trusting it, its state directory."""
    from hub.api.app import create_app
    from hub.control.coordinator import Coordinator
    from hub.control.registry import SiteRegistry
    from hub.control.state import StateStore
    from spanedge.sites import load_sites
    from spanedge.tokens import Tokens, TokenScope

    state = tmp_path / "hub"
    coordinator = Coordinator(SiteRegistry(load_sites(EXAMPLES / "cold_chain" / "sites.yaml")), store=StateStore(state))
    tokens = Tokens([(TokenScope.ADMIN, ADMIN, "test"), (TokenScope.READ, TOKEN, "test")])
    with serving(create_app(coordinator, tokens, dashboard_stream_s=3)) as (base, verify):
        assert deploy(base, verify)["version"] == 1
        yield base, verify, state


def get_previews(base: str, verify: ssl.SSLContext) -> dict[str, Any]:
    import httpx

    answer = httpx.get(f"{base}/apps/{APP}/previews", headers={"Authorization": f"Bearer {TOKEN}"}, verify=verify)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_live_preview_with_a_hub_leaves_its_summary_there(
    hub: tuple[str, ssl.SSLContext, Path], mosquitto: Any, tmp_path: Path
) -> None:
    base, verify, state = hub
    ca = tmp_path / "hub-ca.pem"
    ca.write_text("".join(ssl.DER_cert_to_PEM_cert(der) for der in verify.get_ca_certs(binary_form=True)))
    sites = write_sites(tmp_path, mosquitto.port)
    sensor = Sensor(mosquitto.port)
    try:
        preview = Preview(
            APP_V2, "--site", "truck-7", "--for", "10m", "--sites", sites, "--max-lines", len(READINGS),
            "--hub-url", base, "--token", ADMIN, "--hub-ca", ca, "--json",
        )  # fmt: skip
        wait_for(lambda: preview.said("reading site truck-7") or preview.proc.poll() is not None, 120, "the reading")
        assert preview.proc.poll() is None, preview.errors
        sensor.send(READINGS)
        code, out = preview.finish()
    finally:
        sensor.close()
    assert code == 0, preview.errors
    assert preview.said(f"note: the hub {base} keeps the preview's summary"), preview.errors
    report = json.loads(out)  # standard output holds the report alone
    assert report["baseline"]["app_file"] == "hub v1"

    from hub.api.client import HubClient

    (kept,) = HubClient(base, TOKEN, ca_file=ca).previews(APP)  # a read token lists them
    assert (kept["app"], kept["site"], kept["candidate_file"]) == (APP, "truck-7", "app_v2.py")
    assert kept["candidate_sha256"] == source_hash(APP_V2.read_text())
    assert (kept["live"]["version"], kept["candidate"]["version"]) == ("hub v1", "app_v2.py")
    assert kept["records"] == len(READINGS)
    assert kept["differing_results"] == 1  # app.py alerts on t7-b's mean, app_v2.py does not
    assert kept["stopped_early"] is True
    assert kept["stop_reason"] == f"{len(READINGS)} records were read (--max-lines)"
    assert kept["duration_s"] == 600.0
    assert kept["started_at"] <= kept["ended_at"] <= kept["received_at"]
    ops = {op["name"]: op for op in kept["operators"]}
    for side in ("live", "candidate"):
        name = report["baseline" if side == "live" else "candidate"]
        figures = {op["name"]: (op["in"], op["out"], op["dead_letters"]) for op in name["operators"]}
        assert {
            n: (o[side]["records_in"], o[side]["records_out"], o[side]["dead_letters"]) for n, o in ops.items()
        } == figures
    assert ops["to_celsius"]["candidate"]["dead_letters"] == 1
    stored = json.loads((state / "previews" / f"{APP}.json").read_text())
    assert stored["previews"] == [kept]


def test_a_preview_the_hub_cannot_take_is_a_warning_not_a_failure(mosquitto: Any, tmp_path: Path) -> None:
    from simulate.broker import free_port

    sites = write_sites(tmp_path, mosquitto.port)
    hub_url = f"http://127.0.0.1:{free_port()}"
    preview = Preview(
        APP_V2, "--site", "truck-7", "--for", "1s", "--sites", sites, "--compare", EXAMPLES / "cold_chain" / "app.py",
        "--hub-url", hub_url, "--token", ADMIN, "--json",
    )  # fmt: skip
    code, out = preview.finish()
    assert code == 0, preview.errors
    assert json.loads(out)["baseline"]["app_file"] == "app.py"
    (warning,) = [line for line in preview.errors if line.startswith("warning:")]
    assert warning.startswith(f"warning: the hub {hub_url} did not keep the preview's summary: cannot reach the hub")


def test_the_dashboard_shows_a_posted_preview_side_by_side(
    browser: Any,  # noqa: F811
    hub: tuple[str, ssl.SSLContext, Path],
    tmp_path: Path,
) -> None:
    import httpx
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)  # deadlines, not timings: a busy machine renders slowly
    base, verify, _ = hub
    counts = {"records_in": 6, "records_out": 6, "dead_letters": 0}
    summary = {
        "candidate_file": "app_v2.py",
        "candidate_sha256": "0123456789ab" + "0" * 52,
        "site": "truck-7",
        "duration_s": 60.0,
        "started_at": 1_700_000_000.0,
        "ended_at": 1_700_000_060.0,
        "records": 6,
        "live": {"version": "hub v1", "dead_letters": 1, "cpu_per_record_s": 0.0002},
        "candidate": {"version": "app_v2.py", "dead_letters": 2, "cpu_per_record_s": 0.004},
        "operators": [
            {"name": "readings", "part": "edge", "live": counts, "candidate": counts},
            {
                "name": "anomaly",
                "part": "hub",
                "live": {**counts, "records_out": 1},
                "candidate": {**counts, "records_out": 0},
            },
        ],
        "differing_results": 1,
        "stopped_early": True,
        "stop_reason": "interrupted (Ctrl-C)",
    }
    page = signed_in(browser, base, TOKEN)
    expect(page.get_by_test_id("dag")).to_be_visible()
    card = page.get_by_test_id("previews")
    expect(card).to_be_hidden()  # no preview yet
    answer = httpx.post(
        f"{base}/apps/{APP}/previews", json=summary, headers={"Authorization": f"Bearer {ADMIN}"}, verify=verify
    )
    assert answer.status_code == 201, answer.text

    expect(card).to_be_visible()  # with the next snapshot, without a reload
    shown = card.get_by_test_id("preview")
    expect(shown).to_have_count(1)
    expect(shown).to_have_attribute("data-site", "truck-7")
    expect(shown).to_have_attribute("data-candidate", "app_v2.py")
    expect(shown).to_have_attribute("data-differing", "1")
    expect(shown.locator("h3")).to_contain_text("truck-7 · ")
    expect(shown.locator("h3")).to_contain_text("app_v2.py (0123456789ab) against hub v1")
    note = shown.get_by_test_id("preview-summary")
    expect(note).to_contain_text("6 records in 60 s of 60 s")
    expect(note).to_contain_text("1 result differs")
    expect(note).to_contain_text("dead letters 1 live, 2 candidate")
    expect(note).to_contain_text("CPU per record 200 µs live, 4 ms candidate")
    expect(note).to_contain_text("stopped early: interrupted (Ctrl-C)")
    rows = shown.get_by_test_id("preview-operator")
    expect(rows).to_have_count(2)
    anomaly = shown.locator('[data-testid=preview-operator][data-operator="anomaly"]')
    expect(anomaly.locator("[data-figure=out-live]")).to_have_text("1")
    expect(anomaly.locator("[data-figure=out-candidate]")).to_have_text("0")
    expect(anomaly).to_have_class("differs")
    expect(shown.locator('[data-testid=preview-operator][data-operator="readings"]')).not_to_have_class("differs")

    # a second preview comes first
    answer = httpx.post(
        f"{base}/apps/{APP}/previews",
        json={**summary, "site": "truck-9", "stopped_early": False, "stop_reason": None},
        headers={"Authorization": f"Bearer {ADMIN}"},
        verify=verify,
    )
    assert answer.status_code == 201, answer.text
    expect(shown).to_have_count(2)
    expect(shown.first).to_have_attribute("data-site", "truck-9")
    expect(shown.first.get_by_test_id("preview-summary")).not_to_contain_text("stopped early")
    assert [p["site"] for p in get_previews(base, verify)["previews"]] == ["truck-9", "truck-7"]
    shot = tmp_path / "previews.png"
    card.screenshot(path=str(shot))
    print(f"previews card screenshot: {shot}")
