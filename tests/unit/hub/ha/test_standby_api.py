"""The standby's REST API: ``/healthz`` with the role, apps read from the database, writes redirected.

The other reads, sent on to the leader, are in ``tests/unit/hub/api/test_forwarding.py``.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from fastapi import FastAPI

with warnings.catch_warnings():
    # starlette >= 1.x prefers the httpx2 package and warns when it falls back to httpx
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from hub.api.client import HubClient, HubError
from hub.api.standby import ROLE_HEADER, redirect_location, standby_app
from hub.ha.config import checked_url, served_url
from hub.ha.errors import HaStoreError
from hub.ha.node import RoleApp
from spanedge.tokens import Tokens, TokenScope
from tests.unit.hub.api.test_sites import record

ADMIN = "admin-token-0123456789abcdef0123456789"
READ = "read-token-0123456789abcdef0123456789"
LEADER = "https://hub-a.example:8443"
TOKENS = Tokens([(TokenScope.ADMIN, ADMIN, "SPANEDGE_TOKEN"), (TokenScope.READ, READ, "SPANEDGE_READ_TOKEN")])


def role() -> dict[str, Any]:
    return {"role": "standby", "leader": "hub-a", "epoch": 7}


def role_with_url() -> dict[str, Any]:
    return {**role(), "leader_url": LEADER}


def test_healthz_says_standby_and_names_the_leader() -> None:
    with TestClient(RoleApp(standby_app(role_with_url))) as client:
        answer = client.get("/healthz")
    assert answer.status_code == 200
    assert answer.json() == {
        "status": "ok",
        "apps": 0,
        "role": "standby",
        "leader": "hub-a",
        "epoch": 7,
        "leader_url": LEADER,
    }


def test_every_other_request_gets_503_with_the_leader() -> None:
    with TestClient(RoleApp(standby_app(role))) as client:
        for method, path in (("GET", "/apps"), ("POST", "/apps"), ("DELETE", "/apps/x"), ("GET", "/dashboard")):
            answer = client.request(method, path)
            assert answer.status_code == 503, (method, path)
            assert answer.headers["retry-after"] == "1"
            body = answer.json()
            assert (body["error"], body["leader"], body["epoch"]) == ("standby", "hub-a", 7)
            assert f"{method} {path} is served by the leader hub-a" in body["detail"]


@pytest.mark.parametrize(
    ("method", "url", "path", "query", "expected"),
    [
        ("POST", LEADER, "/apps", "", f"{LEADER}/apps"),
        ("delete", LEADER + "/", "/apps/cold-chain", "", f"{LEADER}/apps/cold-chain"),
        ("PUT", LEADER, "/sites/a%20b", "x=1&y=2", f"{LEADER}/sites/a%20b?x=1&y=2"),
        ("PATCH", "http://10.0.0.2:8000/prefix", "/apps", "", "http://10.0.0.2:8000/prefix/apps"),
        ("GET", LEADER, "/sites", "", None),
        ("HEAD", LEADER, "/apps", "", None),
        ("POST", None, "/apps", "", None),
        ("POST", "", "/apps", "", None),
    ],
)
def test_the_redirect_decision(method: str, url: str | None, path: str, query: str, expected: str | None) -> None:
    assert redirect_location(method, url, path, query) == expected


def test_a_write_is_redirected_to_the_same_path_on_the_leader() -> None:
    with TestClient(RoleApp(standby_app(role_with_url))) as client:
        answer = client.post("/apps/x/rollout/rollback?all=1", json={}, follow_redirects=False)
    assert answer.status_code == 307
    assert answer.headers["location"] == f"{LEADER}/apps/x/rollout/rollback?all=1"
    assert answer.headers[ROLE_HEADER] == "standby"
    assert "sent on to the leader hub-a" in answer.json()["detail"]


def stored(name: str | None) -> list[Any]:
    return [r for r in [record(3, 2)] if name in (None, r.name)]


def test_the_apps_are_read_from_the_database_for_a_read_token() -> None:
    auth = {"Authorization": f"Bearer {READ}"}
    with TestClient(RoleApp(standby_app(role_with_url, TOKENS, stored))) as client:
        assert client.get("/apps").status_code == 401
        listed = client.get("/apps", headers=auth)
        one = client.get("/apps/demo", headers=auth)
        placement = client.get("/apps/demo/placement", headers=auth)
        missing = client.get("/apps/other", headers=auth)
        invalid = client.get("/apps/Not%20A%20Name/placement", headers=auth)
    for answer in (listed, one, placement):
        assert answer.status_code == 200
        assert answer.headers[ROLE_HEADER] == "standby"
    assert [(a["app"], a["version"]) for a in listed.json()["apps"]] == [("demo", 3)]
    assert one.json()["plan"]["version"] == 3
    assert [h["version"] for h in placement.json()["history"]] == [1, 2]
    assert missing.status_code == 404
    assert missing.json()["detail"] == "no app named 'other' is deployed (deployed: demo)"
    assert invalid.status_code == 422


def test_a_database_out_of_reach_is_a_503_that_names_the_leader() -> None:
    def unreachable(name: str | None) -> list[Any]:
        raise HaStoreError("the hub's database host=db failed: connection refused; is the server up?")

    with TestClient(RoleApp(standby_app(role_with_url, TOKENS, unreachable))) as client:
        answer = client.get("/apps", headers={"Authorization": f"Bearer {READ}"})
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert "cannot read the apps from the hub's database" in answer.json()["detail"]
    assert answer.json()["detail"].endswith("ask the leader hub-a")


def test_once_leading_the_port_serves_the_leaders_api() -> None:
    leader = FastAPI()

    @leader.get("/apps")
    def apps() -> dict[str, Any]:
        return {"apps": []}

    app = RoleApp(standby_app(role))
    with TestClient(app) as client:
        assert client.get("/apps").status_code == 503
        app.active = leader
        assert client.get("/apps").json() == {"apps": []}


def test_the_client_follows_a_redirect_only_to_http_urls_and_never_from_https_to_http() -> None:
    client = HubClient("https://hub-b:8443", READ)
    assert client._redirected("https://hub-b:8443/apps", f"{LEADER}/apps") == f"{LEADER}/apps"
    assert client._redirected("http://127.0.0.1:1/apps", "/elsewhere") == "http://127.0.0.1:1/elsewhere"
    with pytest.raises(HubError, match="plain-HTTP http://hub-a/apps, which would send the token in clear"):
        client._redirected("https://hub-b:8443/apps", "http://hub-a/apps")
    with pytest.raises(HubError, match="not an http"):
        client._redirected("https://hub-b:8443/apps", "ftp://hub-a/apps")


def test_the_advertised_url() -> None:
    assert served_url("10.0.0.2", 8443) == "https://10.0.0.2:8443"
    assert served_url("::1", 8000, plain_http=True) == "http://[::1]:8000"
    assert served_url("0.0.0.0", 8000).startswith("https://")
    assert "0.0.0.0" not in served_url("0.0.0.0", 8000)
    assert checked_url("https://hub-a:8443/") == "https://hub-a:8443"
    for wrong in ("hub-a:8443", "ftp://hub-a", "https://hub-a:port", "https://hub-a/?x=1", "https://"):
        with pytest.raises(ValueError, match="--ha-url"):
            checked_url(wrong)
