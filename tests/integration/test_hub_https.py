"""The hub process serves its REST API over HTTPS: its CA's certificate or the operator's, verified by every client."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hub.api.client import HubClient, HubError
from simulate.broker import free_port
from spanedge.ca import CertificateAuthority, fingerprint
from tests.integration.hubkit import CLI, ROOT, api_status, hub_ca, start_hub
from tests.keys import key_env
from tests.polling import wait_for

TOKEN = "https-test-token-0123456789abcdef012345"
COLD_CHAIN = ROOT / "examples" / "cold_chain"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hub_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    return {**env, "SPANEDGE_TOKEN": TOKEN, **key_env(tmp_path)}


@pytest.fixture
def sites_file(mosquitto: Any, tmp_path: Path) -> Path:
    path = tmp_path / "sites.yaml"
    path.write_text((COLD_CHAIN / "sites.yaml").read_text().replace("mqtt://localhost:1883", mosquitto.url))
    return path


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def status(url: str, env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    """``spanedge status`` against ``url``; the caller checks its code and output."""
    command = [*CLI, "status", "--hub-url", url, *options]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def running_hub(sites_file: Path, tmp_path: Path, hub_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """A hub with the certificate its CA issues; yields its URL and its log."""
    port, log = free_port(), tmp_path / "hub.log"
    with log.open("wb") as output:
        proc = start_hub(sites_file, tmp_path / "state", port, hub_env, output=output)
        try:
            url = f"https://127.0.0.1:{port}"
            wait_for(lambda: api_status(f"{url}/healthz", hub_ca(tmp_path / "state")) == 200, 60, "the hub over HTTPS")
            yield url, log
        finally:
            stop(proc)


def test_the_hub_serves_https_that_clients_trusting_its_ca_verify(
    running_hub: tuple[str, Path], tmp_path: Path, hub_env: dict[str, str]
) -> None:
    url, log = running_hub
    ca = hub_ca(tmp_path / "state")
    logged = log.read_text()
    assert f"clients trust {ca} (--hub-ca or SPANEDGE_HUB_CA)" in logged, logged
    assert f"SHA-256 fingerprint {fingerprint(ca.read_bytes())}" in logged, logged
    assert (tmp_path / "state" / "tls" / "server.pem").exists()

    assert [s["site"] for s in HubClient(url, TOKEN, ca_file=ca).sites()][:1] == ["cloud"]
    by_option = status(url, hub_env, "--hub-ca", str(ca))
    assert by_option.returncode == 0, by_option.stderr
    assert "truck-7" in by_option.stdout
    by_env = status(url, {**hub_env, "SPANEDGE_HUB_CA": str(ca)})
    assert by_env.returncode == 0, by_env.stderr
    assert by_env.stdout == by_option.stdout


def test_a_client_trusting_another_ca_is_refused_with_the_fix(
    running_hub: tuple[str, Path], tmp_path: Path, hub_env: dict[str, str]
) -> None:
    url, _ = running_hub
    other = CertificateAuthority.open(tmp_path / "other-ca").cert_file
    with pytest.raises(HubError, match=f"the certificate of the hub at {url} does not verify: .*--hub-ca FILE"):
        HubClient(url, TOKEN, ca_file=other).apps()
    for options in (("--hub-ca", str(other)), ()):  # another CA, or the system's CAs: no fallback to no check
        done = status(url, hub_env, *options)
        assert done.returncode == 2
        assert done.stderr.startswith(f"error: the certificate of the hub at {url} does not verify: "), done.stderr
        assert "unable to get local issuer certificate" in done.stderr
        assert "--hub-ca FILE or SPANEDGE_HUB_CA" in done.stderr
        assert done.stdout == ""


def test_the_hub_serves_the_certificate_it_is_given(sites_file: Path, tmp_path: Path, hub_env: dict[str, str]) -> None:
    operator = CertificateAuthority.open(tmp_path / "operator-ca")
    given = operator.write_server_files(tmp_path / "given", ("127.0.0.1",))
    port, state = free_port(), tmp_path / "state"
    env = {**hub_env, "SPANEDGE_HUB_TLS_KEY": str(given.key_file)}
    proc = start_hub(sites_file, state, port, env, "--tls-cert", str(given.cert_file))
    try:
        url = f"https://127.0.0.1:{port}"
        wait_for(lambda: api_status(f"{url}/healthz", operator.cert_file) == 200, 60, "the hub over HTTPS")
        assert HubClient(url, TOKEN, ca_file=operator.cert_file).apps() == []
        assert not (state / "tls").exists()
    finally:
        stop(proc)


def test_plain_http_is_refused_on_an_address_other_hosts_reach(
    sites_file: Path, tmp_path: Path, hub_env: dict[str, str]
) -> None:
    proc = start_hub(sites_file, tmp_path / "state", free_port(), hub_env, "--plain-http", "--host", "0.0.0.0")
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    text = " ".join(output.decode().split())
    assert "error: --plain-http sends the API's bearer tokens in clear" in text, text
    assert "not --host 0.0.0.0; drop --plain-http to serve HTTPS" in text, text


def test_plain_http_on_loopback_is_served_with_a_warning(
    sites_file: Path, tmp_path: Path, hub_env: dict[str, str]
) -> None:
    port, log = free_port(), tmp_path / "hub.log"
    with log.open("wb") as output:
        proc = start_hub(sites_file, tmp_path / "state", port, hub_env, "--plain-http", output=output)
        try:
            client = HubClient(f"http://127.0.0.1:{port}", TOKEN)
            wait_for(lambda: _answers(client), 60, "the hub over plain HTTP")
            assert client.apps() == []
            with pytest.raises(HubError, match=f"does not speak TLS .*use http://127.0.0.1:{port}"):
                HubClient(f"https://127.0.0.1:{port}", TOKEN).apps()
        finally:
            stop(proc)
    logged = log.read_text()
    assert "WARNING" in logged
    assert "the REST API serves plain HTTP on 127.0.0.1 (--plain-http)" in logged, logged


def _answers(client: HubClient) -> bool:
    try:
        client.health(timeout=2)
    except HubError:
        return False
    return True
