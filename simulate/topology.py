"""A simulated topology: one broker per site, WAN links between every pair, per-process sites files.

Each process gets its own ``sites.yaml`` in the run directory, in which its
own site's broker is direct and every other site's broker is the proxy of the
link between the two sites, so every inter-site byte crosses the emulated WAN.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
from pathlib import Path
from typing import Protocol

import yaml

from simulate.broker import Mosquitto, mosquitto_path
from simulate.config import Simulation, resolve_links
from simulate.wan import LinkProxy, WanLink
from spanedge.errors import SpanEdgeError
from spanedge.sites import Sites


class BrokerProcess(Protocol):
    """What the simulator needs of a site broker."""

    port: int

    @property
    def url(self) -> str:
        """``mqtt://127.0.0.1:<port>``."""

    @property
    def running(self) -> bool:
        """True while the broker runs."""

    def start(self, timeout: float = 10.0) -> object:
        """Start and wait until it listens."""

    def stop(self) -> None:
        """Stop it."""

    def restart(self) -> None:
        """Stop and start on the same port, keeping persisted sessions."""

    def close(self) -> None:
        """Stop and clean up."""


def broker_kind(requested: str = "auto") -> str:
    """``mosquitto`` if installed (or asked for), else ``amqtt`` if importable; raise with both fixes."""
    if requested not in ("auto", "mosquitto", "amqtt"):
        msg = f"broker must be auto, mosquitto or amqtt, got {requested!r}"
        raise SpanEdgeError(msg)
    if requested in ("mosquitto", "auto"):
        try:
            mosquitto_path()
            return "mosquitto"
        except SpanEdgeError:
            if requested == "mosquitto":
                raise
    try:
        import amqtt  # noqa: F401
    except ImportError:
        msg = (
            "no MQTT broker to simulate with: install Mosquitto ('apt-get install mosquitto' or "
            "'brew install mosquitto') or the embedded Python broker with pip install 'spanedge[sim]'"
        )
        raise SpanEdgeError(msg) from None
    return "amqtt"


def make_broker(kind: str, name: str, workdir: Path) -> BrokerProcess:
    """A stopped broker of ``kind`` for site ``name``."""
    if kind == "amqtt":
        from simulate.embedded import EmbeddedBroker

        embedded: BrokerProcess = EmbeddedBroker(workdir=workdir, name=name)
        return embedded
    return Mosquitto(workdir=workdir, name=name, extra_config="sys_interval 1\n")


class Topology:
    """Brokers, WAN links and proxies of a simulated set of sites."""

    def __init__(self, sites: Sites, sim: Simulation, run_dir: Path, broker: str = "auto") -> None:
        """Plan the topology; :meth:`start` starts brokers and proxies."""
        self.sites = sites
        self.sim = sim
        self.run_dir = run_dir
        self.broker_kind = broker_kind(broker)
        self.brokers: dict[str, BrokerProcess] = {
            name: make_broker(self.broker_kind, name, run_dir / "brokers" / name) for name in sites.sites
        }
        self.links: dict[frozenset[str], WanLink] = {}
        for i, wan in enumerate(resolve_links(sites, sim)):
            link = WanLink(wan.a, wan.b, wan.delay_ms, wan.jitter_ms, wan.bandwidth_mbps, seed=sim.seed * 1000 + i)
            self.links[frozenset((wan.a, wan.b))] = link
        self.proxies: dict[tuple[str, str], LinkProxy] = {}
        self.files: dict[str, Path] = {}
        atexit.register(self._close_brokers)

    def link(self, a: str, b: str) -> WanLink:
        """The link between two sites."""
        return self.links[frozenset((a, b))]

    def links_of(self, site: str) -> list[WanLink]:
        """Every link with ``site`` at one end."""
        return [lk for key, lk in self.links.items() if site in key]

    async def start(self) -> None:
        """Start every broker, then a proxy per ordered pair of sites, and write the sites files."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, b.start) for b in self.brokers.values()))
        for src in self.sites.sites:
            for dst in self.sites.sites:
                if src != dst:
                    proxy = LinkProxy(self.link(src, dst), src, dst, self.brokers[dst].port)
                    self.proxies[(src, dst)] = await proxy.start()
        for name in self.sites.sites:
            self.files[name] = self.write_sites_file(name)

    def broker_url(self, seen_from: str, site: str) -> str:
        """The URL of ``site``'s broker as a process at ``seen_from`` must use."""
        if seen_from == site:
            return self.brokers[site].url
        return self.proxies[(seen_from, site)].url

    def write_sites_file(self, seen_from: str) -> Path:
        """Write the sites file for processes at ``seen_from`` and return its path."""
        data = self.sites.model_dump(mode="json", exclude={"simulation"}, exclude_none=True)
        for name, site in data["sites"].items():
            site.pop("name", None)
            site["broker"] = self.broker_url(seen_from, name)
        path = self.run_dir / "sites" / f"{seen_from}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        header = f"# sites as seen from {seen_from}: remote brokers go through the emulated WAN\n"
        path.write_text(header + yaml.safe_dump(data, sort_keys=False))
        return path

    def partition(self, site: str) -> None:
        """Cut every link of ``site``."""
        for link in self.links_of(site):
            link.partition()

    def heal(self, site: str) -> None:
        """Heal every link of ``site``."""
        for link in self.links_of(site):
            link.heal()

    def set_latency(self, site: str, delay_ms: float) -> None:
        """Set the one-way delay of every link of ``site``."""
        for link in self.links_of(site):
            link.set_delay(delay_ms)

    def wan_bytes(self) -> dict[str, dict[str, int]]:
        """Bytes delivered per link and direction."""
        return {link.name: link.bytes() for link in self.links.values()}

    @property
    def wan_total(self) -> int:
        """Bytes delivered over every link, both directions."""
        return sum(link.total_bytes for link in self.links.values())

    async def stop(self) -> None:
        """Stop the proxies and the brokers."""
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                await proxy.stop()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._close_brokers)

    def _close_brokers(self) -> None:
        for broker in self.brokers.values():
            with contextlib.suppress(Exception):
                broker.stop()
