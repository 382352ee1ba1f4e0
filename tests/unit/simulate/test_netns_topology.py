"""The topology of a namespace run, with the commands recorded instead of run."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulate.config import parse_simulation
from simulate.netns import host
from simulate.netns.topology import NetnsTopology
from spanedge.errors import SpanEdgeError
from spanedge.sites import load_sites
from tests.conftest import EXAMPLES, missing_part


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every ``ip``/``tc`` command the topology would run; a machine that can make namespaces."""
    ran: list[list[str]] = []
    monkeypatch.setattr(host, "unavailable", lambda: None)
    monkeypatch.setattr(host, "lab_blocks_in_use", lambda: set(range(63)))  # only block 63 is free

    def record(argv: list[str]) -> str:
        ran.append(list(argv))
        return ""

    monkeypatch.setattr(host, "check_command", record)
    return ran


def _topology(tmp_path: Path) -> NetnsTopology:
    sites = load_sites(EXAMPLES / "smart_farm" / "sites.yaml")
    try:
        return NetnsTopology(sites, parse_simulation(sites), tmp_path)
    except SpanEdgeError as exc:
        missing_part(f"needs Mosquitto: {exc}")


def test_processes_run_in_their_site_and_reach_others_through_the_router(
    tmp_path: Path, commands: list[list[str]]
) -> None:
    topology = _topology(tmp_path)
    layout = topology.layout
    assert layout.lab_block == 63
    barn = layout.namespace("barn")
    assert topology.wrap("barn", ["spanedge", "agent"]) == ["ip", "netns", "exec", barn, "spanedge", "agent"]
    assert topology.host("barn") == "100.127.2.2"
    broker = topology.brokers["barn"]
    assert broker.command()[:4] == ["ip", "netns", "exec", barn]  # type: ignore[attr-defined]
    assert (
        "listener " + str(broker.port) + " 0.0.0.0\n" in (tmp_path / "brokers" / "barn" / "mosquitto.conf").read_text()
    )
    assert set(layout.addresses()) <= set(topology.tls_hosts())
    proxy = topology.proxy("barn", "cloud")
    assert (proxy.listen_host, proxy.source_host, proxy.target) == (
        "10.77.2.11",
        "10.77.1.12",
        ("10.77.1.2", topology.brokers["cloud"].port),
    )
    # htb caps the bandwidth: the relays do not
    assert all(way.bandwidth_mbps is None for link in topology.links.values() for way in link.ways.values())
    assert topology.link("barn", "cloud").way("barn", "cloud").delay_ms == 120
    for src in topology.sites.sites:
        for dst in topology.sites.sites:
            if src != dst:
                topology.proxies[(src, dst)] = topology.proxy(src, dst)  # not started: only the files are written
                topology.proxies[(src, dst)].port = 40000
    topology.files["barn"] = topology.write_sites_file("barn")
    seen = load_sites(topology.files["barn"])
    assert seen.sites["cloud"].broker == "mqtts://10.77.2.11:40000"
    assert seen.sites["barn"].broker == broker.url
    assert commands == []  # nothing made before start


def test_faults_take_links_down_and_set_delays_where_they_are_shaped(tmp_path: Path, commands: list[list[str]]) -> None:
    topology = _topology(tmp_path)
    r = topology.layout.router
    topology.partition("barn")
    topology.heal("barn")
    assert commands == [["ip", "-n", r, "link", "set", "w2", "down"], ["ip", "-n", r, "link", "set", "w2", "up"]]
    commands.clear()
    topology.set_latency("barn", 300)  # no netem: the relays carry the delay
    assert commands == []
    assert topology.link("barn", "shed").way("shed", "barn").delay_ms == 300
    assert topology.link("cloud", "shed").way("shed", "cloud").delay_ms == 120
    topology.netem = True
    topology.set_latency("barn", 50)
    assert len(commands) == 2 * 4  # both directions of each of the barn's 4 links
    assert all(c[:4] == ["tc", "-n", r, "qdisc"] and c[-3:-1] == ["delay", "50ms"] for c in commands), commands
    assert "netem under each pair's htb class" in " ".join(topology.shaping())
