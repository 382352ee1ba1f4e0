"""Mosquitto run from the exact configs ``spanedge broker-config`` writes, with the hub's CA.

For both kinds of identity (a password, a client certificate of the hub's CA) a site logs in
as itself over TLS, an anonymous or wrong-identity client is refused, and the ACL holds: truck-7
publishes its own data, not truck-9's, and reads its own plan, not truck-9's. A revoked
certificate is refused once the broker reloads the CA's revocation list. Run as root, the
command gives the files to the ``mosquitto`` account, which Mosquitto switches to before it
reads them; run as another user, Mosquitto runs as that user.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from click.testing import CliRunner
from paho.mqtt.enums import CallbackAPIVersion

from simulate.broker import ConfiguredMosquitto, free_port, mosquitto_path
from spanedge import topics
from spanedge.ca import CertificateAuthority, new_request
from spanedge.cli import cli
from spanedge.errors import SpanEdgeError
from spanedge.sites import TLS, Broker
from tests.conftest import missing_part
from tests.integration.test_broker_acl import Session, _refused
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(300)
SITES = """
sites:
  cloud: {{tier: hub, broker: "mqtts://127.0.0.1:{hub}", tls: {{ca_file: ca.pem}}}}
  truck-7:
    tier: spoke
    broker: "mqtts://127.0.0.1:{hub}"
    tls: {{ca_file: ca.pem}}
    streams: {{readings: {{topic: "trucks/7/+/temp", rate: 10}}}}
  truck-9:
    tier: spoke
    broker: "mqtts://127.0.0.1:{gw9}"
    tls: {{ca_file: ca.pem}}
    streams: {{readings: {{topic: "trucks/9/+/temp", rate: 10}}}}
"""
APP = "cold-chain"


@dataclass
class Fleet:
    """The files ``broker-config`` wrote and the hub's broker, started from them."""

    out: Path
    ca: CertificateAuthority
    broker: ConfiguredMosquitto
    certificates: bool

    def login(self, site: str, monkeypatch: pytest.MonkeyPatch, *, password: str | None = None) -> Broker:
        """The hub's broker as ``site`` logs in to it: its password, or its certificate."""
        if self.certificates:
            own = self.out / "certs" / site
            tls = TLS(ca_file=str(own / "ca.pem"), cert_file=str(own / "cert.pem"), key_file=str(own / "key.pem"))
            return Broker(scheme="mqtts", host="127.0.0.1", port=self.broker.port, tls=tls)
        env = f"TEST_MQTT_PASSWORD_{site.replace('-', '_').upper()}"
        monkeypatch.setenv(env, password or (self.out / "credentials" / site).read_text().strip())
        tls = TLS(ca_file=str(self.ca.cert_file))
        return Broker("mqtts", "127.0.0.1", self.broker.port, username=site, password_env=env, tls=tls)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the ``mosquitto`` account can reach (pytest's own are 0700, for their owner alone)."""
    path = Path(tempfile.mkdtemp(prefix="spanedge-broker-config-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _fleet(base: Path, identity: str) -> Iterator[Fleet]:
    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    hub_port = free_port()
    (base / "sites.yaml").write_text(SITES.format(hub=hub_port, gw9=free_port()))
    out = base / "mqtt"
    args = ["broker-config", "--sites", str(base / "sites.yaml"), "--out", str(out), "--ca-dir", str(base / "ca")]
    result = CliRunner().invoke(cli, [*args, "--identity", identity, "--observer", "watcher"])
    assert result.exit_code == 0, result.output
    ca = CertificateAuthority.open(base / "ca")
    with ConfiguredMosquitto(out / "mosquitto.conf", hub_port, base / "logs") as broker:
        yield Fleet(out, ca, broker, identity == "certificate")


@pytest.fixture(params=["password", "certificate"])
def fleet(shared_dir: Path, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    yield from _fleet(shared_dir, request.param)


@pytest.fixture
def certificate_fleet(shared_dir: Path) -> Iterator[Fleet]:
    yield from _fleet(shared_dir, "certificate")


def test_the_generated_config_is_the_whole_config(fleet: Fleet) -> None:
    conf = (fleet.out / "mosquitto.conf").read_text()
    assert conf.count("listener ") == 1
    assert f"listener {fleet.broker.port} 127.0.0.1\n" in conf
    if os.geteuid() == 0:  # the files a root-started Mosquitto reads belong to the account it switches to
        assert "user mosquitto\n" in conf
        assert (fleet.out / "acl").stat().st_uid != 0
    # sessions are persisted where the config says
    fleet.broker.stop()
    assert (fleet.out / "data" / "mosquitto.db").is_file()


def test_a_site_publishes_its_own_data_and_not_another_sites(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = Session(fleet.login("cloud", monkeypatch), "hub-in")
    truck7 = Session(fleet.login("truck-7", monkeypatch), "truck-7-out")
    try:
        assert hub.refused is None
        assert truck7.refused is None
        _, mid = hub.client.subscribe(f"{topics.PREFIX}/{APP}/#", 1)
        wait_for(lambda: mid in hub.subacks, what="the hub's SUBACK")
        # the forged message first: on one connection the broker keeps the order
        truck7.publish(topics.data(APP, "readings", "truck-9"), b"forged")
        truck7.publish(topics.data(APP, "readings", "truck-7"), b"own")
        wait_for(lambda: hub.messages, what="truck-7's own data at the hub")
    finally:
        truck7.close()
        hub.close()
    assert hub.messages == [(topics.data(APP, "readings", "truck-7"), b"own")]


def test_a_site_reads_its_own_plan_only(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = Session(fleet.login("cloud", monkeypatch), "hub-plans")
    truck7 = Session(fleet.login("truck-7", monkeypatch), "truck-7-plans")
    try:
        hub.publish(topics.control("truck-9", "plan"), b"plan of truck-9", retain=True)
        hub.publish(topics.control("truck-7", "plan"), b"plan of truck-7", retain=True)
        truck7.client.subscribe([(topics.control("truck-9", "plan"), 1), (topics.control("truck-7", "plan"), 1)])
        wait_for(lambda: truck7.messages, what="truck-7's own retained plan")
    finally:
        truck7.close()
        hub.close()
    assert truck7.messages == [(topics.control("truck-7", "plan"), b"plan of truck-7")]


def test_an_anonymous_client_is_refused(fleet: Fleet) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="anonymous")
    client.tls_set(ca_certs=str(fleet.ca.cert_file))
    outcome = _refused(client, fleet.broker.port)
    # a password broker answers with a failed CONNACK; a certificate broker ends the TLS handshake
    assert isinstance(outcome, OSError) or "connack" not in outcome or outcome["connack"].is_failure


def test_a_plain_connection_is_refused(fleet: Fleet) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="plain")
    outcome = _refused(client, fleet.broker.port)
    assert isinstance(outcome, OSError) or "connack" not in outcome or outcome["connack"].is_failure


def test_a_wrong_identity_is_refused_or_held_to_its_own_topics(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    if not fleet.certificates:
        # truck-9's name with truck-7's password
        truck7_password = (fleet.out / "credentials" / "truck-7").read_text().strip()
        session = Session(fleet.login("truck-9", monkeypatch, password=truck7_password), "truck-9-wrong")
        session.close()
        assert session.refused is not None
        assert session.refused.is_failure
        return
    # truck-7's certificate with truck-9's name as username: the certificate's name is the identity
    hub = Session(fleet.login("cloud", monkeypatch), "hub-in")
    broker = fleet.login("truck-7", monkeypatch)
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="truck-9-claimed")
    client.username_pw_set("truck-9")
    assert broker.tls is not None
    client.tls_set(ca_certs=broker.tls.ca_file, certfile=broker.tls.cert_file, keyfile=broker.tls.key_file)
    try:
        _, mid = hub.client.subscribe(f"{topics.PREFIX}/{APP}/#", 1)
        wait_for(lambda: mid in hub.subacks, what="the hub's SUBACK")
        client.connect("127.0.0.1", fleet.broker.port)
        client.loop_start()
        client.publish(topics.data(APP, "readings", "truck-9"), b"forged", qos=1).wait_for_publish(20)
        client.publish(topics.data(APP, "readings", "truck-7"), b"own", qos=1).wait_for_publish(20)
        wait_for(lambda: hub.messages, what="the message on truck-7's own topic")
    finally:
        client.disconnect()
        client.loop_stop()
        hub.close()
    assert hub.messages == [(topics.data(APP, "readings", "truck-7"), b"own")]


def test_a_certificate_of_another_ca_is_refused(certificate_fleet: Fleet, shared_dir: Path) -> None:
    other = CertificateAuthority.open(shared_dir / "other-ca")
    csr, key = new_request("truck-7")
    (shared_dir / "forged.pem").write_bytes(other.issue_client("truck-7", csr))
    (shared_dir / "forged-key.pem").write_bytes(key)
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="forged")
    client.tls_set(
        ca_certs=str(certificate_fleet.ca.cert_file),
        certfile=str(shared_dir / "forged.pem"),
        keyfile=str(shared_dir / "forged-key.pem"),
    )
    outcome = _refused(client, certificate_fleet.broker.port)
    assert isinstance(outcome, OSError) or "connack" not in outcome or outcome["connack"].is_failure


def test_a_revoked_certificate_is_refused(certificate_fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    before = Session(certificate_fleet.login("truck-7", monkeypatch), "truck-7-before")
    before.close()
    assert before.refused is None
    assert certificate_fleet.ca.revoke("truck-7", "lost gateway")
    certificate_fleet.broker.stop()  # the broker reads crl.pem when it starts
    certificate_fleet.broker.start()
    broker = certificate_fleet.login("truck-7", monkeypatch)
    assert broker.tls is not None
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="truck-7-revoked")
    client.tls_set(ca_certs=broker.tls.ca_file, certfile=broker.tls.cert_file, keyfile=broker.tls.key_file)
    outcome = _refused(client, certificate_fleet.broker.port)
    assert isinstance(outcome, OSError) or "connack" not in outcome or outcome["connack"].is_failure
    log = certificate_fleet.broker.workdir / certificate_fleet.broker.log_name
    # the broker logs the refusal after the client sees it
    wait_for(lambda: "certificate verify failed" in log.read_text(), 120, what="the broker to log the refusal")
    other = Session(certificate_fleet.login("truck-9", monkeypatch), "truck-9-after")  # the CA's other sites: in
    other.close()
    assert other.refused is None
