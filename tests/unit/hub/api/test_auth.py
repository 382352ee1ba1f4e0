"""The hub's REST guard: scoped tokens, the audit log of admin requests, and the bound on request bodies."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Iterator, MutableMapping
from typing import Any

import orjson
import pytest
from fastapi import Depends, FastAPI, Request
from pydantic import BaseModel

with warnings.catch_warnings():
    # starlette >= 1.x prefers the httpx2 package and warns when it falls back to httpx
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from hub.api.auth import BodyLimit, scope_dependency, source_sha256
from hub.api.errors import install_error_handlers
from spanedge.loader import source_hash
from spanedge.tokens import Tokens, TokenScope

ADMIN = "admin-token-0123456789abcdef0123456789"
READ = "read-token-0123456789abcdef0123456789"
LIMIT = 1000


class Body(BaseModel):
    source: str


def _api(calls: list[str]) -> FastAPI:
    tokens = Tokens([(TokenScope.ADMIN, ADMIN, "SPANEDGE_TOKEN"), (TokenScope.READ, READ, "tokens.txt:2")])
    api = FastAPI()
    install_error_handlers(api)
    api.add_middleware(BodyLimit, limit=LIMIT)
    admin = Depends(scope_dependency(tokens, TokenScope.ADMIN))

    @api.post("/apps", dependencies=[admin])
    def deploy(body: Body, request: Request) -> dict[str, Any]:
        calls.append(f"deploy by {request.state.grant.source}")
        return {"size": len(body.source)}

    @api.delete("/apps/{name}", dependencies=[admin])
    def delete(name: str) -> dict[str, str]:
        calls.append(f"delete {name}")
        return {"deleted": name}

    return api


@pytest.fixture
def calls() -> list[str]:
    return []


@pytest.fixture
def client(calls: list[str]) -> Iterator[TestClient]:
    with TestClient(_api(calls)) as c:
        yield c


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_chunked_body_over_the_limit_is_a_413_not_a_400(client: TestClient, calls: list[str]) -> None:
    chunks = (b'{"source": "' + b"#" * 300 if i == 0 else b"#" * 300 for i in range(10))
    answer = client.post("/apps", content=chunks, headers={**_bearer(ADMIN), "content-type": "application/json"})
    assert answer.status_code == 413
    assert answer.json() == {
        "error": "PayloadTooLarge",
        "detail": f"request body over {LIMIT} bytes; an app's source must be smaller",
    }
    assert calls == []


def test_a_declared_length_over_the_limit_is_a_413(client: TestClient, calls: list[str]) -> None:
    answer = client.post("/apps", json={"source": "#" * 2 * LIMIT}, headers=_bearer(ADMIN))
    assert answer.status_code == 413
    assert answer.json()["error"] == "PayloadTooLarge"
    assert calls == []


def _run_asgi(api: FastAPI, chunks: int, chunk: bytes, headers: list[tuple[bytes, bytes]]) -> tuple[int, int]:
    """Send a body of ``chunks`` pieces straight to the ASGI app; return the status and how many pieces it read."""
    read = 0
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": chunk, "more_body": read < chunks}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/apps",
        "raw_path": b"/apps",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"hub"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    asyncio.run(api(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return int(start["status"]), read


def test_a_large_body_is_refused_before_it_is_read_whole(calls: list[str]) -> None:
    auth = (b"authorization", f"Bearer {ADMIN}".encode())
    kind = (b"content-type", b"application/json")
    status, read = _run_asgi(_api(calls), 50_000, b"#" * 1000, [auth, kind])  # 50 MB in 1 kB pieces
    assert status == 413
    assert read == 2  # refused on the piece that passed the limit
    declared = (b"content-length", str(50 * 2**20).encode())
    status, read = _run_asgi(_api(calls), 50_000, b"#" * 1000, [auth, kind, declared])
    assert (status, read) == (413, 0)  # refused on its declared length, before any of it is read
    assert calls == []


def test_a_read_token_gets_403_and_is_not_audited(
    client: TestClient, calls: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="spanedge.audit")
    assert client.post("/apps", json={"source": "x = 1"}, headers=_bearer(READ)).status_code == 403
    assert client.delete("/apps/demo", headers=_bearer(READ)).status_code == 403
    assert client.post("/apps", json={"source": "x = 1"}).status_code == 401
    assert calls == []
    assert [r for r in caplog.records if r.name == "spanedge.audit"] == []


def test_the_audit_log_says_who_sent_which_code(
    client: TestClient, calls: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="spanedge.audit")
    source = "from spanedge import App\napp = App('demo')\n"
    assert client.post("/apps", json={"source": source}, headers=_bearer(ADMIN)).status_code == 200
    assert client.delete("/apps/demo", headers=_bearer(ADMIN)).status_code == 200
    assert calls == ["deploy by SPANEDGE_TOKEN", "delete demo"]
    lines = [r.getMessage() for r in caplog.records if r.name == "spanedge.audit"]
    assert lines == [
        f"POST /apps by the admin token of SPANEDGE_TOKEN, app source sha256 {source_hash(source)}",
        "DELETE /apps/demo by the admin token of SPANEDGE_TOKEN",
    ]
    assert ADMIN not in caplog.text


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", None),
        (b"not json", None),
        (b"[1, 2]", None),
        (b'{"source": 3}', None),
        (orjson.dumps({"source": "x = 1"}), source_hash("x = 1")),
    ],
)
def test_source_sha256_of_a_body(body: bytes, expected: str | None) -> None:
    assert source_sha256(body) == expected
