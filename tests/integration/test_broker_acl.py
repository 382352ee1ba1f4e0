"""Per-site MQTT identities on a real Mosquitto with the generated ACL, password file and TLS.

The hub's broker runs the ACL :func:`spanedge.broker_acl.acl_text` writes: spoke
truck-7 may publish its own data but not truck-9's (the hub ingest never sees
the forged batch), may read its own plan but not truck-9's; a wrong password,
an anonymous client and a plain (non-TLS) connection are refused. The output
of truck-9's replica that a plan runs at truck-7 goes on truck-7's own topic,
and the hub accepts it only while a plan assigns it there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from hub.ingest.consumer import Ingest
from hub.ingest.publishers import from_plans
from simulate.broker import BrokerSecurity, Mosquitto, mosquitto_path
from simulate.tls import TlsFiles, make_tls
from spanedge import topics
from spanedge.broker_acl import acl_text, password_file
from spanedge.errors import SpanEdgeError
from spanedge.mqtt import ClientSettings, connect, make_client
from spanedge.plan import Assignment, Flow, Plan, SolverInfo, Totals
from spanedge.sites import TLS, Broker, parse_sites
from spanedge.wire.batch import Record, encode_batch
from tests.conftest import missing_part
from tests.polling import wait_for

SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883"}
  truck-7:
    tier: spoke
    broker: "mqtt://127.0.0.1:1883"
    streams: {readings: {topic: "trucks/7/+/temp", rate: 10}}
  truck-9:
    tier: spoke
    broker: "mqtt://127.0.0.1:1883"
    streams: {readings: {topic: "trucks/9/+/temp", rate: 10}}
"""
PASSWORDS = {"cloud": "hub-password-0123456789", "truck-7": "truck7-password-0123", "truck-9": "truck9-password-0123"}
APP = "cold-chain"
SETTINGS = ClientSettings()


class Secured:
    """A running secured hub broker and how to log in to it."""

    def __init__(self, broker: Mosquitto, tls: TlsFiles) -> None:
        self.broker = broker
        self.tls = tls

    def login(self, user: str, monkeypatch: pytest.MonkeyPatch, password: str | None = None) -> Broker:
        """The broker as ``user`` sees it (``mqtts://``, the CA, the password in an environment variable)."""
        env = f"TEST_MQTT_PASSWORD_{user.replace('-', '_').upper()}"
        monkeypatch.setenv(env, PASSWORDS[user] if password is None else password)
        return Broker(
            scheme="mqtts",
            host="127.0.0.1",
            port=self.broker.port,
            username=user,
            password_env=env,
            tls=TLS(ca_file=str(self.tls.ca_file)),
        )


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    sites = parse_sites(SITES)
    tls = make_tls(tmp_path / "tls")
    passwords = tmp_path / "passwords"
    passwords.write_text(password_file(PASSWORDS))
    acl = tmp_path / "acl"
    acl.write_text(acl_text(sites, list(sites.sites)))
    with Mosquitto(workdir=tmp_path / "broker", security=BrokerSecurity(tls, passwords, acl)) as broker:
        yield Secured(broker, tls)


class Session:
    """A connected paho client that records the CONNACK, SUBACKs and messages it gets."""

    def __init__(self, broker: Broker, client_id: str) -> None:
        self.client = make_client(broker, client_id, SETTINGS)
        self.connack = threading.Event()
        self.refused: Any = None
        self.subacks: dict[int, list[Any]] = {}
        self.messages: list[tuple[str, bytes]] = []
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda _c, _u, mid, reasons, _p: self.subacks.__setitem__(mid, list(reasons))
        self.client.on_message = lambda _c, _u, m: self.messages.append((m.topic, bytes(m.payload)))
        connect(self.client, broker, SETTINGS)
        assert self.connack.wait(20), "no CONNACK from the broker"

    def _on_connect(self, _c: Any, _u: Any, _flags: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            self.refused = reason
        self.connack.set()

    def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> None:
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        info.wait_for_publish(20)
        assert info.is_published()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _batch(site: str, seqs: range) -> bytes:
    return encode_batch(APP, [Record(site, "readings", s, 1000.0 + s, "u1", {"temp_f": 40.0}) for s in seqs])


def test_a_spoke_publishes_its_own_data_but_not_another_sites(
    secured: Secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest = Ingest(secured.login("cloud", monkeypatch), tmp_path / "log", client_id="hub-ingest")
    ingest.start()
    truck7 = Session(secured.login("truck-7", monkeypatch), "truck-7-out")
    try:
        assert ingest.wait_connected(20)
        assert truck7.refused is None
        # a forged batch for truck-9, then truck-7's own, on one connection: the broker keeps their order
        truck7.publish(topics.data(APP, "readings", "truck-9"), _batch("truck-9", range(1, 6)))
        truck7.publish(topics.dlq(APP, "truck-9"), b'{"reason": "forged"}')
        truck7.publish(topics.data(APP, "readings", "truck-7"), _batch("truck-7", range(1, 4)))
        stats = wait_for(
            lambda: (s := ingest.stats())["apps"].get(APP, {}).get("truck-7") and s,
            what="truck-7's own batch in the hub ingest",
        )
    finally:
        truck7.close()
        ingest.stop()
    assert stats["apps"][APP]["truck-7"]["readings"]["records"] == 3
    assert "truck-9" not in stats["apps"][APP]  # the broker dropped the forged batch: the hub counts nothing
    assert stats["messages"] == 1
    assert stats["malformed"] == 0
    assert stats["site_mismatch"] == 0


def _plan_running_truck9s_stats_at(site: str) -> Plan:
    """truck-9's source at truck-9, its ``stats`` window offloaded to ``site``, its ``alerts`` at truck-9."""
    return Plan(
        app=APP,
        version=2,
        hub="cloud",
        assignments=(
            Assignment("readings@truck-9", "readings", "truck-9", "truck-9", "source"),
            Assignment("stats@truck-9", "stats", "truck-9", site, "offloaded", 2),
            Assignment("alerts@truck-9", "alerts", "truck-9", "truck-9", "@local"),
            Assignment("report", "report", None, "cloud", "@global_"),
        ),
        flows=(Flow("stats@truck-9", "report", 1.0, 100.0), Flow("alerts@truck-9", "report", 1.0, 100.0)),
        totals=Totals(1.0, 1.0, 1.0, 1.0),
        solver=SolverInfo("test", "optimal", 0.0),
    )


def _output(site: str, stream: str, seqs: range) -> bytes:
    return encode_batch(APP, [Record(site, stream, s, 1000.0 + s, "u1", {"n": s}, 2) for s in seqs])


@pytest.mark.parametrize("stats_at", ["truck-7", "truck-9"])
def test_a_spoke_publishes_the_output_of_another_sites_replica_on_its_own_topic(
    secured: Secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stats_at: str
) -> None:
    """truck-7 runs truck-9's window when the plan puts it there: the broker lets it publish on its own topic and
    the hub accepts the batch as truck-9's; otherwise (and always for a stream not assigned to it) the hub refuses."""
    plan = _plan_running_truck9s_stats_at(stats_at)
    policy = from_plans(lambda app: (plan,) if app == APP else ())
    ingest = Ingest(secured.login("cloud", monkeypatch), tmp_path / "log", client_id="hub-ingest", may_publish=policy)
    ingest.start()
    dlq = Session(secured.login("cloud", monkeypatch), "hub-dlq")
    truck7 = Session(secured.login("truck-7", monkeypatch), "truck-7-out")
    try:
        assert ingest.wait_connected(20)
        _, mid = dlq.client.subscribe(topics.dlq(APP, "truck-7"), 1)
        wait_for(lambda: mid in dlq.subacks, what="the dead-letter SUBACK")
        truck7.publish(topics.data(APP, "alerts", "truck-7"), _output("truck-9", "alerts", range(1, 4)))
        truck7.publish(topics.data(APP, "stats", "truck-7"), _output("truck-9", "stats", range(1, 6)))
        truck7.publish(topics.data(APP, "readings", "truck-7"), _batch("truck-7", range(1, 3)))  # its own, last
        stats = wait_for(
            lambda: (s := ingest.stats())["apps"].get(APP, {}).get("truck-7") and s,
            what="truck-7's own batch in the hub ingest",
        )
        refused = 1 if stats_at == "truck-7" else 2
        wait_for(lambda: len(dlq.messages) == refused, what="the refused batches' dead letters")
    finally:
        truck7.close()
        dlq.close()
        ingest.stop()
    assert stats["site_mismatch"] == refused
    assert stats["apps"][APP]["truck-7"]["readings"]["records"] == 2
    if stats_at == "truck-7":
        assert set(stats["apps"][APP]["truck-9"]) == {"stats"}
        assert stats["apps"][APP]["truck-9"]["stats"]["records"] == 5
        assert stats["apps"][APP]["truck-9"]["stats"]["last_seq"] == 5
    else:
        assert "truck-9" not in stats["apps"][APP]
    reasons = [orjson.loads(body)["reason"] for _, body in dlq.messages]
    assert all("records of site 'truck-9'" in r for r in reasons), reasons
    refused_streams = ["alerts"] if stats_at == "truck-7" else ["alerts", "stats"]
    assert [r.split("stream ")[1].split(";")[0] for r in reasons] == [f"'{s}'" for s in refused_streams]


def test_a_spoke_reads_its_own_plan_only(secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = Session(secured.login("cloud", monkeypatch), "hub-plans")
    truck7 = Session(secured.login("truck-7", monkeypatch), "truck-7-plans")
    try:
        hub.publish(topics.control("truck-9", "plan"), b"plan of truck-9", retain=True)
        hub.publish(topics.control("truck-7", "plan"), b"plan of truck-7", retain=True)
        # truck-9's plan first: were it delivered, it would arrive before truck-7's
        plans = [(topics.control("truck-9", "plan"), 1), (topics.control("truck-7", "plan"), 1)]
        result, _ = truck7.client.subscribe(plans)
        assert result == mqtt.MQTT_ERR_SUCCESS
        wait_for(lambda: truck7.messages, what="truck-7's own retained plan")
        # the hub itself reads every plan
        hub.client.subscribe(topics.control("+", "plan"), 1)
        wait_for(lambda: len(hub.messages) == 2, what="both retained plans at the hub")
    finally:
        truck7.close()
        hub.close()
    assert truck7.messages == [(topics.control("truck-7", "plan"), b"plan of truck-7")]


def test_a_spoke_cannot_publish_a_plan_or_another_sites_heartbeat(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = Session(secured.login("cloud", monkeypatch), "hub-watch")
    truck7 = Session(secured.login("truck-7", monkeypatch), "truck-7-control")
    try:
        _, mid = hub.client.subscribe(f"{topics.PREFIX}/control/#", 1)
        wait_for(lambda: mid in hub.subacks, what="the hub's SUBACK")
        truck7.publish(topics.control("truck-7", "plan"), b"self-made plan")
        truck7.publish(topics.control("truck-9", "plan"), b"plan for truck-9")
        truck7.publish(topics.control("truck-9", "heartbeat"), b"{}")
        truck7.publish(topics.control("truck-7", "heartbeat"), b'{"site": "truck-7"}')
        wait_for(lambda: hub.messages, what="truck-7's own heartbeat at the hub")
    finally:
        truck7.close()
        hub.close()
    assert hub.messages == [(topics.control("truck-7", "heartbeat"), b'{"site": "truck-7"}')]


def _refused(client: mqtt.Client, port: int) -> Any:
    """Connect ``client`` and return the broker's answer: a failed CONNACK or the disconnect reason."""
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        outcome.setdefault("connack", reason)
        done.set()

    def on_disconnect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        outcome.setdefault("disconnect", reason)
        done.set()

    client.on_connect = on_connect
    client.on_disconnect = on_disconnect
    try:
        client.connect("127.0.0.1", port, keepalive=10)
    except OSError as exc:
        return exc
    client.loop_start()
    try:
        assert done.wait(20), "the broker neither accepted nor refused the connection"
    finally:
        client.disconnect()
        client.loop_stop()
    return outcome


def test_a_wrong_password_is_refused(secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    session = Session(secured.login("truck-7", monkeypatch, password="not-the-password"), "truck-7-wrong")
    session.close()
    assert session.refused is not None
    assert session.refused.is_failure


def test_an_anonymous_client_is_refused(secured: Secured) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="anonymous")
    client.tls_set(ca_certs=str(secured.tls.ca_file))
    outcome = _refused(client, secured.broker.port)
    assert "connack" in outcome
    assert outcome["connack"].is_failure


def test_a_plain_connection_is_refused(secured: Secured) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="plain")
    client.username_pw_set("truck-7", PASSWORDS["truck-7"])
    outcome = _refused(client, secured.broker.port)
    assert isinstance(outcome, OSError) or "connack" not in outcome or outcome["connack"].is_failure


def test_a_spoke_cannot_forge_the_hubs_presence(
    secured: Secured, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hub.control.presence import HubPresence, presence_of
    from spanedge.wire.presence import encode

    presence = topics.control("cloud", "presence")
    watcher = Session(secured.login("cloud", monkeypatch), "hub-presence-watch")
    truck7 = Session(secured.login("truck-7", monkeypatch), "truck-7-presence")
    claim: HubPresence | None = None
    try:
        _, mid = watcher.client.subscribe(presence, 1)
        wait_for(lambda: mid in watcher.subacks, what="the watcher's SUBACK")
        forged = presence_of("cloud", "deadbeef", tmp_path / "elsewhere")
        truck7.publish(presence, encode(forged), retain=True)  # a gateway posing as a live hub
        me = presence_of("cloud", "3f9c2a1b", tmp_path / "hub")
        claim = HubPresence(secured.login("cloud", monkeypatch), me, "hub-presence-claim")
        claim.claim()  # the forged record never reached the broker's store: nothing holds the site
        assert claim.claimed
        claim.release()
        wait_for(lambda: len(watcher.messages) == 2, what="the hub's presence record, live and then gone")
    finally:
        if claim is not None and claim.claimed:
            claim.release()
        truck7.close()
        watcher.close()
    assert [topic for topic, _ in watcher.messages] == [presence, presence]  # live, then gone
    assert [m for _, m in watcher.messages] == [encode(me), encode(me.gone())]
