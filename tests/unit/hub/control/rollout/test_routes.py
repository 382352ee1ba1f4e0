"""The rollout routes of the REST API, and ``spanedge rollout status``'s text, over the runner test's fleet."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from hub.api.app import create_app
from spanedge.cli.rollout import rollout_text
from spanedge.loader import source_hash
from spanedge.tokens import Tokens, TokenScope

from .test_runner import V1, V2, Fleet

TOKEN = "admin-token-0123456789abcdef0123456789"
READ = "read-token-0123456789abcdef0123456789"


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path)


@pytest.fixture
def api(fleet: Fleet) -> Iterator[TestClient]:
    tokens = Tokens([(TokenScope.ADMIN, TOKEN, "test"), (TokenScope.READ, READ, "test")])
    with TestClient(create_app(fleet.coordinator, tokens)) as client:
        yield client


def deploy(api: TestClient, source: str, **extra: Any) -> Any:
    return api.post("/apps", json={"source": source, "filename": "app.py", **extra}, headers=auth())


def test_a_deploy_with_a_rollout_starts_it_and_get_shows_where_it_is(api: TestClient, fleet: Fleet) -> None:
    assert deploy(api, V1).status_code == 201
    fleet.deliver()
    assert api.get("/apps/demo/rollout", headers=auth()).json()["detail"].startswith("app 'demo' has had no rollout")
    answer = deploy(api, V2, rollout="kind=truck:1, *", gates="dead_letter_rate<1%", hold="30s")
    assert answer.status_code == 201, answer.text
    assert answer.json()["rollout"]["status"] == "running"
    fleet.deliver()
    fleet.advance(5)
    view = api.get("/apps/demo/rollout", headers=auth(READ)).json()
    assert view["status"] == "holding"
    assert view["due"] == view["held_from"] + 30
    (canary,) = view["stages"][0]["changes"]
    assert view["versions"][source_hash(V2)] == [canary]
    assert len(view["versions"][source_hash(V1)]) == 3
    text = rollout_text(view)
    assert text.startswith("app demo: holding at stage 1/2 kind=truck:1")
    assert f"on {source_hash(V2)[:12]}: 1 site: {canary}" in text


def test_rollback_needs_an_admin_token_and_a_rollout_in_progress(api: TestClient, fleet: Fleet) -> None:
    deploy(api, V1)
    fleet.deliver()
    assert api.post("/apps/demo/rollout/rollback", headers=auth()).status_code == 404
    deploy(api, V2, rollout="*", hold="1m")
    assert api.post("/apps/demo/rollout/rollback", headers=auth(READ)).status_code == 403
    answer = api.post("/apps/demo/rollout/rollback", headers=auth())
    assert answer.status_code == 200
    assert answer.json()["status"] == "failed"
    assert "rolled back by hand" in answer.json()["reason"]
    assert api.post("/apps/demo/rollout/rollback", headers=auth()).status_code == 409  # rolling back already
    assert api.get("/apps/nope/rollout", headers=auth()).status_code == 404


def test_a_rollout_refused_is_a_422_that_says_why(api: TestClient, fleet: Fleet) -> None:
    deploy(api, V1)
    answer = deploy(api, V2, rollout="kind=bus:1, *")
    assert answer.status_code == 422
    assert answer.json()["error"] == "InvalidRollout"
    assert "no site has kind=bus" in answer.json()["detail"]
    assert deploy(api, V2, rollout="*", hold="forever").status_code == 422
    # --all-at-once deploys everywhere as a plain deploy does
    plain = deploy(api, V2, rollout="kind=bus:1, *", all_at_once=True)
    assert plain.status_code == 201
    assert plain.json()["rollout"] is None
