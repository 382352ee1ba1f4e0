"""Per-process sites files: the own broker direct, every remote broker behind its WAN proxy."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulate.config import parse_simulation
from simulate.topology import Topology, broker_kind
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
        assert seen.sites[other].broker == topology.proxies[("truck-7", other)].url
        assert seen.sites[other].streams == sites.sites[other].streams
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


def test_unknown_broker_kind_is_refused() -> None:
    with pytest.raises(SpanEdgeError, match="broker must be auto, mosquitto or amqtt"):
        broker_kind("rabbit")
