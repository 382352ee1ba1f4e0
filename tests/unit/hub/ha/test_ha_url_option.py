"""``spanedge hub --ha-url``: the URL a leader records with its lease, checked before the hub starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hub.ha.node import HaNode
from spanedge.cli import cli
from tests.conftest import EXAMPLES
from tests.keys import key_env

SITES = str(EXAMPLES / "cold_chain" / "sites.yaml")
TOKEN = "hub-admin-token-0123456789abcdef012345"


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The sites and config the command started an HA hub with (the hub itself does not run)."""
    import hub.ha.node

    configs: list[Any] = []

    class Node:
        def __init__(self, sites: object, config: Any) -> None:
            configs.append((sites, config))

        def serve(self) -> None:
            return

    monkeypatch.setattr(hub.ha.node, "HaNode", Node)
    return configs


def run(tmp_path: Path, *args: str) -> Any:
    argv = ["hub", "--sites", SITES, "--no-spark", "--state-dir", str(tmp_path / "hub"), "--ha", "postgresql://db/x"]
    return CliRunner().invoke(cli, [*argv, *args], env={**key_env(tmp_path), "SPANEDGE_TOKEN": TOKEN})


def test_the_url_given_is_kept_without_its_trailing_slash(tmp_path: Path, started: list[Any]) -> None:
    result = run(tmp_path, "--ha-url", "https://hub-a.example.com:8443/")
    assert result.exit_code == 0, result.output
    sites, config = started[0]
    assert config.ha.url == "https://hub-a.example.com:8443"
    assert HaNode(sites, config).lease.store.url == "https://hub-a.example.com:8443"  # type: ignore[attr-defined]


def test_without_it_the_node_advertises_the_url_it_serves_on(tmp_path: Path, started: list[Any]) -> None:
    result = run(tmp_path, "--host", "127.0.0.1", "--port", "8123")
    assert result.exit_code == 0, result.output
    ((sites, config),) = started
    assert config.ha.url is None
    node = HaNode(sites, config)  # nothing connects until it serves
    assert node.url == "https://127.0.0.1:8123"
    assert node.lease.store.url == node.url  # type: ignore[attr-defined]


def test_a_url_that_is_not_one_is_a_usage_error_before_the_hub_starts(tmp_path: Path, started: list[Any]) -> None:
    result = run(tmp_path, "--ha-url", "hub-a:8443")
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--ha-url'" in result.output
    assert "must be http(s)://HOST[:PORT]" in result.output
    assert "Traceback" not in result.output
    assert started == []
