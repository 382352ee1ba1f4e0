"""The MQTT client layer: each role's settings, the broker's credentials and TLS reach the paho client."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from spanedge import mqtt
from spanedge.errors import InvalidSites
from spanedge.mqtt import ClientSettings, connect, make_client
from spanedge.sites import TLS, Broker

PLAIN = Broker(scheme="mqtt", host="127.0.0.1", port=9)
ROLES = {
    "agent intake": mqtt.AGENT_INTAKE,
    "agent hub link": mqtt.AGENT_HUB_LINK,
    "agent sink": mqtt.AGENT_SINK,
    "hub ingest": mqtt.HUB_INGEST,
    "hub distribution": mqtt.HUB_DISTRIBUTION,
    "hub sink": mqtt.HUB_SINK,
}


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate and its key, the certificate also serving as the CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "broker.crt", tmp_path / "broker.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


@pytest.mark.parametrize("role", ROLES)
def test_a_roles_settings_are_applied_to_the_client(role: str) -> None:
    settings = ROLES[role]
    client = make_client(PLAIN, f"test-{role}", settings)
    assert client._client_id == f"test-{role}".encode()
    assert client.protocol == paho.MQTTv311
    assert client._clean_session is not settings.persistent
    assert client._manual_ack is settings.manual_ack
    assert client.max_inflight_messages == settings.max_inflight
    assert client.max_queued_messages == settings.max_queued
    assert (client._reconnect_min_delay, client._reconnect_max_delay) == (
        settings.reconnect_min_s,
        settings.reconnect_max_s,
    )
    assert client.username is None
    assert client._ssl_context is None


def test_custom_settings_are_applied_and_the_keepalive_when_connecting() -> None:
    settings = ClientSettings(
        persistent=True,
        manual_ack=True,
        keepalive=7,
        max_inflight=3,
        max_queued=11,
        reconnect_min_s=2,
        reconnect_max_s=9,
    )
    client = make_client(PLAIN, "custom", settings)
    assert (client.max_inflight_messages, client.max_queued_messages) == (3, 11)
    assert (client._reconnect_min_delay, client._reconnect_max_delay) == (2, 9)
    assert client._clean_session is False
    connect(client, PLAIN, settings)  # in the background: nothing listens on port 9, paho keeps retrying
    try:
        assert (client.host, client.port, client.keepalive) == ("127.0.0.1", 9, 7)
    finally:
        client.loop_stop()


def test_every_role_bounds_what_it_sends_and_states_its_queue() -> None:
    for role, settings in ROLES.items():
        assert settings.max_inflight >= 1, role
    # roles that publish without bounding what they publish themselves have a bounded queue
    for settings in (mqtt.AGENT_INTAKE, mqtt.AGENT_HUB_LINK, mqtt.AGENT_SINK, mqtt.HUB_INGEST):
        assert settings.max_queued > 0
    # the agent and the hub ingest keep their sessions: QoS 1 messages wait for them while they are down
    assert mqtt.AGENT_INTAKE.persistent
    assert mqtt.HUB_INGEST.persistent
    assert mqtt.HUB_INGEST.manual_ack


def test_credentials_come_from_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = Broker(scheme="mqtt", host="h", port=1883, username="agent-a", password_env="TEST_MQTT_PW")
    monkeypatch.setenv("TEST_MQTT_PW", "s3cret")
    client = make_client(broker, "creds", mqtt.AGENT_INTAKE)
    assert (client.username, client.password) == ("agent-a", "s3cret")
    monkeypatch.delenv("TEST_MQTT_PW")
    with pytest.raises(InvalidSites, match="environment variable TEST_MQTT_PW is not set"):
        make_client(broker, "creds", mqtt.AGENT_INTAKE)


def test_tls_comes_from_the_broker_and_verifies_certificates(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    tls = TLS(ca_file=str(cert), cert_file=str(cert), key_file=str(key))
    client = make_client(Broker(scheme="mqtts", host="h", port=8883, tls=tls), "tls", mqtt.HUB_SINK)
    context = client._ssl_context
    assert client._ssl
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "broker.test"),),)]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"keepalive": 0}, "keepalive must be at least 1 s, got 0"),
        ({"max_inflight": 0}, "max_inflight must be at least 1, got 0"),
        ({"max_queued": -1}, r"max_queued must be 0 \(no limit\) or more, got -1"),
        ({"reconnect_min_s": 0}, "reconnect_min_s must be at least 1 s, got 0"),
        ({"reconnect_min_s": 5, "reconnect_max_s": 2}, r"reconnect_max_s \(2\) must be at least reconnect_min_s \(5\)"),
    ],
)
def test_settings_out_of_range_are_refused(changes: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClientSettings(**changes)  # type: ignore[arg-type]
