"""Two hub processes with ``--ha`` on one PostgreSQL, one broker and one state directory (control plane only).

The first leads and the second stands by (``/healthz`` says so; it reads
the apps from the database, sends writes on to the leader with a 307, and
passes the other reads, the dashboard's too, on to the leader and its
answers back); the leader is SIGKILLed and the standby
takes over under the next epoch, with the apps from the database, and sends
plans of its epoch; the new leader is paused (SIGSTOP) across its lease's
expiry while a restarted hub takes over, and once resumed it exits without
writing anything.
"""

from __future__ import annotations

import http.client
import os
import signal
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from hub.api.client import HubClient, HubError
from hub.api.standby import ROLE_HEADER, SERVED_BY_HEADER
from hub.ha.node import EXIT_LEASE_LOST
from simulate.broker import free_port
from spanedge import topics
from tests.integration.hubkit import EXAMPLES, HubProcess
from tests.integration.test_hub_control import fresh_message
from tests.keys import key_env, read_plan
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(600)

TOKEN = "integration-token-0123456789abcdef0123"
LEASE_S = "3"


@pytest.fixture
def group(mosquitto: Any, tmp_path: Path, postgres_dsn: str) -> Iterator[Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    env |= {"SPANEDGE_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", **key_env(tmp_path)}
    sites = tmp_path / "sites.yaml"
    sites.write_text(
        (EXAMPLES / "cold_chain" / "sites.yaml").read_text().replace("mqtt://localhost:1883", mosquitto.url)
    )
    state = tmp_path / "state"
    started: list[HubProcess] = []

    def start(name: str | None) -> HubProcess:
        ha = ("--ha", postgres_dsn, "--ha-name", name, "--ha-lease", LEASE_S) if name is not None else ()
        hub = HubProcess(sites, state, free_port(), env, "--no-spark", "--down-after", "60", *ha)
        started.append(hub)
        return hub

    yield start
    for hub in started:
        if hub.proc.poll() is None:
            os.kill(hub.proc.pid, signal.SIGCONT)
        hub.stop()


def health(hub: HubProcess) -> dict[str, Any]:
    status, body = hub.get("/healthz")
    return orjson.loads(body) if status == 200 else {}


def role(hub: HubProcess, wanted: str, leader: str, epoch: int) -> bool:
    shown = health(hub)
    return (shown.get("role"), shown.get("leader"), shown.get("epoch")) == (wanted, leader, epoch)


def client(hub: HubProcess) -> HubClient:
    return HubClient(hub.url, TOKEN, timeout=60, ca_file=hub.ca_file)


def sent(hub: HubProcess, method: str, path: str) -> tuple[int, http.client.HTTPMessage, bytes]:
    """``method path`` at ``hub`` with the token, following no redirect: the status, headers and body."""
    port = urlsplit(hub.url).port
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, timeout=60, context=ssl.create_default_context(cafile=hub.ca_file)
    )
    try:
        conn.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"})
        answer = conn.getresponse()
        return answer.status, answer.headers, answer.read()
    finally:
        conn.close()


def plan_epoch(mosquitto: Any) -> int:
    payload = read_plan(fresh_message(mosquitto.port, topics.control("truck-7", "plan")).payload, site="truck-7")
    return max(int(app["plan"].get("hub_epoch", 0)) for app in payload["apps"])


def written(dsn: str) -> tuple[list[Any], list[Any]]:
    """The plan versions and the apps' rows (with the epoch that wrote each) in the shared database."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        versions = conn.execute("SELECT site, version, epoch FROM spanedge_plan_versions ORDER BY site").fetchall()
        apps = conn.execute("SELECT name, epoch, updated_at FROM spanedge_apps ORDER BY name").fetchall()
    return versions, apps


def test_the_standby_takes_over_a_killed_leader_and_a_paused_one_exits_writing_nothing(
    group: Any, mosquitto: Any, postgres_dsn: str
) -> None:
    a = group("hub-a")
    wait_for(lambda: role(a, "leader", "hub-a", 1), timeout=120, what="hub-a to lead under epoch 1")
    alone = group(None)  # a hub without --ha on the group's state directory and broker
    assert alone.wait(timeout=120) == 2
    assert "is in use by another hub" in alone.output
    assert role(a, "leader", "hub-a", 1)
    b = group("hub-b")
    wait_for(lambda: role(b, "standby", "hub-a", 1), timeout=120, what="hub-b to stand by for hub-a")
    assert [s["site"] for s in client(b).sites()] == [s["site"] for s in client(a).sites()]  # from the leader
    client(a).deploy(EXAMPLES / "cold_chain" / "app.py")
    assert wait_for(lambda: plan_epoch(mosquitto) == 1, timeout=60, what="a plan of epoch 1")

    a.kill()  # SIGKILL: no lease given up, no presence marked gone
    wait_for(lambda: role(b, "leader", "hub-b", 2), timeout=120, what="hub-b to take over under epoch 2")
    assert [app["app"] for app in client(b).apps()] == ["cold-chain"]  # from the shared database
    wait_for(lambda: plan_epoch(mosquitto) == 2, timeout=60, what="the new leader's plans of epoch 2")

    c = group("hub-c")
    wait_for(lambda: role(c, "standby", "hub-b", 2), timeout=120, what="hub-c to stand by for hub-b")
    os.kill(b.proc.pid, signal.SIGSTOP)  # paused across its lease's expiry
    wait_for(lambda: role(c, "leader", "hub-c", 3), timeout=120, what="hub-c to take over the paused hub's lease")
    wait_for(lambda: plan_epoch(mosquitto) == 3, timeout=60, what="plans of epoch 3")
    before = written(postgres_dsn)
    os.kill(b.proc.pid, signal.SIGCONT)
    assert b.wait(timeout=120) == EXIT_LEASE_LOST
    assert "this hub stops leading now" in b.output
    versions, apps = written(postgres_dsn)
    assert all(epoch == 3 for _, _, epoch in (row for row in versions if row not in before[0]))
    assert apps == before[1]
    assert plan_epoch(mosquitto) == 3
    assert role(c, "leader", "hub-c", 3)


def test_the_standby_reads_the_apps_from_the_database_passes_other_reads_on_and_redirects_writes(group: Any) -> None:
    a = group("hub-a")
    wait_for(lambda: role(a, "leader", "hub-a", 1), timeout=120, what="hub-a to lead under epoch 1")
    b = group("hub-b")
    wait_for(lambda: health(b).get("leader_url") == a.url, timeout=120, what="hub-b to name hub-a's URL")
    assert health(b)["role"] == "standby"
    assert client(b).apps() == []
    status, headers, body = sent(b, "GET", "/sites")  # sent on to the leader, its answer back
    assert status == 200
    assert (headers[ROLE_HEADER], headers[SERVED_BY_HEADER]) == ("standby", "hub-a")
    assert [s["site"] for s in orjson.loads(body)["sites"]] == [s["site"] for s in client(a).sites()]
    assert orjson.loads(body)["down_after_s"] == 60  # the leader's --down-after
    status, headers, page = sent(b, "GET", "/")  # the dashboard's page, from the leader
    assert (status, headers.get_content_type(), headers[SERVED_BY_HEADER]) == (200, "text/html", "hub-a")
    assert b"/dashboard/app.js" in page
    status, headers, _ = sent(b, "DELETE", "/apps/cold-chain")  # a write is still redirected
    assert (status, headers["Location"], headers[ROLE_HEADER]) == (307, f"{a.url}/apps/cold-chain", "standby")

    plan = client(b).deploy(EXAMPLES / "cold_chain" / "app.py")  # POST at the standby, 307 to the leader
    assert [app["app"] for app in client(a).apps()] == ["cold-chain"]
    listed = client(b).apps()  # from the shared database
    assert [(app["app"], app["version"]) for app in listed] == [("cold-chain", plan.version)]
    assert client(b).placement("cold-chain")["history"] == client(a).placement("cold-chain")["history"]
    with pytest.raises(HubError, match="rejected the token"):
        HubClient(b.url, "wrong-token-0123456789abcdef0123456789", ca_file=b.ca_file).delete("cold-chain")
    assert client(b).delete("cold-chain")["deleted"] == "cold-chain"
    assert client(a).apps() == [] == client(b).apps()
    assert role(b, "standby", "hub-a", 1)
