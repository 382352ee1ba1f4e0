"""The dashboard's snapshot of a coordinator and site registry, and its routes (no browser)."""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

with warnings.catch_warnings():
    # starlette >= 1.x prefers the httpx2 package and warns when it falls back to httpx
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from fastapi import FastAPI

from hub.api.auth import scope_dependency
from hub.api.dashboard.routes import PAGE_POLICY, asset, dashboard_router, sse_event
from hub.api.dashboard.snapshot import app_view, build_snapshot, hub_view, link_view, site_view
from hub.control.coordinator import Coordinator
from hub.control.planning import load_app
from hub.control.registry import SiteRegistry
from spanedge.app import App
from spanedge.sites import load_sites
from spanedge.tokens import Tokens, TokenScope
from tests.conftest import EXAMPLES

ADMIN = "admin-token-0123456789abcdef0123456789"
READ = "read-token-0123456789abcdef0123456789"
SOURCE = (EXAMPLES / "cold_chain" / "app.py").read_text()
OPERATORS = ["readings", "to_celsius", "plausible", "unit_stats", "local_stats", "anomaly", "fleet_alerts"]


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class KnowsApps(Coordinator):
    """A coordinator that also hands out its loaded apps, which gives the operators' kinds."""

    def app(self, name: str) -> App:
        record = self.record(name)
        return load_app(record.source, record.filename, record.app_name)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def coordinator(clock: Clock) -> Coordinator:
    registry = SiteRegistry(load_sites(EXAMPLES / "cold_chain" / "sites.yaml"), down_after_s=15, clock=clock)
    coordinator = Coordinator(registry, clock=clock)
    coordinator.deploy(SOURCE, "app.py")
    return coordinator


def beat(coordinator: Coordinator, site: str, **fields: Any) -> None:
    payload = {
        "site": site,
        "apps": ["cold-chain"],
        "operators": {},
        "watermark_lag_s": 1.25,
        "outbox": {"records": 12, "bytes": 1200, "sent": 40, "dropped": 0},
        "dlq": 1,
        "late": 3,
        "cpu_percent": 7.5,
        "rss_bytes": 50_000_000,
        "latency": {"cloud": {"rtt_ms": 100.0, "p95_ms": 140.0, "samples": 5}},
        **fields,
    }
    assert coordinator.registry.heartbeat(site, payload)


def rates(rate_in: float, rate_out: float) -> dict[str, float]:
    return {"in": 10, "out": 10, "rate_in": rate_in, "rate_out": rate_out}


def test_the_apps_dag_its_sites_and_rates(coordinator: Coordinator, clock: Clock) -> None:
    # truck-7 runs one app and names its replicas bare; warehouse-north runs two and prefixes them
    beat(coordinator, "truck-7", operators={"to_celsius@truck-7": rates(100, 100), "unit_stats@truck-7": rates(99, 2)})
    beat(
        coordinator,
        "warehouse-north",
        apps=["cold-chain", "other"],
        operators={
            "cold-chain/to_celsius@warehouse-north": rates(400, 400),
            "other/to_celsius@warehouse-north": rates(5000, 5000),
            "to_celsius@warehouse-north": rates(7000, 7000),  # ambiguous with two apps: ignored
        },
    )
    snap = build_snapshot(coordinator)
    (app,) = snap["apps"]
    assert (app["app"], app["version"]) == ("cold-chain", 1)
    ops = {o["name"]: o for o in app["operators"]}
    assert list(ops) == OPERATORS
    assert {r["site"] for r in ops["to_celsius"]["replicas"]} == {"truck-7", "truck-9", "warehouse-north"}
    assert ops["anomaly"]["replicas"] == [{"replica": "anomaly", "site": "cloud"}]
    assert (ops["to_celsius"]["in_rate"], ops["to_celsius"]["out_rate"]) == (500, 500)
    assert (ops["unit_stats"]["in_rate"], ops["unit_stats"]["out_rate"]) == (99, 2)
    assert ops["anomaly"]["in_rate"] is None  # without the engine nobody counts the hub operators
    assert sorted(map(tuple, app["edges"])) == [
        ("anomaly", "fleet_alerts"),
        ("plausible", "unit_stats"),
        ("readings", "to_celsius"),
        ("to_celsius", "plausible"),
        ("unit_stats", "anomaly"),
        ("unit_stats", "local_stats"),
    ]
    # without the loaded app the kinds come from the graph's shape
    kinds = {o["name"]: o["kind"] for o in app["operators"]}
    assert kinds == {
        "readings": "source",
        "to_celsius": "operator",
        "plausible": "operator",
        "unit_stats": "operator",
        "local_stats": "sink",
        "anomaly": "operator",
        "fleet_alerts": "sink",
    }
    # a site that went down stops counting
    clock.now += 20
    ops = {o["name"]: o for o in build_snapshot(coordinator)["apps"][0]["operators"]}
    assert ops["to_celsius"]["in_rate"] is None


def test_hub_operators_rates_come_from_the_engines_counts(coordinator: Coordinator) -> None:
    beat(coordinator, "truck-7", operators={"to_celsius@truck-7": rates(100, 100)})
    operators = {
        "anomaly": {"in": 120, "out": 6, "in_rate": 6.0, "out_rate": 0.25},
        "fleet_alerts": {"in": 6, "out": 6, "in_rate": 0.25, "out_rate": 0.25},
        "unknown": "not figures",
    }
    engine = {"cold-chain": {"version": 1, "queries": {}, "operators": operators}, "other": {"operators": {}}}
    (app,) = build_snapshot(coordinator, lambda: engine)["apps"]
    ops = {o["name"]: o for o in app["operators"]}
    assert (ops["anomaly"]["in_rate"], ops["anomaly"]["out_rate"]) == (6.0, 0.25)
    assert (ops["fleet_alerts"]["in_rate"], ops["fleet_alerts"]["out_rate"]) == (0.25, 0.25)
    assert (ops["to_celsius"]["in_rate"], ops["to_celsius"]["out_rate"]) == (100, 100)  # from the heartbeat
    assert ops["local_stats"]["in_rate"] is None  # at the edge sites, not reported by them
    # an engine without per-operator figures (or without the app) leaves hub operators unknown
    (app,) = build_snapshot(coordinator, lambda: {"cold-chain": {"version": 1, "queries": {}}})["apps"]
    assert {o["name"]: o["in_rate"] for o in app["operators"]}["anomaly"] is None
    view = app_view(coordinator.records()[0], [], hub_figures={"anomaly": {"in_rate": "x", "out_rate": 2}})
    assert [(o["in_rate"], o["out_rate"]) for o in view["operators"] if o["name"] == "anomaly"] == [(None, 2.0)]


def test_kinds_come_from_the_app_when_the_coordinator_has_it(clock: Clock) -> None:
    registry = SiteRegistry(load_sites(EXAMPLES / "cold_chain" / "sites.yaml"), clock=clock)
    coordinator = KnowsApps(registry, clock=clock)
    coordinator.deploy(SOURCE, "app.py")
    kinds = {o["name"]: o["kind"] for o in build_snapshot(coordinator)["apps"][0]["operators"]}
    assert kinds["to_celsius"] == "map"
    assert kinds["plausible"] == "filter"
    assert kinds["unit_stats"] == "window"
    assert kinds["fleet_alerts"] == "sink"


def test_plan_history_with_objective_and_baselines(coordinator: Coordinator, clock: Clock) -> None:
    clock.now += 100
    coordinator.replan("cold-chain", "latency drift on truck-7|cloud")
    history = build_snapshot(coordinator)["apps"][0]["history"]
    assert [(h["version"], h["reason"], h["changed"]) for h in history] == [
        (1, "deployed", True),
        (1, "latency drift on truck-7|cloud; placement unchanged", False),
    ]
    first = history[0]
    assert first["at"] == 1_000.0
    assert first["moved"] == []
    assert first["objective"] == pytest.approx(coordinator.record("cold-chain").plan.totals.objective)
    assert set(first["baselines"]) == {"central", "local-first"}
    assert first["baselines"]["central"]["objective"] > first["objective"]


def test_unchanged_replans_in_a_row_are_one_counted_row(coordinator: Coordinator, clock: Clock) -> None:
    for i in range(4):
        clock.now += 60
        coordinator.replan("cold-chain", f"latency drift {i}")
    history = build_snapshot(coordinator)["apps"][0]["history"]
    assert [(h["version"], h["count"], h["at"], h["until"], h["changed"]) for h in history] == [
        (1, 1, 1_000.0, None, True),
        (1, 4, 1_060.0, 1_240.0, False),
    ]
    assert history[1]["reason"] == "re-planned 4 times, placement unchanged (the last for: latency drift 3)"
    assert history[0]["reason"] == "deployed"


def test_an_infeasible_baseline_is_marked(coordinator: Coordinator) -> None:
    (first,) = build_snapshot(coordinator)["apps"][0]["history"]
    central, local_first = first["baselines"]["central"], first["baselines"]["local-first"]
    # central puts the cold chain's @local operators at the hub, which they may not run at
    assert not central["feasible"]
    assert any("to_celsius@truck-7 at cloud" in v for v in central["violations"])
    assert (local_first["feasible"], local_first["violations"]) == (True, [])


def test_history_shows_recorded_moves_and_each_versions_baselines(coordinator: Coordinator) -> None:
    import dataclasses

    from hub.control.state import HistoryEntry

    record = coordinator.record("cold-chain")
    plan = record.plan
    older = HistoryEntry(0, 900.0, "stored by an older hub", {"objective": 3.0})
    moved = HistoryEntry(
        plan.version,
        950.0,
        "site over its CPU budget",
        {"objective": 1.0},
        moved=[
            {
                "replica": "to_celsius@truck-7",
                "from": "truck-7",
                "to": "warehouse-north",
                "switch_at": 940.0,
                "state_bytes": 3200,
                "handover_s": 14.5,
            },
            {"replica": "stats@truck-9", "from": "truck-9", "to": "truck-7", "keys": "keys [50%, 100%)"},
            {"replica": "w@truck-9", "from": "truck-9", "to": "truck-7", "switch_at": 940.0, "recover_by": 1540.0},
        ],
        baselines={"central": {"objective": 4.0, "wan_bytes_per_s": 10.0, "worst_latency_ms": 80.0}},
    )
    view = app_view(dataclasses.replace(record, history=[older, moved]), [])
    first, second = view["history"]
    assert (first["moved"], first["baselines"]) == ([], {})  # not the current version: nothing to show
    assert second["moved"] == [
        {
            "replica": "to_celsius@truck-7",
            "from": "truck-7",
            "to": "warehouse-north",
            "keys": None,
            "switch_at": 940.0,
            "state_bytes": 3200.0,
            "handover_s": 14.5,
            "at_risk_from": None,
            "recover_by": None,
            "back_at": None,
            "recovered_by": None,
        },
        {
            "replica": "stats@truck-9",
            "from": "truck-9",
            "to": "truck-7",
            "keys": "keys [50%, 100%)",
            "switch_at": None,
            "state_bytes": None,
            "handover_s": None,
            "at_risk_from": None,
            "recover_by": None,
            "back_at": None,
            "recovered_by": None,
        },
        {
            "replica": "w@truck-9",
            "from": "truck-9",
            "to": "truck-7",
            "keys": None,
            "switch_at": 940.0,
            "state_bytes": None,
            "handover_s": None,
            "at_risk_from": None,
            "recover_by": 1540.0,
            "back_at": None,
            "recovered_by": None,
        },
    ]
    assert second["baselines"] == {
        "central": {
            "objective": 4.0,
            "wan_bytes_per_s": 10.0,
            "worst_latency_ms": 80.0,
            "feasible": True,
            "violations": [],
        }
    }


def test_sites_alive_down_and_the_hub_without_an_agent(coordinator: Coordinator, clock: Clock) -> None:
    beat(coordinator, "truck-7")
    clock.now += 5
    beat(coordinator, "truck-9")
    clock.now += 12  # truck-7: 17 s since its heartbeat, past down_after_s
    sites = {s["site"]: s for s in build_snapshot(coordinator)["sites"]}
    assert list(sites) == ["cloud", "truck-7", "truck-9", "warehouse-north"]
    assert (sites["cloud"]["alive"], sites["cloud"]["tier"]) == (None, "hub")
    assert sites["truck-7"]["alive"] is False
    # a site that is down keeps its last figures, dated: they are not live
    assert (sites["truck-7"]["stale_s"], sites["truck-7"]["cpu"]) == (17.0, 7.5)
    assert sites["cloud"]["stale_s"] is None
    assert sites["truck-9"] == {
        "site": "truck-9",
        "tier": "spoke",
        "labels": {},
        "alive": True,
        "last_heartbeat_age_s": 12.0,
        "stale_s": None,
        "cpu": 7.5,
        "rss_bytes": 50_000_000,
        "outbox_records": 12,
        "watermark_lag_s": 1.25,
        "dead_lettered": 1,
        "late": 3,
        "plan_expired": False,
        "connectors_down": [],
    }
    assert sites["warehouse-north"]["alive"] is False
    assert sites["warehouse-north"]["last_heartbeat_age_s"] is None
    # a hub-tier site that does send heartbeats is judged like any other
    assert site_view({"site": "cloud", "tier": "hub", "alive": False, "last_heartbeat_age_s": 30.0})["alive"] is False
    assert site_view({"site": "truck-7", "tier": "spoke", "plan_expired": True})["plan_expired"] is True


def test_a_site_shows_its_connectors_that_are_down(coordinator: Coordinator) -> None:
    connectors = {
        "boiler": {"server": "opc.tcp://plc-1:4840", "up": False, "reconnects": 3, "last_error": "TimeoutError: "},
        "tank": {"server": "modbus://10.0.0.7:502", "up": True, "reconnects": 1, "last_error": "OSError: reset"},
        "sink plant/pump": {"up": False, "reconnects": 2, "last_error": "ConnectionError: refused"},
    }
    beat(coordinator, "truck-7", connectors=connectors)
    (row,) = [r for r in coordinator.registry.status() if r["site"] == "truck-7"]
    assert row["connectors"] == connectors
    sites = {s["site"]: s for s in build_snapshot(coordinator)["sites"]}
    assert sites["truck-7"]["connectors_down"] == [
        {"name": "boiler", "last_error": "TimeoutError: "},
        {"name": "sink plant/pump", "last_error": "ConnectionError: refused"},
    ]
    assert site_view({"site": "x", "connectors": ["not", "a", "mapping"]})["connectors_down"] == []


def test_result_latency_per_sink_at_the_hub_and_at_the_spokes(coordinator: Coordinator, clock: Clock) -> None:
    local = {"local_stats": {"p50_ms": 40.0, "p95_ms": 90.0, "results": 12}}
    beat(coordinator, "truck-7", result_latency={"cold-chain": local, "other": {"x": {"p50_ms": 1.0}}})
    clock.now += 10
    beat(coordinator, "truck-9", result_latency={"cold-chain": local})
    clock.now += 10  # truck-7 is down: its figures are its last heartbeat's, 20 s old
    hub_latency = {"p50_ms": 2100.0, "p95_ms": 2900.0, "results": 6}
    engine = {"cold-chain": {"queries": {"fleet_alerts": {"active": True, "result_latency": hub_latency}}}}
    (app,) = build_snapshot(coordinator, engine_metrics=lambda: engine)["apps"]
    assert app["results"] == [
        {"sink": "fleet_alerts", "site": "cloud", "p50_ms": 2100.0, "p95_ms": 2900.0, "results": 6, "stale_s": None},
        {"sink": "local_stats", "site": "truck-7", "p50_ms": 40.0, "p95_ms": 90.0, "results": 12, "stale_s": 20.0},
        {"sink": "local_stats", "site": "truck-9", "p50_ms": 40.0, "p95_ms": 90.0, "results": 12, "stale_s": None},
    ]
    # a query whose sink wrote nothing in the last minute, and an engine that reports none, show no row
    engine["cold-chain"]["queries"]["fleet_alerts"]["result_latency"] = None
    (app,) = build_snapshot(coordinator, engine_metrics=lambda: engine)["apps"]
    assert [r["site"] for r in app["results"]] == ["truck-7", "truck-9"]


def test_links_measured_and_declared(coordinator: Coordinator, clock: Clock) -> None:
    beat(coordinator, "truck-7")
    clock.now += 2
    links = {(row["src"], row["dst"]): row for row in build_snapshot(coordinator)["links"]}
    assert len(links) == 4 * 3
    assert links["truck-7", "cloud"] == {
        "src": "truck-7",
        "dst": "cloud",
        "measured_ms": 50.0,
        "declared_ms": 80.0,
        "age_s": 2.0,
    }
    assert links["cloud", "truck-7"]["measured_ms"] == 50.0
    assert links["truck-9", "cloud"] == {
        "src": "truck-9",
        "dst": "cloud",
        "measured_ms": None,
        "declared_ms": 70.0,
        "age_s": None,
    }
    assert (
        link_view({"src": "a", "dst": "b", "source": "path", "latency_ms": 9, "declared_ms": 9})["measured_ms"] is None
    )


def test_hub_queries_ingest_lag_and_failing_readers(coordinator: Coordinator) -> None:
    engine = {
        "cold-chain": {
            "version": 1,
            "queries": {
                "fleet_alerts": {
                    "active": True,
                    "batch_ms": 120,
                    "restarts": 2,
                    "input_rows_per_s": 6.5,
                    "error": None,
                },
                "archive": {"active": False, "restarts": 0, "error": "boom"},
            },
        },
        "broken": "not a mapping",
    }
    ingest = {
        "connected": True,
        "records": 40,
        "apps": {
            "cold-chain": {
                "truck-7": {"unit_stats": {"lag_s": 0.5}},
                "truck-9": {"unit_stats": {"lag_s": 2.25}, "other": {"lag_s": None}},
            }
        },
    }
    hub = build_snapshot(coordinator, lambda: engine, lambda: ingest)["hub"]
    assert hub == {
        "queries": [
            {
                "name": "cold-chain/archive",
                "active": False,
                "batch_duration_ms": None,
                "restarts": 0,
                "input_rows_per_s": None,
                "error": "boom",
            },
            {
                "name": "cold-chain/fleet_alerts",
                "active": True,
                "batch_duration_ms": 120.0,
                "restarts": 2,
                "input_rows_per_s": 6.5,
                "error": None,
            },
        ],
        "ingest_lag_s": 2.25,
        "ingest_connected": True,
        "ingest_records": 40,
        "errors": [],
    }
    assert hub_view(None, None, [])["queries"] == []

    def broken() -> dict[str, Any]:
        raise RuntimeError("the engine is restarting")

    snap = build_snapshot(coordinator, engine_metrics=broken)
    assert snap["hub"]["errors"] == ["engine metrics: RuntimeError: the engine is restarting"]
    assert snap["apps"]  # the rest still shows
    assert snap["sites"]
    orjson.dumps(snap)  # JSON-ready


def test_an_unreadable_app_record_leaves_the_others(coordinator: Coordinator) -> None:
    class Partly:
        registry = coordinator.registry

        def records(self) -> list[Any]:
            return [object(), *coordinator.records()]

    snap = build_snapshot(Partly())
    assert [a["app"] for a in snap["apps"]] == ["cold-chain"]
    assert len(snap["hub"]["errors"]) == 1


# -- the routes -------------------------------------------------------------------------------


@pytest.fixture
def client(coordinator: Coordinator) -> Iterator[TestClient]:
    tokens = Tokens([(TokenScope.ADMIN, ADMIN, "test"), (TokenScope.READ, READ, "test")])
    api = FastAPI()
    api.include_router(
        dashboard_router(
            lambda: build_snapshot(coordinator),
            scope_dependency(tokens, TokenScope.READ),
            interval_s=0.05,
            max_stream_s=0.12,
        )
    )
    with TestClient(api) as c:
        yield c


def events(text: str) -> list[tuple[str, Any]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], orjson.loads(lines["data"])))
    return out


def test_the_page_is_public_and_loads_only_its_own_files(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == PAGE_POLICY
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert sorted(urls) == ["/dashboard/app.js", "/dashboard/style.css", "/docs", "data:,"]
    for url, kind in (("/dashboard/app.js", "text/javascript"), ("/dashboard/style.css", "text/css")):
        response = client.get(url)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(kind)
        assert response.content == asset(url.rsplit("/", 1)[1])
    assert "http" not in asset("app.js").decode().replace("http://www.w3.org/2000/svg", "")
    assert "localStorage" not in asset("app.js").decode()


def test_events_need_a_token(client: TestClient) -> None:
    assert client.get("/dashboard/events").status_code == 401
    assert client.get("/dashboard/events", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get(f"/dashboard/events?token={READ}").status_code == 401  # never in the URL


def test_events_stream_snapshots_then_end(client: TestClient) -> None:
    started = time.monotonic()
    response = client.get("/dashboard/events", headers={"Authorization": f"Bearer {READ}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-store"
    got = events(response.text)
    assert len(got) >= 2
    assert {name for name, _ in got} == {"snapshot"}
    assert got[0][1]["apps"][0]["app"] == "cold-chain"
    assert time.monotonic() - started < 5


def test_a_failing_snapshot_is_a_problem_event_and_the_stream_goes_on() -> None:
    tokens = Tokens([(TokenScope.ADMIN, ADMIN, "test")])
    calls = []

    def flaky() -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("registry locked")
        return {"apps": []}

    api = FastAPI()
    api.include_router(
        dashboard_router(flaky, scope_dependency(tokens, TokenScope.READ), interval_s=0.01, max_stream_s=0.05)
    )
    with TestClient(api) as c:
        got = events(c.get("/dashboard/events", headers={"Authorization": f"Bearer {ADMIN}"}).text)
    assert got[0] == ("problem", {"detail": "RuntimeError: registry locked"})
    assert got[1] == ("snapshot", {"apps": []})


def test_sse_event_is_one_line_of_json() -> None:
    assert sse_event({"a": "x\ny"}) == b'event: snapshot\ndata: {"a":"x\\ny"}\n\n'


def test_each_app_carries_its_newest_previews(coordinator: Coordinator) -> None:
    from hub.api.dashboard.snapshot import PREVIEWS_SHOWN
    from hub.api.previews.store import PreviewStore

    store = PreviewStore(None)
    for n in range(PREVIEWS_SHOWN + 2):
        store.add("cold-chain", {"site": "truck-7", "records": n})
    store.add("elsewhere", {"site": "truck-9", "records": 99})
    (app,) = build_snapshot(coordinator, previews=store)["apps"]
    assert [p["records"] for p in app["previews"]] == list(range(PREVIEWS_SHOWN + 1, 1, -1))  # newest first
    assert build_snapshot(coordinator)["apps"][0]["previews"] == []
