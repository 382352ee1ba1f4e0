"""Per-process sites files: the own broker direct, every remote broker behind its WAN proxy."""

from __future__ import annotations

from pathlib import Path

import pytest

from hub.control.brokers import BrokerFiles
from simulate.config import parse_simulation
from simulate.topology import OBSERVER, PASSWORD_ENV, Topology, broker_kind
from simulate.wan import LinkProxy
from spanedge.errors import SpanEdgeError
from spanedge.sites import load_sites
from tests.conftest import EXAMPLES, missing_part


def test_each_site_sees_remote_brokers_through_the_wan(tmp_path: Path) -> None:
    sites = load_sites(EXAMPLES / "cold_chain" / "sites.yaml")
    try:
        topology = Topology(sites, parse_simulation(sites), tmp_path)
    except SpanEdgeError as exc:
        missing_part(f"needs a broker: {exc}")
    for i, broker in enumerate(topology.brokers.values()):
        broker.port = 20000 + i  # nothing is started: only the files are written
    port = 30000
    for src in sites.sites:
        for dst in sites.sites:
            if src != dst:
                proxy = LinkProxy(topology.link(src, dst), src, dst, topology.brokers[dst].port)
                proxy.port = port = port + 1
                topology.proxies[(src, dst)] = proxy
    path = topology.write_sites_file("truck-7")
    seen = load_sites(path)
    assert seen.simulation is None
    assert seen.sites["truck-7"].broker == topology.brokers["truck-7"].url
    for other in ("cloud", "truck-9", "warehouse-north"):
        proxy = topology.proxies[("truck-7", other)]
        assert seen.sites[other].broker == f"mqtts://127.0.0.1:{proxy.port}"  # TLS end to end through the proxy
        assert seen.sites[other].streams == sites.sites[other].streams
    for site in seen.sites.values():  # truck-7's processes log in to every broker as truck-7, trusting the run's CA
        broker = site.mqtt()
        assert (broker.scheme, broker.username, broker.password_env) == ("mqtts", "truck-7", PASSWORD_ENV)
        assert broker.tls is not None
        assert broker.tls.ca_file == str(topology.ca_file)
    assert topology.env("truck-7") == {PASSWORD_ENV: topology.passwords["truck-7"]}
    assert set(topology.passwords) == {*sites.sites, OBSERVER}
    own = topology.acl_file("truck-7").read_text()
    assert "user truck-7\ntopic write spanedge/v1/+/+/truck-7" in own
    assert "topic readwrite #" in own.split("user truck-7\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "user truck-9\ntopic write spanedge/v1/+/+/truck-9\ntopic write spanedge/v1/control/truck-9/heartbeat" in (
        topology.acl_file("cloud").read_text()
    )
    # the hub, given the ACL directory, writes the same files from its own view of the sites
    hub_files = tmp_path / "hub-acl"
    BrokerFiles(hub_files, observers=[OBSERVER]).write(load_sites(topology.write_sites_file("cloud")), ())
    for site in sites.sites:
        written = hub_files / topology.acl_file(site).relative_to(topology.acl_dir)
        assert written.read_text() == topology.acl_file(site).read_text(), site
    assert (tmp_path / "brokers" / "passwords").read_text().count("$7$") == len(topology.passwords)
    assert seen.links == sites.links
    assert len(topology.links) == 6
    assert {lk.name for lk in topology.links_of("truck-7")} == {
        "cloud<->truck-7",
        "truck-7<->truck-9",
        "truck-7<->warehouse-north",
    }
    topology.set_latency("truck-7", 300)
    assert topology.link("truck-7", "cloud").way("cloud", "truck-7").delay_ms == 300
    assert topology.link("truck-9", "cloud").way("cloud", "truck-9").delay_ms == 70
    topology.partition("truck-9")
    assert topology.link("truck-9", "warehouse-north").cut
    assert not topology.link("truck-7", "cloud").cut
    topology.heal("truck-9")
    assert not topology.link("truck-9", "warehouse-north").cut


def test_insecure_brokers_are_plain_and_anonymous(tmp_path: Path) -> None:
    sites = load_sites(EXAMPLES / "cold_chain" / "sites.yaml")
    try:
        topology = Topology(sites, parse_simulation(sites), tmp_path, secure=False)
    except SpanEdgeError as exc:
        missing_part(f"needs a broker: {exc}")
    assert topology.env("truck-7") == {}
    assert topology.login(OBSERVER) is None
    assert topology.brokers["truck-7"].url.startswith("mqtt://")
    assert not (tmp_path / "brokers" / "passwords").exists()


def test_unknown_broker_kind_is_refused() -> None:
    with pytest.raises(SpanEdgeError, match="broker must be auto, mosquitto or amqtt"):
        broker_kind("rabbit")


def test_the_embedded_broker_is_refused_when_brokers_must_be_secure(tmp_path: Path) -> None:
    from simulate.broker import BrokerSecurity
    from simulate.tls import make_tls
    from simulate.topology import make_broker

    security = BrokerSecurity(make_tls(tmp_path / "tls"), tmp_path / "passwords", tmp_path / "acl")
    with pytest.raises(SpanEdgeError, match="cannot enforce per-site credentials, ACLs and TLS.*--insecure-brokers"):
        make_broker("amqtt", "cloud", tmp_path / "b", security)
