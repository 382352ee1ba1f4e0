"""The enrolment routes: admin-only site add and revoke, a public join whose refusals are 4xx with the reason."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from hub.api.app import create_app
from hub.control.brokers import BrokerFiles
from hub.control.coordinator import Coordinator
from hub.control.enrolment import Enrolment
from hub.control.fleet import Fleet
from hub.control.join_tokens import JoinTokens
from hub.control.registry import SiteRegistry
from spanedge.ca import CertificateAuthority, new_request
from spanedge.sites import parse_sites
from spanedge.tokens import Tokens, TokenScope
from tests.keys import KEY

ADMIN = "admin-token-0123456789abcdef0123456789"
READ = "read-token-0123456789abcdef0123456789"
SITES = 'sites:\n  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883"}\n'


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    fleet = Fleet(parse_sites(SITES), tmp_path / "fleet.json")
    coordinator = Coordinator(SiteRegistry(fleet.sites))
    ca = CertificateAuthority.open(tmp_path / "ca")
    enrolment = Enrolment(
        fleet,
        JoinTokens(tmp_path / "t.json"),
        ca,
        BrokerFiles(None),
        coordinator,
        KEY.public_key,
        default_broker="mqtt://127.0.0.1:1883",
    )
    enrolment.start()
    tokens = Tokens([(TokenScope.ADMIN, ADMIN, "SPANEDGE_TOKEN"), (TokenScope.READ, READ, "SPANEDGE_READ_TOKEN")])
    with TestClient(create_app(coordinator, tokens, enrolment=enrolment)) as c:
        yield c


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_adding_a_site_needs_an_admin_token(client: TestClient) -> None:
    assert client.post("/sites", json={"site": "truck-12"}).status_code == 401
    assert client.post("/sites", json={"site": "truck-12"}, headers=_bearer(READ)).status_code == 403
    assert client.post("/sites/truck-12/revoke", headers=_bearer(READ)).status_code == 403


def test_a_join_and_its_replay_with_the_audit_log(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    added = client.post("/sites", json={"site": "truck-12", "labels": {"kind": "truck"}}, headers=_bearer(ADMIN))
    assert added.status_code == 201, added.text
    token = added.json()["token"]
    sites = client.get("/sites", headers=_bearer(READ)).json()["sites"]
    assert next(s for s in sites if s["site"] == "truck-12")["labels"] == {"kind": "truck"}
    csr = new_request("truck-12")[0].decode()
    with caplog.at_level(logging.INFO, logger="spanedge.audit"):
        joined = client.post("/join", json={"token": token, "csr": csr})
        replay = client.post("/join", json={"token": token, "csr": csr})
        malformed = client.post("/join", json={"token": "nonsense", "csr": csr})
    assert joined.status_code == 200, joined.text
    assert joined.json()["site"] == "truck-12"
    assert replay.status_code == 403
    assert replay.json()["error"] == "Forbidden"
    assert "already used" in replay.json()["detail"]
    assert malformed.status_code == 400
    assert "malformed join token" in malformed.json()["detail"]
    audit = [r.getMessage() for r in caplog.records if r.name == "spanedge.audit"]
    assert any("join of site truck-12 from testclient: certificate issued" in m for m in audit)
    assert any("join from testclient refused (403)" in m and "already used" in m for m in audit)
    assert all(token.split(".")[3] not in m for m in audit)  # the secret is never logged


def test_the_schema_documents_every_answer_of_a_join(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert set(spec["paths"]["/join"]["post"]["responses"]) == {"200", "400", "403", "422", "429"}
    (site,) = spec["paths"]["/sites/{site}/revoke"]["post"]["parameters"]
    assert site["schema"]["pattern"] == "^[a-z0-9][a-z0-9_-]{0,62}$"


def test_a_bad_label_or_a_revoked_site_is_a_422(client: TestClient) -> None:
    bad = client.post("/sites", json={"site": "truck-12", "labels": {"Kind": "truck"}}, headers=_bearer(ADMIN))
    assert bad.status_code == 422
    assert "label key name 'Kind' has uppercase letters" in bad.json()["detail"]
    unknown = client.post("/sites/truck-99/revoke", headers=_bearer(ADMIN))
    assert unknown.status_code == 422
    assert "unknown site 'truck-99'" in unknown.json()["detail"]
    assert client.get("/join/ca").json()["ca"].startswith("-----BEGIN CERTIFICATE-----")


def test_a_site_added_with_its_streams_is_joining_until_heard(client: TestClient) -> None:
    streams = {"readings": {"topic": "trucks/13/#", "rate": 5}}
    added = client.post("/sites", json={"site": "truck-13", "streams": streams}, headers=_bearer(ADMIN))
    assert added.status_code == 201, added.text
    assert added.json()["streams"] == {"readings": {"topic": "trucks/13/#", "rate": 5.0}}
    row = next(s for s in client.get("/sites", headers=_bearer(READ)).json()["sites"] if s["site"] == "truck-13")
    assert (row["joining"], row["streams"]) == (True, {"readings": 5.0})
    bad = {"readings": {"topic": "trucks/#/temp", "rate": 5}}
    refused = client.post("/sites", json={"site": "truck-14", "streams": bad}, headers=_bearer(ADMIN))
    assert refused.status_code == 422
    assert "topic filter 'trucks/#/temp' is invalid" in refused.json()["detail"]


def test_the_audit_log_escapes_the_site_names_a_request_sent(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.logtext import raw_controls

    caplog.set_level(logging.DEBUG)
    added = client.post("/sites", json={"site": "truck\u202e21-kcurt"}, headers=_bearer(ADMIN))
    assert added.status_code == 422
    assert client.post("/sites/a%00b/revoke", headers=_bearer(ADMIN)).status_code == 422
    audited = [r.getMessage() for r in caplog.records if r.name == "spanedge.audit"]
    assert audited[0].startswith("POST /sites by the admin token of SPANEDGE_TOKEN")
    assert audited[1].startswith("site add 'truck\\u202e21-kcurt' by the admin token of SPANEDGE_TOKEN refused: ")
    assert audited[3].startswith("site revoke 'a\\x00b' by the admin token of SPANEDGE_TOKEN refused: ")
    assert [r.getMessage() for r in caplog.records if raw_controls(r.getMessage())] == []
