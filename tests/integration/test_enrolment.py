"""Enrolment and revocation end to end: a hub process, real Mosquitto with client certificates, the CLI.

The broker's only listener speaks TLS and requires a client certificate from
the hub's CA (``require_certificate``, ``use_identity_as_username``), with the
ACL and CRL files the hub writes into ``--broker-dir``, and its pid file given
to the hub as ``--broker-pid-file``. ``spanedge site add`` prints a join token;
``spanedge agent join --no-run`` enrols a gateway with it, over the hub's REST API
(HTTPS, verified against the CA the token pins). The gateway's certificate
then logs it in as its site; a replayed and an expired token are refused with
the reason; without ``--no-run`` the joined agent runs and the hub hears its
heartbeats. After ``spanedge site revoke`` the broker, reloaded by SIGHUP and not
restarted, refuses the site's certificate on a new connection and drops what its
old connection publishes, and the hub ingest refuses messages on its topics.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hub.api.client import HubClient
from hub.control.brokers import BrokerFiles
from hub.ingest.consumer import Ingest
from simulate.broker import Mosquitto, free_port, mosquitto_path
from spanedge import topics
from spanedge.ca import CertificateAuthority, new_request
from spanedge.errors import SpanEdgeError
from spanedge.sites import TLS, Broker, load_sites
from spanedge.wire.batch import Record, encode_batch
from tests.conftest import missing_part
from tests.keys import key_env
from tests.polling import wait_for

from .test_broker_acl import Session

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "enrol-admin-token-0123456789abcdef012345"
APP = "cold-chain"


class CertBroker(Mosquitto):
    """Mosquitto whose one listener requires a client certificate of the hub CA; ACL and CRL from the hub."""

    def __init__(self, workdir: Path, ca: CertificateAuthority, broker_dir: Path) -> None:
        self.ca, self.broker_dir = ca, broker_dir
        self.tls = ca.write_server_files(workdir / "tls", ("127.0.0.1",))
        super().__init__(workdir=workdir, name="hub")

    def configure(self) -> None:
        """A TLS listener that takes the certificate's common name as the username."""
        super().configure()
        listener = (
            f"listener {self.port} 127.0.0.1\ncafile {self.tls.ca_file}\ncertfile {self.tls.cert_file}\n"
            f"keyfile {self.tls.key_file}\nrequire_certificate true\nuse_identity_as_username true\n"
            f"crlfile {self.broker_dir / 'crl.pem'}\nacl_file {self.broker_dir / 'acl'}\n"
            "allow_anonymous false\n"
        )
        body = self.config.read_text().split("\n", 2)[2]  # the plain listener's first two lines replaced
        self.config.write_text(listener + body)

    @property
    def url(self) -> str:
        """``mqtts://127.0.0.1:<port>``."""
        return f"mqtts://127.0.0.1:{self.port}"


def _identity(ca: CertificateAuthority, name: str, directory: Path) -> TLS:
    csr, key = new_request(name)
    (directory / f"{name}.pem").write_bytes(ca.issue_client(name, csr))
    (directory / f"{name}-key.pem").write_bytes(key)
    return TLS(str(ca.cert_file), str(directory / f"{name}.pem"), str(directory / f"{name}-key.pem"))


class Fleet:
    """The hub process, its broker and the command line.

    The hub runs the control plane only unless ``spark``; ``options`` go to ``spanedge hub``. Its
    output goes to ``hub.log`` (:meth:`stop` returns it), so a chatty hub never fills a pipe.
    """

    def __init__(self, tmp: Path, *, spark: bool = False, options: tuple[str, ...] = ()) -> None:
        self.tmp = tmp
        self.spark = spark
        self.options = options
        self.log = tmp / "hub.log"
        self.state = tmp / "hub-state"
        self.hub_ca = self.state / "ca" / "ca.pem"
        self.ca = CertificateAuthority.open(self.state / "ca")  # the hub finds and keeps it
        self.broker_dir = tmp / "broker-files"
        self.hub_tls = _identity(self.ca, "cloud", tmp)
        tls = self.hub_tls
        self.sites_file = tmp / "sites.yaml"
        self.broker: CertBroker | None = None
        self.hub: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._tls_line = f'tls: {{ca_file: "{tls.ca_file}", cert_file: "{tls.cert_file}", key_file: "{tls.key_file}"}}'

    def start(self, timeout: float = 60) -> None:
        self.broker = CertBroker(self.tmp / "broker", self.ca, self.broker_dir)
        self.sites_file.write_text(
            f'sites:\n  cloud: {{tier: hub, broker: "{self.broker.url}", cpu: 4, {self._tls_line}}}\n'
        )
        BrokerFiles(self.broker_dir, (), self.ca.crl_file).write(load_sites(self.sites_file), ())
        self.broker.start()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
        env |= {"SPANEDGE_TOKEN": ADMIN, **key_env(self.tmp)}
        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        command = [*self.cli(), "hub", "--sites", str(self.sites_file), "--port", str(port)]
        command += [] if self.spark else ["--no-spark"]
        command += ["--state-dir", str(self.state), "--broker-dir", str(self.broker_dir)]
        command += ["--broker-pid-file", str(self.broker.pid_file), "--down-after", "3600", *self.options]
        with self.log.open("ab") as out:
            self.hub = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        wait_for(lambda: self._healthy(), timeout, f"the hub to answer /healthz (see {self.log})")

    def _healthy(self) -> bool:
        try:
            return bool(HubClient(self.url, ADMIN, ca_file=self.hub_ca).health(timeout=5))
        except SpanEdgeError:
            return False

    @staticmethod
    def cli() -> list[str]:
        return [sys.executable, "-c", "from spanedge.cli import main; main()"]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
        env |= {"SPANEDGE_TOKEN": ADMIN, "SPANEDGE_HUB_URL": self.url, "SPANEDGE_HUB_CA": str(self.hub_ca)}
        return subprocess.run([*self.cli(), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    def hub_login(self) -> Broker:
        assert self.broker is not None
        return Broker(scheme="mqtts", host="127.0.0.1", port=self.broker.port, tls=self.hub_tls)

    def gateway(self, token: str, state_dir: Path, env: dict[str, str] | None = None) -> Gateway:
        """``spanedge agent join`` with ``token`` (and ``env``), running the joined agent, its output in ``state_dir``.log."""
        return Gateway(self.url, token, state_dir, env)

    def stop(self) -> str:
        """Stop the hub (SIGTERM, SIGKILL after 60 s) and the broker; the hub's output."""
        if self.hub is not None:
            self.hub.send_signal(signal.SIGTERM)
            try:
                self.hub.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.hub.kill()
                self.hub.wait(timeout=30)
            self.hub = None
        if self.broker is not None:
            self.broker.close()
            self.broker = None
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Gateway:
    """``spanedge agent join URL TOKEN`` in a subprocess: it enrols, then runs the site's agent."""

    def __init__(self, url: str, token: str, state_dir: Path, extra: dict[str, str] | None = None) -> None:
        self.log = state_dir.with_name(f"{state_dir.name}.log")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")} | (extra or {})
        command = [*Fleet.cli(), "agent", "join", url, token, "--state-dir", str(state_dir)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)

    def stop(self) -> str:
        """SIGTERM the agent (SIGKILL after 30 s); everything it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.log.read_text(errors="replace")


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    running = Fleet(tmp_path)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def add_site(fleet: Fleet, name: str, *extra: str) -> str:
    """``spanedge site add NAME`` with ``extra`` options; the join token it prints."""
    done = fleet.run("site", "add", name, *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _batch(site: str, seqs: range) -> bytes:
    return encode_batch(APP, [Record(site, "readings", s, 1000.0 + s, "u1", {"temp_f": 40.0}) for s in seqs])


def _tls_refused(broker: Broker) -> str:
    """Why the broker refuses a TLS handshake with ``broker``'s client certificate (empty if it accepts one)."""
    import socket

    assert broker.tls is not None
    assert broker.tls.cert_file is not None
    context = ssl.create_default_context(cafile=broker.tls.ca_file)
    context.load_cert_chain(broker.tls.cert_file, broker.tls.key_file)
    try:
        with (
            socket.create_connection((broker.host, broker.port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=broker.host) as tls,
        ):
            tls.settimeout(2)
            tls.sendall(b"\x10\x00")  # TLS 1.3 reports a refused client certificate at the first read
            tls.recv(1)
    except (ssl.SSLError, ConnectionError) as exc:
        return str(exc)
    except TimeoutError:
        return ""
    return ""


def _wait_refused_and_logged(broker: Broker, log: Path, why: str) -> None:
    """Retry the handshake with ``broker``'s certificate until the broker's ``log`` shows the refusal.

    A handshake that meets the broker mid-reload (SIGHUP after a site is added) can be cut before the broker
    logs it, so each poll tries again rather than waiting for one attempt's line.
    """

    def logged() -> bool:
        if "certificate verify failed" in log.read_text():
            return True
        assert _tls_refused(broker), why
        return False

    wait_for(logged, 120, what="the broker to log the refusal", poll=1.0)


def test_a_site_added_and_joined_logs_in_with_its_certificate_until_revoked(fleet: Fleet, tmp_path: Path) -> None:
    client = HubClient(fleet.url, ADMIN, ca_file=fleet.hub_ca)
    token = add_site(fleet, "truck-12", "--labels", "fleet=north,kind=truck")
    joined = fleet.run("agent", "join", fleet.url, token, "--state-dir", str(tmp_path / "gw"), "--no-run")
    assert joined.returncode == 0, joined.stderr
    assert "site truck-12 enrolled" in joined.stdout
    gateway = load_sites(tmp_path / "gw" / "sites.yaml")
    row = next(r for r in client.sites() if r["site"] == "truck-12")
    assert row["labels"] == {"fleet": "north", "kind": "truck"}
    assert row["revoked"] is False
    # the broker takes the certificate's name as the username: truck-12 may publish its own data
    ingest = Ingest(
        fleet.hub_login(),
        tmp_path / "log",
        client_id="hub-ingest",
        revoked=lambda site: any(r["revoked"] for r in client.sites() if r["site"] == site),
    )
    ingest.start()
    truck = Session(gateway.site("cloud").mqtt(), "truck-12-out")
    watcher = Session(fleet.hub_login(), "hub-watch")
    try:
        assert ingest.wait_connected(20)
        assert truck.refused is None
        truck.publish(topics.data(APP, "readings", "truck-12"), _batch("truck-12", range(1, 4)))
        wait_for(lambda: ingest.stats()["apps"].get(APP, {}).get("truck-12"), what="truck-12's batch at the hub")
        _, mid = watcher.client.subscribe(topics.data(APP, "readings", "truck-12"), 1)
        wait_for(lambda: mid in watcher.subacks, what="the watcher's SUBACK")

        revoked = fleet.run("site", "revoke", "truck-12")
        assert revoked.returncode == 0, revoked.stderr
        assert "reloaded (SIGHUP)" in revoked.stdout
        assert fleet.broker is not None
        assert fleet.broker.running
        wait_for(lambda: _tls_refused(gateway.site("cloud").mqtt()), what="the broker to refuse truck-12's certificate")
        # refused in the TLS handshake (the reloaded CRL); the broker logs it after the client sees the refusal
        _wait_refused_and_logged(
            gateway.site("cloud").mqtt(), tmp_path / "broker" / "mosquitto.log", "the revoked certificate got in"
        )
        # the connection truck-12 held stays open, but the reloaded ACL drops what it publishes
        truck.publish(topics.data(APP, "readings", "truck-12"), _batch("truck-12", range(4, 6)))
        watcher.publish(topics.data(APP, "readings", "truck-12"), _batch("truck-12", range(6, 8)))  # a marker
        wait_for(lambda: len(watcher.messages) >= 1, what="the marker")
        assert [orjson_seqs(p) for _, p in watcher.messages] == [[6, 7]]
        # a message on its topic that reaches the hub anyway (the marker) is refused there
        wait_for(lambda: ingest.stats()["site_mismatch"] >= 1, what="the hub ingest to refuse truck-12's message")
        assert ingest.stats()["apps"][APP]["truck-12"]["readings"]["records"] == 3
    finally:
        truck.close()
        watcher.close()
        ingest.stop()
    row = next(r for r in client.sites() if r["site"] == "truck-12")
    assert row["revoked"] is True
    log = fleet.stop()
    assert "site add truck-12 by the admin token of SPANEDGE_TOKEN" in log
    assert "join of site truck-12 from 127.0.0.1: certificate issued" in log
    assert "site revoke truck-12 by the admin token of SPANEDGE_TOKEN" in log


def orjson_seqs(payload: bytes) -> list[int]:
    import orjson

    return [r["seq"] for r in orjson.loads(payload)["records"]]


def test_a_replayed_or_expired_token_is_refused_with_the_reason(fleet: Fleet, tmp_path: Path) -> None:
    token = add_site(fleet, "truck-12")
    first = fleet.run("agent", "join", fleet.url, token, "--state-dir", str(tmp_path / "a"), "--no-run")
    assert first.returncode == 0, first.stderr
    replay = fleet.run("agent", "join", fleet.url, token, "--state-dir", str(tmp_path / "b"), "--no-run")
    assert replay.returncode == 2
    assert "refused the join (403)" in replay.stderr
    assert "already used" in replay.stderr
    assert not (tmp_path / "b" / "identity").exists()

    short = add_site(fleet, "truck-13", "--ttl", "1s")
    time.sleep(1.5)  # the token's lifetime passes
    expired = fleet.run("agent", "join", fleet.url, short, "--state-dir", str(tmp_path / "c"), "--no-run")
    assert expired.returncode == 2
    assert "expired at" in expired.stderr
    assert "spanedge site add truck-13" in expired.stderr

    altered = token[:-8] + ("0" * 8 if not token.endswith("0" * 8) else "1" * 8)
    pinned = fleet.run("agent", "join", fleet.url, altered, "--state-dir", str(tmp_path / "d"), "--no-run")
    assert pinned.returncode == 2
    assert "this is not the hub that made the token" in pinned.stderr  # the altered pin matches no CA
    log = fleet.stop()
    assert "join from 127.0.0.1 refused (403)" in log


def test_a_joined_gateway_runs_its_agent_which_the_hub_hears_until_revoked(fleet: Fleet, tmp_path: Path) -> None:
    """``agent join`` without ``--no-run`` starts the agent, with its options: its heartbeats reach the hub."""
    client = HubClient(fleet.url, ADMIN, ca_file=fleet.hub_ca)
    token = add_site(fleet, "truck-14", "--labels", "kind=truck")
    options = {"SPANEDGE_AGENT_LOG_LEVEL": "DEBUG", "SPANEDGE_AGENT_HEARTBEAT_INTERVAL": "1"}  # the agent's own
    agent = fleet.gateway(token, tmp_path / "gw", options)
    try:
        wait_for(
            lambda: any(r["site"] == "truck-14" and r["alive"] for r in client.sites()),
            60,
            "truck-14's heartbeat at the hub",
        )
        assert fleet.run("site", "revoke", "truck-14").returncode == 0
        row = next(r for r in client.sites() if r["site"] == "truck-14")
        assert row["revoked"] is True
    finally:
        output = agent.stop()
    assert "site truck-14 enrolled" in output
    assert "running its agent" in output
    assert " DEBUG " in output, output[-2000:]  # SPANEDGE_AGENT_LOG_LEVEL reached the agent


def test_a_wrong_site_or_forged_certificate_is_refused_with_a_clear_line(fleet: Fleet, tmp_path: Path) -> None:
    """The agent refuses another site's certificate before it connects; the broker refuses another CA's."""
    add_site(fleet, "truck-13")
    joined = fleet.run(
        "agent", "join", fleet.url, add_site(fleet, "truck-12"), "--state-dir", str(tmp_path / "gw"), "--no-run"
    )
    assert joined.returncode == 0, joined.stderr
    command = ["agent", "--site", "truck-13", "--sites", str(tmp_path / "gw" / "sites.yaml")]
    posing = fleet.run(*command, "--state-dir", str(tmp_path / "posing"))
    assert posing.returncode == 2, posing.stderr
    assert "names site 'truck-12', but this process runs site 'truck-13'" in posing.stderr
    assert "use the certificate 'spanedge agent join' made for 'truck-13'" in posing.stderr
    forger = CertificateAuthority.open(tmp_path / "forger-ca", name="a forger's CA")
    forged = _identity(forger, "truck-12", tmp_path)
    assert fleet.broker is not None
    tls = TLS(str(fleet.ca.cert_file), forged.cert_file, forged.key_file)
    forging = Broker(scheme="mqtts", host="127.0.0.1", port=fleet.broker.port, tls=tls)
    why = "the broker accepted a certificate another CA issued"
    assert _tls_refused(forging), why
    _wait_refused_and_logged(forging, tmp_path / "broker" / "mosquitto.log", why)
