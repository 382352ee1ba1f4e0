"""The hub's REST API over a coordinator with a fake planner, publisher and engine."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

with warnings.catch_warnings():
    # starlette >= 1.x prefers the httpx2 package and warns when it falls back to httpx
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from hub.api.app import create_app
from hub.control.coordinator import Coordinator
from hub.control.distribution import PlanDistributor
from hub.control.registry import SiteRegistry
from hub.control.state import StateStore
from spanedge.app import App
from spanedge.cli.status import render_status
from spanedge.errors import InfeasiblePlacement, InvalidDataflow, MissingExtra, SpanEdgeError
from spanedge.loader import load_app_source
from spanedge.operators import Kind
from spanedge.placement_settings import MAX_SLO_MS, MAX_WEIGHT, WEIGHTS
from spanedge.plan import Assignment, Plan, SolverInfo, Totals
from spanedge.sites import Sites, parse_sites
from spanedge.tokens import Tokens, TokenScope, load_tokens
from tests.keys import KEY, read_plan

TOKEN = "admin-token-0123456789abcdef0123456789"
READ_TOKEN = "read-token-0123456789abcdef0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883", cpu: 4}
  a:
    tier: spoke
    broker: "mqtt://127.0.0.1:1883"
    streams: {readings: {topic: "s/a/+", rate: 10}}
links:
  - {between: [a, cloud], latency_ms: 40}
"""

APP = """
from spanedge import App, global_, sinks

@global_
def total(r):
    return r

app = App("demo")
app.source("readings").map(lambda r: r, name="parse").map(total).sink(sinks.console(), name="out")
"""


def planner(
    app: App,
    sites: Sites,
    *,
    latency_rows: list[dict[str, Any]],
    weights: Any,
    slo_ms: float | None,
    version: int,
    previous: Plan | None = None,
    state_bytes: Any = None,
    key_spread: Any = None,
) -> Plan:
    if slo_ms is not None and slo_ms < 1:
        msg = f"app '{app.name}': no placement meets the latency SLO of {slo_ms} ms"
        raise InfeasiblePlacement(msg)
    assignments = []
    for op in app.operators.values():
        if op.kind is Kind.SOURCE:
            assignments.append(Assignment(f"{op.name}@a", op.name, "a", "a", "source site"))
        elif op.name == "parse":
            assignments.append(Assignment("parse@a", op.name, "a", "a", "cuts WAN traffic"))
        else:
            assignments.append(Assignment(op.name, op.name, None, "cloud", "@global_"))
    return Plan(
        app=app.name,
        version=version,
        hub="cloud",
        assignments=tuple(assignments),
        flows=(),
        totals=Totals(wan_bytes_per_s=500, worst_latency_ms=40, mean_latency_ms=40, objective=1.0),
        solver=SolverInfo("fake", "optimal", 0.01),
        baselines={"central": Totals(1000, 40, 40, 2.0), "local-first": Totals(500, 60, 50, 1.5)},
        slo_ms=slo_ms,
    )


class Recorder:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self.engine: list[str] = []
        self.reject: str | None = None
        self.missing: MissingExtra | None = None

    def publish_all(self, messages: Sequence[tuple[str, bytes]]) -> list[bool]:
        self.messages.extend(messages)
        return [True] * len(messages)

    def deploy(self, app: App, plan: Plan) -> None:
        if self.reject:
            raise InvalidDataflow(self.reject)
        if self.missing:
            raise self.missing
        self.engine.append(f"deploy {app.name} v{plan.version}")

    def undeploy(self, name: str) -> None:
        self.engine.append(f"undeploy {name}")

    def unsettled(self, name: str, proposed: Plan | None = None) -> list[str]:
        return []

    def metrics(self) -> dict[str, Any]:
        query = {
            "active": True,
            "batch_id": 7,
            "batch_ms": 120.5,
            "input_rows_per_s": 33.0,
            "sink_rows": 12,
            "restarts": 1,
        }
        return {"demo": {"version": 1, "queries": {"out": query}}}


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def coordinator(recorder: Recorder, tmp_path: Path) -> Coordinator:
    registry = SiteRegistry(parse_sites(SITES))
    store = StateStore(tmp_path)
    return Coordinator(
        registry,
        planner=planner,
        distributor=PlanDistributor(recorder, KEY, store),
        engine=recorder,
        store=store,
    )


@pytest.fixture
def client(coordinator: Coordinator, recorder: Recorder) -> Iterator[TestClient]:
    ingest = {
        "connected": True,
        "messages": 4,
        "records": 40,
        "duplicates": 2,
        "apps": {"demo": {"a": {"readings": {"records": 40, "duplicates": 2, "lag_s": 0.25}}}},
    }
    tokens = Tokens([(TokenScope.ADMIN, TOKEN, "test"), (TokenScope.READ, READ_TOKEN, "test")])
    api = create_app(coordinator, tokens, ingest_stats=lambda: ingest, engine_metrics=recorder.metrics)
    with TestClient(api) as c:
        yield c


def deploy(client: TestClient, source: str = APP, **extra: Any) -> Any:
    return client.post("/apps", json={"source": source, "filename": "app.py", **extra}, headers=AUTH)


def test_healthz_and_docs_need_no_token(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "apps": 0}
    assert client.get("/docs").status_code == 200
    assert "/apps/{name}/placement" in client.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/apps"),
        ("POST", "/apps"),
        ("GET", "/apps/demo"),
        ("GET", "/apps/demo/placement"),
        ("DELETE", "/apps/demo"),
        ("GET", "/sites"),
        ("GET", "/latency"),
        ("GET", "/metrics"),
    ],
)
def test_every_other_route_needs_the_token(client: TestClient, method: str, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        answer = client.request(method, path, headers=headers, json={"source": APP})
        assert answer.status_code == 401, (headers, answer.text)
        assert answer.headers["www-authenticate"] == "Bearer"
    assert client.request("GET", "/sites", headers=AUTH).status_code == 200


def test_deploy_list_get_placement_delete(client: TestClient, recorder: Recorder) -> None:
    answer = deploy(client, slo_ms=200)
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["app"] == "demo"
    assert body["version"] == 1
    assert body["distribution"] == {"a": "published", "cloud": "published"}
    assert Plan.from_dict(body["plan"]).site_of("total") == "cloud"
    assert recorder.engine == ["deploy demo v1"]
    payload = read_plan(recorder.messages[0][1], site="a")
    assert payload["apps"][0]["source"] == APP

    apps = client.get("/apps", headers=AUTH).json()["apps"]
    assert [(a["app"], a["version"], a["sites"], a["replicas"]) for a in apps] == [("demo", 1, ["a", "cloud"], 4)]
    assert apps[0]["hub_replicas"] == ["total", "out"]

    one = client.get("/apps/demo", headers=AUTH).json()
    assert one["slo_ms"] == 200
    assert one["plan"]["app_source"] == APP

    placement = client.get("/apps/demo/placement", headers=AUTH).json()
    assert set(placement) >= {"app", "version", "replicas", "totals", "baselines", "history", "solver"}
    assert {
        "replica": "parse@a",
        "operator": "parse",
        "group": "a",
        "site": "a",
        "reason": "cuts WAN traffic",
        "since": 0,
    } in (placement["replicas"])
    assert placement["baselines"]["central"]["wan_ratio"] == 0.5
    assert placement["baselines"]["local-first"]["worst_latency_delta_ms"] == -20
    assert [(h["version"], h["reason"]) for h in placement["history"]] == [(1, "deployed")]

    assert deploy(client).json()["version"] == 2
    history = client.get("/apps/demo/placement", headers=AUTH).json()["history"]
    assert [(h["version"], h["reason"]) for h in history] == [(1, "deployed"), (2, "redeployed")]

    deleted = client.delete("/apps/demo", headers=AUTH)
    assert deleted.status_code == 200
    assert recorder.engine[-1] == "undeploy demo"
    assert read_plan(recorder.messages[-2][1], site="a")["apps"] == []
    assert client.get("/apps", headers=AUTH).json() == {"apps": []}
    missing = client.get("/apps/demo/placement", headers=AUTH)
    assert missing.status_code == 404
    assert missing.json() == {"error": "NotFound", "detail": "no app named 'demo' is deployed (deployed: none)"}
    assert client.delete("/apps/demo", headers=AUTH).status_code == 404


def _cli_message(source: str) -> str:
    with pytest.raises(SpanEdgeError) as info:
        load_app_source(source, "app.py").graph()
    return str(info.value)


@pytest.mark.parametrize(
    "source",
    [
        "from spanedge import App\napp = App('demo'\n",
        "x = 1\n",
        APP.replace(".map(total)", ".map(total, name='parse')"),
    ],
    ids=["syntax", "no-app", "duplicate-name"],
)
def test_an_invalid_app_is_a_422_with_the_cli_message(client: TestClient, recorder: Recorder, source: str) -> None:
    expected = _cli_message(source)
    answer = deploy(client, source)
    assert answer.status_code == 422
    assert answer.json() == {"error": "InvalidDataflow", "detail": expected}
    assert recorder.messages == []
    assert recorder.engine == []


def test_an_app_that_raises_while_loading_is_a_422_naming_the_line(client: TestClient) -> None:
    answer = deploy(client, APP.replace("app = App", "undefined_name\napp = App"))
    assert answer.status_code == 422
    assert answer.json() == {
        "error": "InvalidDataflow",
        "detail": "app.py:8: the app raised NameError while loading: name 'undefined_name' is not defined",
    }


def test_sites_mismatch_and_infeasible_placement_are_422(client: TestClient) -> None:
    other = APP.replace('source("readings")', 'source("speeds")')
    answer = deploy(client, other)
    assert answer.status_code == 422
    assert answer.json()["error"] == "InvalidSites"
    assert "binds stream 'readings', but app 'demo' has no source by that name" in answer.json()["detail"]

    answer = deploy(client, slo_ms=0.5)
    assert answer.status_code == 422
    assert answer.json() == {
        "error": "InfeasiblePlacement",
        "detail": "app 'demo': no placement meets the latency SLO of 0.5 ms",
    }


def test_an_app_the_engine_rejects_is_a_422_and_is_neither_kept_nor_sent(
    client: TestClient, recorder: Recorder, tmp_path: Path
) -> None:
    recorder.reject = "transform 'total' (app.py:5) reads a stream without a declared schema; add .schema(...)"
    answer = deploy(client)
    assert answer.status_code == 422
    assert answer.json() == {"error": "InvalidDataflow", "detail": recorder.reject}
    assert recorder.messages == []
    assert client.get("/apps", headers=AUTH).json() == {"apps": []}
    assert StateStore(tmp_path).load_apps() == []


def test_an_app_needing_an_extra_the_hub_lacks_is_a_422_naming_the_install(
    client: TestClient, recorder: Recorder
) -> None:
    recorder.missing = MissingExtra("psycopg", "postgres")
    answer = deploy(client)
    assert answer.status_code == 422
    assert answer.json() == {"error": "MissingExtra", "detail": str(recorder.missing)}
    assert "pip install 'spanedge[postgres]'" in answer.json()["detail"]
    assert recorder.messages == []
    assert client.get("/apps", headers=AUTH).json() == {"apps": []}


def test_a_malformed_request_is_a_422(client: TestClient) -> None:
    answer = client.post("/apps", json={"filename": "app.py"}, headers=AUTH)
    assert answer.status_code == 422
    assert answer.json()["error"] == "InvalidRequest"
    assert "source" in answer.json()["detail"]


WEIGHT_RULE = "must be a finite number >= 0 and <= 1000000, got {}; weights are relative, 1 by default"
SLO_RULE = (
    "must be a finite number > 0 and <= 3600000, got {}; an SLO is in milliseconds, an hour at most; "
    "leave it out for no SLO"
)


@pytest.mark.parametrize(
    ("settings", "detail"),
    [
        ('"weights": {"traffic": 1e309}', "weights.traffic " + WEIGHT_RULE.format("inf")),
        ('"weights": {"latency": NaN}', "weights.latency " + WEIGHT_RULE.format("nan")),
        (
            '"weights": {"evil": 1, "traffic": -5}',
            "weights: unknown weight 'evil'; the weights are traffic, latency, migration; weights.traffic "
            + WEIGHT_RULE.format("-5.0"),
        ),
        ('"weights": {"migration": 2e6}', "weights.migration " + WEIGHT_RULE.format("2000000.0")),
        ('"slo_ms": -1', "slo_ms " + SLO_RULE.format("-1.0")),
        ('"slo_ms": 0', "slo_ms " + SLO_RULE.format("0.0")),
        ('"slo_ms": Infinity', "slo_ms " + SLO_RULE.format("inf")),
    ],
)
def test_a_placement_setting_out_of_range_is_a_422_and_nothing_is_kept(
    client: TestClient, recorder: Recorder, tmp_path: Path, settings: str, detail: str
) -> None:
    # raw JSON: 1e309, NaN and Infinity are what a client may send, which json= would not
    body = '{"source": ' + orjson.dumps(APP).decode() + ', "filename": "app.py", ' + settings + "}"
    answer = client.post("/apps", content=body, headers={**AUTH, "content-type": "application/json"})
    assert answer.status_code == 422
    assert answer.json() == {"error": "InvalidSettings", "detail": detail}
    assert recorder.messages == []
    assert StateStore(tmp_path).load_apps() == []


def test_placement_settings_that_are_not_numbers_are_a_malformed_request(client: TestClient) -> None:
    for settings in ({"slo_ms": "150"}, {"slo_ms": True}, {"weights": {"traffic": True}}, {"weights": [1]}):
        answer = deploy(client, **settings)
        assert answer.status_code == 422, settings
        assert answer.json()["error"] == "InvalidRequest"
    answer = deploy(client, slo_ms=200, weights={"latency": 2})
    assert answer.status_code == 201
    (app,) = client.get("/apps", headers=AUTH).json()["apps"]
    assert (app["slo_ms"], app["weights"]) == (200, {"latency": 2})


def test_the_schema_documents_the_range_of_the_placement_settings(client: TestClient) -> None:
    body = client.get("/openapi.json").json()["components"]["schemas"]["DeployRequest"]["properties"]
    assert body["slo_ms"]["anyOf"][0] == {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_SLO_MS}
    weights = body["weights"]["anyOf"][0]
    assert weights["additionalProperties"] is False
    assert weights["properties"] == {name: {"type": "number", "minimum": 0, "maximum": MAX_WEIGHT} for name in WEIGHTS}


def test_a_body_that_is_not_utf8_is_a_malformed_request(client: TestClient) -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    answer = client.post("/apps", content=b'{"source": "\xff\xfe"}', headers=headers)
    assert answer.status_code == 422
    assert answer.json() == {
        "error": "InvalidRequest",
        "detail": "invalid request: body: not UTF-8 (invalid start byte)",
    }


@pytest.mark.parametrize("filename", ["app\x00.py", "app\n.py", "\x1b[2J.py", "a" * 256])
def test_a_file_name_with_control_characters_is_a_malformed_request(client: TestClient, filename: str) -> None:
    import sys

    before = set(sys.modules)
    answer = deploy(client, filename=filename)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "InvalidRequest"
    assert "body.filename" in answer.json()["detail"]
    assert set(sys.modules) == before


def test_the_schema_says_what_names_and_events_look_like(client: TestClient) -> None:
    from spanedge.names import APP_NAME_PATTERN

    spec = client.get("/openapi.json").json()
    for path in ("/apps/{name}", "/apps/{name}/placement"):
        for op in spec["paths"][path].values():
            (name,) = op["parameters"]
            assert (name["in"], name["schema"]["pattern"]) == ("path", APP_NAME_PATTERN), path
    events = spec["paths"]["/dashboard/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    assert events["required"] == ["event", "data"]  # OpenAPI 3.1: the schema of one event
    assert events["properties"]["event"]["enum"] == ["snapshot", "problem"]


def test_sites_and_latency_show_heartbeats(client: TestClient, coordinator: Coordinator) -> None:
    hb = {"site": "a", "ts": 1, "latency": {"cloud": {"rtt_ms": 30, "p95_ms": 50, "samples": 4}}}
    coordinator.registry.heartbeat("a", orjson.dumps(hb))
    sites = {s["site"]: s for s in client.get("/sites", headers=AUTH).json()["sites"]}
    assert sites["a"]["alive"] is True
    assert sites["cloud"]["alive"] is False
    assert sites["a"]["latency"]["cloud"]["latency_ms"] == 15
    links = client.get("/latency", headers=AUTH).json()["links"]
    row = next(r for r in links if (r["src"], r["dst"]) == ("cloud", "a"))
    assert (row["latency_ms"], row["source"], row["declared_ms"]) == (15, "measured", 40)
    assert row["age_s"] >= 0


def test_sites_show_a_site_running_an_expired_plan(client: TestClient, coordinator: Coordinator) -> None:
    coordinator.registry.heartbeat("a", orjson.dumps({"site": "a", "ts": 1, "plan_expired": True}))
    sites = {s["site"]: s for s in client.get("/sites", headers=AUTH).json()["sites"]}
    assert (sites["a"]["plan_expired"], sites["cloud"]["plan_expired"]) == (True, False)
    coordinator.registry.heartbeat("a", orjson.dumps({"site": "a", "ts": 2}))  # the hub re-issued it
    sites = {s["site"]: s for s in client.get("/sites", headers=AUTH).json()["sites"]}
    assert sites["a"]["plan_expired"] is False


def test_metrics_are_prometheus_text(client: TestClient, coordinator: Coordinator) -> None:
    hb = {
        "site": "a",
        "ts": 1,
        "operators": {"parse@a": {"in": 10, "out": 9, "rate_in": 5.5, "rate_out": 5.0}},
        "outbox": {"records": 12, "bytes": 3400, "dropped": 0, "sent": 99},
        "watermark_lag_s": 1.5,
    }
    coordinator.registry.heartbeat("a", orjson.dumps(hb))
    deploy(client)
    coordinator.frontiers.observe("a", {"complete": {"demo": time.time() - 1.5}})
    answer = client.get("/metrics", headers=AUTH)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=")
    text = answer.text
    for line in (
        "# TYPE spanedge_site_up gauge",
        'spanedge_site_up{site="a"} 1.0',
        'spanedge_operator_input_records_per_second{replica="parse@a",site="a"} 5.5',
        'spanedge_site_backlog_records{site="a"} 12.0',
        "# TYPE spanedge_site_outbox_sent_records_total counter",
        'spanedge_ingest_lag_seconds{app="demo",site="a",stream="readings"} 0.25',
        "spanedge_ingest_duplicates_total 2.0",
        'spanedge_spark_batch_duration_seconds{app="demo",query="out"} 0.1205',
        'spanedge_spark_sink_rows_total{app="demo",query="out"} 12.0',
        'spanedge_spark_query_restarts_total{app="demo",query="out"} 1.0',
        'spanedge_app_plan_version{app="demo"} 1.0',
        "# TYPE process_cpu_seconds_total counter",
    ):
        assert line in text.splitlines(), line
    (lag,) = [
        ln for ln in text.splitlines() if ln.startswith('spanedge_hub_site_frontier_lag_seconds{app="demo",site="a"}')
    ]
    assert 1.5 <= float(lag.split()[-1]) < 60
    assert 'spanedge_site_up{site="cloud"}' not in text  # the hub site runs no agent
    names = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")]
    assert len(names) == len(set(names))


def test_the_token_must_be_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPANEDGE_TOKEN", raising=False)
    monkeypatch.delenv("SPANEDGE_TOKENS_FILE", raising=False)
    with pytest.raises(SpanEdgeError, match="export SPANEDGE_TOKEN"):
        load_tokens()
    monkeypatch.setenv("SPANEDGE_TOKEN", TOKEN)
    assert load_tokens().scope_of(TOKEN) is TokenScope.ADMIN
    path = tmp_path / "token"
    path.write_text(READ_TOKEN + "\n")
    assert load_tokens(path).scope_of(READ_TOKEN) is TokenScope.ADMIN
    path.write_text("")
    with pytest.raises(SpanEdgeError, match="is empty"):
        load_tokens(path)
    monkeypatch.setenv("SPANEDGE_TOKEN", "abc")
    with pytest.raises(SpanEdgeError, match="32"):
        load_tokens()


def test_a_read_token_reads_but_cannot_deploy_or_delete(client: TestClient) -> None:
    read = {"Authorization": f"Bearer {READ_TOKEN}"}
    assert client.get("/apps", headers=read).status_code == 200
    answer = client.post("/apps", json={"source": APP}, headers=read)
    assert answer.status_code == 403
    assert "needs admin" in answer.json()["detail"]
    assert client.delete("/apps/demo", headers=read).status_code == 403
    assert client.post("/apps", json={"source": APP}, headers=AUTH).status_code == 201


def test_an_oversized_body_is_refused_before_it_is_read(client: TestClient) -> None:
    huge = "x = 1\n" * (5 * 2**20 // 6)
    answer = client.post("/apps", json={"source": huge}, headers=AUTH)
    assert answer.status_code == 413
    assert answer.json()["error"] == "PayloadTooLarge"


@pytest.mark.parametrize("name", ["%2E%2E", "q%22uote", "a" * 300, "Demo"])  # a literal ".." never reaches a route
def test_a_hostile_app_name_is_a_422(client: TestClient, name: str) -> None:
    for method in ("get", "delete"):
        answer = client.request(method.upper(), f"/apps/{name}", headers=AUTH)
        assert answer.status_code == 422, (method, name, answer.text)
        assert answer.json()["error"] == "InvalidName"
    hostile = APP.replace('App("demo")', 'App("..")')
    assert hostile != APP
    answer = client.post("/apps", json={"source": hostile}, headers=AUTH)
    assert answer.status_code == 422
    assert "app name" in answer.json()["detail"]


def test_invalid_dataflow_errors_are_value_errors() -> None:
    assert issubclass(InvalidDataflow, ValueError)


def test_status_shows_sites_apps_and_placement(client: TestClient, coordinator: Coordinator) -> None:
    hb = {"site": "a", "ts": 1, "outbox": {"records": 12}, "latency": {"cloud": {"rtt_ms": 30, "samples": 4}}}
    coordinator.registry.heartbeat("a", orjson.dumps(hb))
    deploy(client)
    sites = client.get("/sites", headers=AUTH).json()["sites"]
    apps = client.get("/apps", headers=AUTH).json()["apps"]
    placements = {"demo": client.get("/apps/demo/placement", headers=AUTH).json()}
    text = render_status(sites, apps, placements)
    lines = text.splitlines()
    assert lines[2].split() == ["cloud", "hub", "-", "never", "-", "a", "15"]
    row = lines[3].split()
    assert (row[:3], row[4:6]) == (["a", "spoke", "yes"], ["ago", "12"])
    assert "app 'demo' plan v1: 4 replicas on a, cloud; WAN 500 B/s, worst latency 40.0 ms" in lines
    assert "  a: readings@a, parse@a" in lines
    assert "  cloud: total, out" in lines
    assert "  last change: v1 deployed" in lines
    assert render_status(sites, [], {}).endswith("no apps deployed")


def test_docs_work_offline(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    assert "/docs-assets/swagger-ui-bundle.js" in page.text
    assert "https://" not in page.text  # nothing from a CDN
    assert "http://" not in page.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"):
        assert client.get(f"/docs-assets/{asset}").status_code == 200
    assert client.get("/openapi.json").json()["info"]["title"] == "SpanEdge hub"


def test_every_operation_documents_its_answer_and_its_errors(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert schemas["ErrorResponse"]["required"] == ["error", "detail"]
    assert "HTTPValidationError" not in schemas
    error_ref = {"$ref": "#/components/schemas/ErrorResponse"}
    operations = [(m.upper(), path, op) for path, ops in spec["paths"].items() for m, op in ops.items()]
    assert len(operations) >= 10
    for method, path, op in operations:
        where = f"{method} {path}"
        responses = op["responses"]
        ok = [code for code in responses if code.startswith("2")]
        assert len(ok) == 1, where
        (content,) = responses[ok[0]]["content"].values()
        assert content.get("schema"), f"{where}: no schema for {ok[0]}"
        if content["schema"].get("$ref"):
            assert schemas[content["schema"]["$ref"].rsplit("/", 1)[1]]["properties"], where
        # every error it documents is an ErrorResponse; it documents the ones it can give
        for code, response in responses.items():
            if not code.startswith("2"):
                assert response["content"]["application/json"]["schema"] == error_ref, f"{where} {code}"
                assert response["description"], f"{where} {code}"
        if path != "/healthz":
            assert "401" in responses, f"{where}: needs a token but documents no 401"
        if op.get("parameters") or op.get("requestBody"):
            assert "422" in responses, f"{where}: takes input but documents no 422"
    apps = spec["paths"]["/apps"]
    assert set(apps["post"]["responses"]) == {"201", "401", "403", "413", "422", "500"}
    assert set(spec["paths"]["/apps/{name}/placement"]["get"]["responses"]) == {"200", "401", "404", "422"}
    assert apps["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/AppList")


@pytest.mark.parametrize(
    ("method", "path", "headers", "status", "name"),
    [
        ("GET", "/apps", {}, 401, "Unauthorized"),
        ("POST", "/apps", {"Authorization": f"Bearer {READ_TOKEN}"}, 403, "Forbidden"),
        ("GET", "/no/such/route", AUTH, 404, "NotFound"),
        ("PUT", "/apps", AUTH, 405, "MethodNotAllowed"),
        ("GET", "/dashboard/events", {}, 401, "Unauthorized"),
    ],
)
def test_http_errors_are_error_and_detail(
    client: TestClient, method: str, path: str, headers: dict[str, str], status: int, name: str
) -> None:
    answer = client.request(method, path, headers=headers, json={"source": APP})
    assert answer.status_code == status
    body = answer.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == name
    assert isinstance(body["detail"], str)
    assert body["detail"]
    if status == 401:
        assert answer.headers["www-authenticate"] == "Bearer"
    if status == 405:
        assert answer.headers["allow"]


def test_the_placement_history_shows_what_moved_and_the_baselines(client: TestClient, coordinator: Coordinator) -> None:
    deploy(client)

    def parse_at_the_hub(app: App, sites: Sites, **options: Any) -> Plan:
        plan = planner(app, sites, **options)
        moved = tuple(
            Assignment(a.replica, a.operator, a.group, "cloud", "slow site") if a.operator == "parse" else a
            for a in plan.assignments
        )
        return Plan(**{**plan.__dict__, "assignments": moved})

    coordinator.planner = parse_at_the_hub
    coordinator.replan("demo", "latency a–cloud 40→10 ms")
    history = client.get("/apps/demo/placement", headers=AUTH).json()["history"]
    (handover,) = coordinator.record("demo").plan.handovers
    unknown = {"state_bytes": None, "handed_over_at": None, "handover_s": None}  # no heartbeat, no hold here
    unknown |= {"at_risk_from": None, "recover_by": None, "back_at": None, "recovered_by": None}  # a is alive
    assert [(h["version"], h["moved"]) for h in history] == [
        (1, []),
        (2, [{"replica": "parse@a", "from": "a", "to": "cloud", "switch_at": handover.switch_at, **unknown}]),
    ]
    assert history[1]["baselines"]["central"]["objective"] == 2.0
    assert history[1]["baselines"]["local-first"]["worst_latency_ms"] == 60
    last = client.get("/apps", headers=AUTH).json()["apps"][0]["last_change"]
    assert last["moved"] == history[1]["moved"]


def test_a_heartbeat_field_of_the_wrong_type_shows_as_null(client: TestClient, coordinator: Coordinator) -> None:
    hb = {"site": "a", "ts": 1, "dlq": "many", "cpu_percent": 12.5, "rss_bytes": [1], "apps": "demo", "outbox": 3}
    coordinator.registry.heartbeat("a", orjson.dumps(hb))
    answer = client.get("/sites", headers=AUTH)
    assert answer.status_code == 200, answer.text
    site = next(s for s in answer.json()["sites"] if s["site"] == "a")
    assert (site["dlq"], site["cpu_percent"], site["rss_bytes"], site["apps"], site["outbox"]) == (
        None,
        12.5,
        None,
        [],
        {},
    )


def test_sites_show_declared_and_measured_links_only() -> None:
    """Pairs only a path or the default covers stay in ``/latency``: ``/sites`` does not grow with the fleet squared."""
    registry = SiteRegistry(
        parse_sites(SITES.replace("links:", '  b: {tier: spoke, broker: "mqtt://127.0.0.1:1883"}\nlinks:'))
    )
    status = {s["site"]: s for s in registry.status()}
    assert status["a"]["latency"]["cloud"]["source"] == "declared"
    assert "b" not in status["a"]["latency"]  # a to b is only a path through the hub
    assert status["b"]["latency"] == {}
    hb = {"site": "a", "ts": 1, "latency": {"b": {"rtt_ms": 8, "p95_ms": 9, "samples": 2}}}
    assert registry.heartbeat("a", orjson.dumps(hb))
    status = {s["site"]: s for s in registry.status()}
    assert status["a"]["latency"]["b"]["latency_ms"] == 4
    assert status["a"]["latency"]["b"]["source"] == status["b"]["latency"]["a"]["source"] == "measured"
    assert {(r["src"], r["dst"]) for r in registry.matrix()} >= {("a", "b"), ("b", "a"), ("b", "cloud")}


def test_deploy_and_delete_are_audited_with_who_and_which_code(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    import hashlib
    import logging

    caplog.set_level(logging.INFO, logger="spanedge.audit")
    assert deploy(client).status_code == 201
    assert client.delete("/apps/demo", headers=AUTH).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "spanedge.audit"]
    digest = hashlib.sha256(APP.encode()).hexdigest()
    assert f"deployed app demo v1, source sha256 {digest}, by the admin token of test" in lines
    assert "deleted app demo, by the admin token of test" in lines
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/apps/%00", "/apps/\\x00"),
        ("/apps/evil%E2%80%AEgpj", "/apps/evil\\u202egpj"),
        ("/apps/x%0AINFO%20spanedge.audit:%20deleted%20app%20demo", "/apps/x\\nINFO spanedge.audit: deleted app demo"),
    ],
)
def test_the_audit_log_escapes_what_a_request_sent(
    client: TestClient, caplog: pytest.LogCaptureFixture, path: str, shown: str
) -> None:
    import logging

    from tests.logtext import raw_controls

    caplog.set_level(logging.DEBUG)
    assert client.delete(path, headers=AUTH).status_code == 422
    audited = [r.getMessage() for r in caplog.records if r.name == "spanedge.audit"]
    assert audited == [f"DELETE {shown} by the admin token of test"]
    assert [r.getMessage() for r in caplog.records if raw_controls(r.getMessage())] == []
