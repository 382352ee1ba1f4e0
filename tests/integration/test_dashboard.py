"""The dashboard in a real browser: the hub's own REST app (``hub.api.app.create_app``) under uvicorn over HTTPS, headless Chromium.

The page reads a live control plane: a real coordinator and site registry behind the
hub's API, the cold-chain example deployed through ``POST /apps`` and placed with the
ILP, and heartbeats arriving from a thread until truck-9 stops sending them. Nothing
on the page may come from the network.
"""

from __future__ import annotations

import math
import re
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import orjson
import pytest

from tests.conftest import EXAMPLES, missing_part
from tests.polling import wait_for

TOKEN = "dashboard-read-token-0123456789abcdef0123"
ADMIN = "dashboard-admin-token-0123456789abcdef012"
WRONG = "dashboard-wrong-token-0123456789abcdef012"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOWN_AFTER_S = 3.0
"""truck-9 stops sending heartbeats this long after the heartbeats start."""
BEAT_EVERY_S = 0.25
"""Seconds between two rounds of heartbeats."""


class LiveControlPlane:
    """The hub's coordinator over the cold-chain sites, and the heartbeats of those sites as time passes."""

    def __init__(self) -> None:
        from hub.control.coordinator import Coordinator
        from hub.control.registry import SiteRegistry
        from spanedge.sites import load_sites

        self.sites = load_sites(EXAMPLES / "cold_chain" / "sites.yaml")
        self.registry = SiteRegistry(self.sites, down_after_s=1.5)
        self.coordinator = Coordinator(self.registry)
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._beats: threading.Thread | None = None

    @property
    def plan(self) -> Any:
        return self.coordinator.record("cold-chain").plan

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def beat(self) -> None:
        """Every spoke sends a heartbeat, but truck-9 only for the first seconds."""
        t = self.elapsed()
        plan = self.plan
        for site in self.sites.spokes:
            name = site.name
            if name == "truck-9" and t > DOWN_AFTER_S:
                continue
            wave = 1 + 0.2 * math.sin(t + len(name))
            readings = (400.0 if name == "warehouse-north" else 100.0) * wave
            rates = {  # records/s in and out per operator: windows emit 20 units every 10 s
                "readings": (readings, readings),
                "to_celsius": (readings, readings),
                "plausible": (readings, readings * 0.999),
                "unit_stats": (readings * 0.999, 2.0),
                "local_stats": (2.0, 2.0),
            }
            operators = {}
            for a in plan.at(name):
                rate_in, rate_out = rates[a.operator]
                operators[a.replica] = {
                    "in": int(t * rate_in),
                    "out": int(t * rate_out),
                    "rate_in": round(rate_in, 1),
                    "rate_out": round(rate_out, 1),
                }
            self.registry.heartbeat(
                name,
                {
                    "site": name,
                    "apps": ["cold-chain"],
                    "operators": operators,
                    "watermark_lag_s": round(0.8 + 0.3 * wave, 3),
                    "outbox": {"records": int(40 * wave), "bytes": int(4400 * wave), "sent": int(t * 6), "dropped": 0},
                    "dlq": 2 if name == "truck-7" else 0,
                    "late": int(t) // 2,
                    "overload_dropped": 0,
                    "cpu_percent": round(12 * wave, 1),
                    "rss_bytes": 58_000_000 + int(t * 1000),
                    "latency": {"cloud": {"rtt_ms": 150 * wave, "p95_ms": 190 * wave, "samples": 10}},
                    "clock_offset_ms": 1.5,
                    "result_latency": {"cold-chain": {"local_stats": {"p50_ms": 35.0, "p95_ms": 80.0, "results": 12}}},
                },
            )

    def start_heartbeats(self) -> None:
        """Send a round of heartbeats now and then every :data:`BEAT_EVERY_S` from a thread."""
        self.started = time.monotonic()
        self.beat()

        def run() -> None:
            while not self._stop.wait(BEAT_EVERY_S):
                self.beat()

        self._beats = threading.Thread(target=run, name="dashboard-heartbeats", daemon=True)
        self._beats.start()

    def stop(self) -> None:
        self._stop.set()
        if self._beats is not None:
            self._beats.join(timeout=5)

    def engine_metrics(self) -> dict[str, Any]:
        t = self.elapsed()
        query = {
            "active": True,
            "batch_ms": 180 + int(40 * math.sin(t)),
            "input_rows_per_s": 6.2,
            "restarts": 0,
            "result_latency": {"p50_ms": 2100.0, "p95_ms": 2900.0, "results": 30},
        }
        alerts = round(0.5 + 0.2 * math.sin(t), 2)  # what the queries count on the hub's operators
        operators = {
            "anomaly": {"in": int(t * 6), "out": int(t * alerts), "in_rate": 6.2, "out_rate": alerts},
            "fleet_alerts": {"in": int(t * alerts), "out": int(t * alerts), "in_rate": alerts, "out_rate": alerts},
        }
        return {
            "cold-chain": {"version": self.plan.version, "queries": {"fleet_alerts": query}, "operators": operators}
        }

    def ingest_stats(self) -> dict[str, Any]:
        t = self.elapsed()
        streams = {"unit_stats": {"records": int(t * 6), "duplicates": 0, "lag_s": 0.35 + 0.1 * math.sin(t)}}
        return {"connected": True, "records": int(t * 6), "apps": {"cold-chain": {"truck-7": streams}}}

    def api(self) -> Any:
        """The hub's REST app over this control plane, with short dashboard streams.

        Streams end after 3 s, so the test also sees the page reconnect without losing a beat.
        """
        from hub.api.app import create_app
        from spanedge.tokens import Tokens, TokenScope

        tokens = Tokens([(TokenScope.ADMIN, ADMIN, "test"), (TokenScope.READ, TOKEN, "test")])
        return create_app(
            self.coordinator,
            tokens,
            ingest_stats=self.ingest_stats,
            engine_metrics=self.engine_metrics,
            dashboard_stream_s=3,
        )


@contextmanager
def serving(app: Any, state_dir: Path | None = None) -> Iterator[tuple[str, ssl.SSLContext]]:
    """Serve ``app`` over HTTPS with uvicorn on a free port in a thread, as the hub does.

    The certificate comes from a CA of its own (in ``state_dir``, else in a temporary directory), made and
    issued by the hub's code (:mod:`hub.api.tls`); yields the base URL and a TLS context that trusts that CA.
    """
    import uvicorn

    from hub.api.tls import issued_tls

    with tempfile.TemporaryDirectory(prefix="dashboard-tls-") as state:
        tls = issued_tls(state_dir or Path(state), "127.0.0.1")
        assert tls.ca_file is not None
        verify = ssl.create_default_context(cafile=tls.ca_file)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=2,
            access_log=False,
            ssl_certfile=str(tls.cert_file),
            ssl_keyfile=str(tls.key_file),
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="dashboard-uvicorn", daemon=True)
        thread.start()
        try:
            wait_for(lambda: server.started, timeout=15, what="uvicorn to start")
            yield f"https://127.0.0.1:{port}", verify
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()


def page_context(browser: Any, **options: Any) -> Any:
    """A browser context for the HTTPS dashboard.

    It ignores certificate errors, in this context only: Chromium on Linux takes a CA to trust only from the
    user's NSS database (written with NSS's certutil, which this machine lacks) or from machine-wide policy,
    and Playwright offers no option to give it one. The test's own HTTP clients verify the certificate.
    """
    return browser.new_context(ignore_https_errors=True, **options)


def signed_in(browser: Any, base: str, token: str) -> Any:
    """A page of the dashboard at ``base`` in a wide window, signed in with ``token``."""
    page = page_context(browser, viewport={"width": 1440, "height": 1000}).new_page()
    page.goto(f"{base}/")
    page.get_by_test_id("token-input").fill(token)
    page.get_by_test_id("sign-in").click()
    return page


@contextmanager
def stopping(hub: LiveControlPlane) -> Iterator[LiveControlPlane]:
    """Stop ``hub``'s heartbeats when the block ends."""
    try:
        yield hub
    finally:
        hub.stop()


def deploy(base: str, verify: ssl.SSLContext, **options: Any) -> dict[str, Any]:
    """Deploy the cold-chain example through the hub's REST API with the admin token."""
    import httpx

    source = (EXAMPLES / "cold_chain" / "app.py").read_text()
    answer = httpx.post(
        f"{base}/apps",
        json={"source": source, "filename": "app.py", **options},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=60,
        verify=verify,
    )
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


@pytest.fixture(scope="module")
def hub_parts() -> None:
    for module in ("fastapi", "uvicorn", "pulp", "fastapi_offline"):
        try:
            __import__(module)
        except ImportError:
            missing_part(f"{module} is not installed: pip install 'spanedge[hub]'")


@pytest.fixture(scope="module")
def browser(hub_parts: None) -> Iterator[Any]:
    """Headless Debian Chromium under Playwright (no browser download: Playwright drives the system one)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_part("playwright is not installed: pip install playwright (it drives Debian's chromium)")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        missing_part("chromium is not installed: apt-get install -y chromium")
    with sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def test_dashboard_shows_the_live_system(browser: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)  # deadlines, not timings: a busy machine renders slowly

    hub = LiveControlPlane()
    with serving(hub.api()) as (base, verify), stopping(hub):
        deployed = deploy(base, verify)
        assert deployed["version"] == 1
        hub.start_heartbeats()
        context = page_context(browser, viewport={"width": 1440, "height": 1000})
        page = context.new_page()
        requests: list[Any] = []
        page.on("request", lambda request: requests.append(request))
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
        page.goto(f"{base}/")

        # a wrong token sends us back to the login form with the reason
        expect(page.get_by_test_id("login")).to_be_visible()
        page.get_by_test_id("token-input").fill(WRONG)
        page.get_by_test_id("sign-in").click()
        expect(page.get_by_test_id("login-error")).to_contain_text("refused")

        page.get_by_test_id("token-input").fill(TOKEN)
        page.get_by_test_id("sign-in").click()
        expect(page.get_by_test_id("login")).to_be_hidden()

        # every operator of the plan, at the sites the plan puts its replicas
        expected: dict[str, set[str]] = {}
        for a in hub.plan.assignments:
            expected.setdefault(a.operator, set()).add(a.site)
        nodes = page.get_by_test_id("operator")
        expect(nodes).to_have_count(len(expected), timeout=10_000)
        shown = {n.get_attribute("data-operator"): set(n.get_attribute("data-site").split()) for n in nodes.all()}
        assert shown == expected
        assert expected["anomaly"] == {"cloud"}
        assert expected["to_celsius"] == {"truck-7", "truck-9", "warehouse-north"}
        assert page.get_by_test_id("edge").count() == 6

        # the numbers move: the update counter and an operator's rates
        counter = page.get_by_test_id("last-update")
        first = int(counter.get_attribute("data-count"))
        rates = page.locator('[data-testid=operator][data-operator="to_celsius"] [data-testid=operator-rate]')
        before = rates.text_content()
        assert re.fullmatch(r"in [\d,.]+/s · out [\d,.]+/s", before or ""), before
        expect(counter).not_to_have_attribute("data-count", str(first))
        wait_for(lambda: rates.text_content() != before, timeout=30, what="the rates of to_celsius to change")
        # an operator at the hub shows what the Spark queries count
        at_hub = page.locator('[data-testid=operator][data-operator="anomaly"] [data-testid=operator-rate]')
        expect(at_hub).to_have_text(re.compile(r"in 6\.2/s · out [\d,.]+/s"))

        # truck-9 stops sending heartbeats and turns down; the others stay up, the hub has no agent
        truck9 = page.locator('[data-testid=site-row][data-site="truck-9"]')
        expect(truck9).to_have_attribute("data-state", "down", timeout=15_000)
        expect(truck9.get_by_test_id("site-state")).to_have_text("down")
        for name in ("truck-7", "warehouse-north"):
            expect(page.locator(f'[data-testid=site-row][data-site="{name}"]')).to_have_attribute("data-state", "up")
        expect(page.locator('[data-testid=site-row][data-site="cloud"]')).to_have_attribute("data-state", "none")
        # its CPU, RSS and other figures are its last heartbeat's: greyed and dated, not shown as live
        expect(truck9.get_by_test_id("site-stale")).to_have_text(re.compile(r"^stale, [\d.]+ s old$"))
        stale_figures = truck9.get_by_test_id("site-figure")
        expect(stale_figures).to_have_count(6)
        for cell in stale_figures.all():
            expect(cell).to_have_attribute("data-stale", "true")
            expect(cell).to_have_attribute("title", re.compile(r"^as of [\d.]+ s ago, the site's last heartbeat"))
        expect(stale_figures.first).to_have_text(re.compile(r"^[\d.]+ %$"))  # still there, for what it was
        live_cpu = page.locator('[data-testid=site-row][data-site="truck-7"] [data-testid=site-figure]').first
        expect(live_cpu).to_have_attribute("data-stale", "false")
        assert page.locator('[data-testid=site-row][data-site="truck-7"] [data-testid=site-stale]').count() == 0
        grey, ink = (c.evaluate("e => getComputedStyle(e).color") for c in (stale_figures.first, live_cpu))
        assert grey != ink, "a stale figure is drawn greyed"

        # result latency per sink: the hub's from its queries, the spokes' from their heartbeats
        results = page.get_by_test_id("latency-row")
        sinks_at = {(a.operator, a.site) for a in hub.plan.assignments if a.operator in ("fleet_alerts", "local_stats")}
        expect(results).to_have_count(len(sinks_at))
        hub_sink = page.locator('[data-testid=latency-row][data-sink="fleet_alerts"][data-site="cloud"]')
        expect(hub_sink.get_by_test_id("latency-p50")).to_have_text("2,100 ms")
        expect(hub_sink.get_by_test_id("latency-p95")).to_have_text("2,900 ms")
        expect(hub_sink.get_by_test_id("latency-age")).to_have_text("live")
        live_local = page.locator('[data-testid=latency-row][data-sink="local_stats"][data-site="truck-7"]')
        expect(live_local.get_by_test_id("latency-p95")).to_have_text("80 ms")
        expect(live_local).to_have_attribute("data-stale", "false")
        stale_local = page.locator('[data-testid=latency-row][data-sink="local_stats"][data-site="truck-9"]')
        expect(stale_local).to_have_attribute("data-stale", "true")
        expect(stale_local.get_by_test_id("latency-age")).to_have_text(re.compile(r"^stale, [\d.]+ s old$"))
        expect(stale_local.get_by_test_id("latency-p50")).to_have_text("35 ms")

        # links, plan history and the hub's queries
        link = page.locator('[data-testid=link-cell][data-src="truck-7"][data-dst="cloud"]')
        expect(link).to_have_attribute("data-source", "measured")
        expect(page.locator('[data-testid=link-cell][data-src="truck-7"][data-dst="truck-9"]')).to_have_attribute(
            "data-source", "declared"
        )
        history = page.get_by_test_id("history-row")
        expect(history).to_have_count(1)
        expect(history).to_contain_text("deployed")
        expect(history.locator("td.baselines")).to_contain_text("central")
        expect(history.locator("td.baselines")).to_contain_text("local-first")
        # central puts the @local operators at the hub: infeasible, marked, and no ratio against it
        central = history.locator('[data-testid=baseline][data-baseline="central"]')
        expect(central).to_have_attribute("data-feasible", "false")
        expect(central).to_have_text(re.compile(r"^central [\d.]+ \(infeasible\)$"))
        expect(central).to_have_attribute("title", re.compile(r"to_celsius@truck-7 at cloud"))
        local_first = history.locator('[data-testid=baseline][data-baseline="local-first"]')
        expect(local_first).to_have_attribute("data-feasible", "true")
        expect(local_first).to_have_text(re.compile(r"^local-first [\d.]+ \([\d.]+×\)$"))
        expect(page.locator('[data-testid=query-row][data-query="cold-chain/fleet_alerts"]')).to_contain_text("active")

        # the streams ended and were reopened (max_stream_s=3), and the page went on counting
        def streams() -> list[Any]:
            return [r for r in requests if r.url.endswith("/dashboard/events")]

        deadline = time.monotonic() + 60  # the page's events reach this thread only inside Playwright calls
        while len(streams()) < 3 and time.monotonic() < deadline:
            page.wait_for_timeout(250)
        events = streams()
        assert len(events) >= 3, [r.url for r in requests]
        assert int(counter.get_attribute("data-count")) > first + 2

        # the token only ever travels in the Authorization header; nothing comes from elsewhere
        assert all(TOKEN not in r.url and WRONG not in r.url for r in requests)
        assert events[-1].headers.get("authorization") == f"Bearer {TOKEN}"
        assert all(r.url.startswith(base) or r.url.startswith("data:") for r in requests), [r.url for r in requests]

        # a redeploy through the API appears in the plan history without a reload, newest first
        deploy(base, verify, weights={"traffic": 1.0, "latency": 2.0})
        expect(history).to_have_count(2)
        expect(history.first).to_have_attribute("data-version", "2")
        expect(history.first).to_contain_text("redeployed")
        expect(history.first.locator("td.moved")).to_have_text("–")

        # re-plans that change nothing fold into one row that counts them
        for _ in range(3):
            hub.coordinator.replan("cold-chain", "latency drift")
        expect(history).to_have_count(3)
        expect(history.first).to_have_attribute("data-count", "3")
        expect(history.first).to_have_class(re.compile("unchanged"))
        expect(history.first.locator("td.reason")).to_have_text(
            "re-planned 3 times, placement unchanged (the last for: latency drift)"
        )

        assert errors == []  # no script error, nothing the page's CSP had to block

        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"dashboard screenshot: {shot}")
        context.close()


def test_dashboard_opened_on_a_standby_shows_the_leaders_system(browser: Any, tmp_path: Path) -> None:
    """A standby hub sends the page, its files and its event stream on to the leader; the page says so."""
    from playwright.sync_api import expect

    from hub.api.forwarding import Forwarder, leader_ca
    from hub.api.standby import standby_app

    expect.set_options(timeout=20_000)
    hub = LiveControlPlane()
    with serving(hub.api(), tmp_path) as (leader, verify), stopping(hub):
        deploy(leader, verify)
        hub.start_heartbeats()
        role = {"role": "standby", "leader": "hub-a", "epoch": 1, "leader_url": leader}
        standby = standby_app(lambda: role, forwarder=Forwarder(leader_ca(None, tmp_path)))
        with serving(standby) as (base, _):
            page = signed_in(browser, base, TOKEN)
            requests: list[Any] = []
            page.on("request", lambda request: requests.append(request))
            expect(page.get_by_test_id("via")).to_have_text("via a standby, from the leader hub-a")
            expect(page.get_by_test_id("operator")).to_have_count(len({a.operator for a in hub.plan.assignments}))
            for name in ("truck-7", "warehouse-north"):
                row = page.locator(f'[data-testid=site-row][data-site="{name}"]')
                expect(row).to_have_attribute("data-state", "up")
            # the leader ends each stream after 3 s: the page reopens it through the standby and counts on
            counter = page.get_by_test_id("last-update")
            first = int(counter.get_attribute("data-count") or 0)

            def reopened() -> bool:
                page.wait_for_timeout(250)  # the page's events reach this thread only inside Playwright calls
                return len([r for r in requests if r.url.endswith("/dashboard/events")]) >= 2

            wait_for(reopened, timeout=60, what="the page to reopen its stream through the standby")
            assert int(counter.get_attribute("data-count") or 0) > first
            assert all(r.url.startswith(base) for r in requests), [r.url for r in requests]
            page.context.close()


FARM_GRACE_S = 3.0
"""The smart farm's sites count as gone after this many seconds of silence in :func:`test_dashboard_shows_a_move_away_from_a_site_gone_for_good`."""


def farm_control_plane() -> tuple[Any, Any]:
    """A coordinator over the smart farm's sites with a short grace period, and its REST app."""
    from hub.api.app import create_app
    from hub.control.coordinator import Coordinator
    from hub.control.registry import SiteRegistry
    from hub.control.site_health import HealthPolicy
    from spanedge.sites import load_sites
    from spanedge.tokens import Tokens, TokenScope

    sites = load_sites(EXAMPLES / "smart_farm" / "sites.yaml")
    coordinator = Coordinator(
        SiteRegistry(sites, down_after_s=1.5),
        health=HealthPolicy(site_grace_s=FARM_GRACE_S),
        handover_delay_s=1.0,
    )
    tokens = Tokens([(TokenScope.ADMIN, ADMIN, "test"), (TokenScope.READ, TOKEN, "test")])
    return coordinator, create_app(coordinator, tokens)


def test_dashboard_shows_a_move_away_from_a_site_gone_for_good(browser: Any) -> None:
    """The barn, host of field-east's offloaded windows, falls silent: the move and who recomputes its part show."""
    import httpx
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    coordinator, api = farm_control_plane()
    spokes = ("barn", "shed", "field-east", "field-west")
    barn_frontier: list[float] = []
    stop, barn_back = threading.Event(), threading.Event()

    def beats() -> None:
        started = time.monotonic()
        while not stop.wait(BEAT_EVERY_S):
            for site in spokes:
                if site == "barn" and time.monotonic() - started > 1.0 and not barn_back.is_set():
                    continue  # the barn dies after its first heartbeats, gone until the test brings it back
                complete = round(time.time() - 2.0, 3)
                if site == "barn":
                    barn_frontier.append(complete)
                beat = {"site": site, "apps": ["smart-farm"], "cpu_percent": 5.0, "complete": {"smart-farm": complete}}
                coordinator.heartbeat(site, orjson.dumps(beat))
            coordinator.check()

    with serving(api) as (base, verify):
        answer = httpx.post(
            f"{base}/apps",
            json={"source": (EXAMPLES / "smart_farm" / "app.py").read_text(), "filename": "app.py"},
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=60,
            verify=verify,
        )
        assert answer.status_code == 201, answer.text
        assert coordinator.record("smart-farm").plan.site_of("probe_means@field-east") == "barn"
        thread = threading.Thread(target=beats, name="farm-heartbeats", daemon=True)
        thread.start()
        context = page_context(browser, viewport={"width": 1440, "height": 1000})
        try:
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{base}/")
            page.get_by_test_id("token-input").fill(TOKEN)
            page.get_by_test_id("sign-in").click()

            history = page.get_by_test_id("history-row")
            expect(history).to_have_count(2, timeout=60_000)  # the deploy, then the re-plan without the barn
            latest = history.first
            expect(latest.locator("td.reason")).to_contain_text("site barn silent for")
            moved = latest.locator('[data-testid=moved][data-replica="probe_means@field-east"]')
            expect(moved).to_have_attribute("data-from", "barn")
            expect(moved).to_have_class(re.compile(r"\brecovered\b"))
            expect(moved).to_contain_text("barn gone: results from ")
            expect(moved).to_contain_text(" to the switch recomputed by field-east from its spool")
            color = moved.evaluate("e => getComputedStyle(e).color")
            plain = latest.locator("td.reason").evaluate("e => getComputedStyle(e).color")
            assert color != plain, "a recovered move is drawn in its own colour"
            # the barn comes back: the move still says field-east recomputed its part
            barn_back.set()
            gone = history.filter(has_text="site barn silent for")
            back = gone.locator('[data-testid=moved][data-replica="probe_means@field-east"]')
            expect(back).to_contain_text("recomputed by field-east")
            assert errors == []
        finally:
            context.close()  # its event stream too, before the server stops
            stop.set()
            thread.join(timeout=10)

    (gone_entry,) = [h for h in coordinator.record("smart-farm").history if "site barn silent for" in h.reason]
    (entry,) = [m for m in gone_entry.moved if m["replica"] == "probe_means@field-east"]
    assert entry["to"] not in ("barn", "cloud")
    assert entry["at_risk_from"] in barn_frontier  # the last frontier the barn announced
    assert entry["recovered_by"] == "field-east"
    (handover,) = [
        h
        for h in coordinator.record("smart-farm").plan.handovers
        if h.source == "barn" and h.replica == entry["replica"]
    ]
    assert (handover.recover_from, handover.recoverer) == (entry["at_risk_from"], "field-east")


def test_docs_work_without_network(hub_parts: None) -> None:
    import httpx

    with (
        serving(LiveControlPlane().api()) as (base, verify),
        httpx.Client(base_url=base, timeout=10, verify=verify) as client,
    ):
        page = client.get("/docs")
        assert page.status_code == 200
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text) + re.findall(r"url: '([^']+)'", page.text)
        assert urls, page.text
        for url in urls:
            assert url.startswith("/"), f"/docs loads {url} from elsewhere"
            assert not url.startswith("//"), f"/docs loads {url} from elsewhere"
            assert client.get(url).status_code == 200, url
        assert "http://" not in page.text
        assert "https://" not in page.text


def test_docs_render_in_a_browser_offline(browser: Any) -> None:
    from playwright.sync_api import expect

    with serving(LiveControlPlane().api()) as (base, _):
        context = page_context(browser)
        elsewhere: list[str] = []

        def local_only(route: Any) -> None:
            if route.request.url.startswith(base):
                route.continue_()
            else:
                elsewhere.append(route.request.url)
                route.abort()

        context.route("**/*", local_only)
        page = context.new_page()
        page.goto(urljoin(base, "/docs"))
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("SpanEdge hub", timeout=10_000)
        expect(page.locator(".opblock-summary-path").first).to_be_visible()
        assert "/dashboard/events" in page.content()
        assert elsewhere == []
        context.close()
