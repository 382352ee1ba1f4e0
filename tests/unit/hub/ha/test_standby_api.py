"""The standby's REST API: ``/healthz`` with the role, 503 naming the leader elsewhere; the switch to the leader's."""

from __future__ import annotations

import warnings
from typing import Any

from fastapi import FastAPI

with warnings.catch_warnings():
    # starlette >= 1.x prefers the httpx2 package and warns when it falls back to httpx
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from hub.api.health import standby_app
from hub.ha.node import RoleApp


def role() -> dict[str, Any]:
    return {"role": "standby", "leader": "hub-a", "epoch": 7}


def test_healthz_says_standby_and_names_the_leader() -> None:
    with TestClient(RoleApp(standby_app(role))) as client:
        answer = client.get("/healthz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok", "apps": 0, "role": "standby", "leader": "hub-a", "epoch": 7}


def test_every_other_request_gets_503_with_the_leader() -> None:
    with TestClient(RoleApp(standby_app(role))) as client:
        for method, path in (("GET", "/apps"), ("POST", "/apps"), ("DELETE", "/apps/x"), ("GET", "/dashboard")):
            answer = client.request(method, path)
            assert answer.status_code == 503, (method, path)
            assert answer.headers["retry-after"] == "1"
            body = answer.json()
            assert (body["error"], body["leader"], body["epoch"]) == ("standby", "hub-a", 7)
            assert f"{method} {path} is served by the leader hub-a" in body["detail"]


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
