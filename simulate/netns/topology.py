"""The topology of a run whose sites are network namespaces (``--hosts netns``).

What shapes what:

* partitions: the site's WAN link is taken down (``ip link set ... down`` at
  the router's end) and brought up to heal; open connections are not closed
  for it, they stall as on a real cut link;
* bandwidth: an htb class per pair of sites and direction on the router's
  end of the receiving site's link;
* delay and jitter: a netem leaf under that class when the kernel has netem;
  otherwise the relays in the router namespace, which carry every
  connection between two sites, hold each chunk for the delay plus jitter
  (the model of :mod:`simulate.wan`, without its bandwidth clock);
* loss: ``sites.yaml`` has no loss to emulate.

The relays also count the bytes of each link for the report.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import secrets
from collections.abc import Collection
from pathlib import Path

from simulate.broker import Mosquitto
from simulate.config import Simulation, resolve_links
from simulate.errors import SimulationError
from simulate.netns import host
from simulate.netns.enter import NamespaceSockets
from simulate.netns.layout import Layout, Shape, delay_commands, link_command, setup_commands, shaping_commands
from simulate.topology import Topology
from simulate.wan import LinkProxy
from spanedge.sites import Sites

#: What a namespace run writes to its run directory about its network.
NETNS_RECORD = "netns.json"


def new_layout(sites: Sites) -> Layout:
    """A layout with a fresh tag and a lab block no address of this namespace uses.

    Raises:
        SimulationError: every lab block is in use.
    """
    used = host.lab_blocks_in_use()
    free = [k for k in range(64) if k not in used]
    if not free:
        msg = "every lab block 100.64.0.0/16 to 100.127.0.0/16 is in use here; remove stale addresses or runs"
        raise SimulationError(msg)
    block = free[secrets.randbelow(len(free))]
    return Layout(pid=os.getpid(), tag=secrets.token_hex(2), lab_block=block, sites=tuple(sites.sites))


class NetnsTopology(Topology):
    """Brokers and processes in one network namespace per site, linked through a router namespace."""

    def __init__(
        self,
        sites: Sites,
        sim: Simulation,
        run_dir: Path,
        broker: str = "auto",
        *,
        secure: bool = True,
        joining: Collection[str] = (),
    ) -> None:
        """Plan the namespaces (nothing is created until :meth:`start`).

        Raises:
            SimulationError: this machine cannot make namespaces, or the broker is not Mosquitto.
        """
        reason = host.unavailable()
        if reason is not None:
            raise SimulationError(reason)
        self.layout = new_layout(sites)
        super().__init__(sites, sim, run_dir, broker, secure=secure, joining=joining)
        if self.broker_kind != "mosquitto":
            msg = "--hosts netns runs Mosquitto in each site's namespace: install it (apt-get install mosquitto)"
            raise SimulationError(msg)
        self.wan_params = {frozenset((w.a, w.b)): w for w in resolve_links(sites, sim)}
        self.netem = False
        self.created = False
        self.sockets: NamespaceSockets | None = None
        for name, server in self.brokers.items():
            assert isinstance(server, Mosquitto)
            server.bind = "0.0.0.0"  # inside the site's own namespace
            server.command_prefix = self.layout.exec_prefix(name)
            server.reach = self.layout.lab_address(name)
            server.configure()
        for link in self.links.values():  # htb caps the bandwidth; the relays keep delay and jitter for now
            for way in link.ways.values():
                way.bandwidth_mbps = None

    def tls_hosts(self) -> tuple[str, ...]:
        """Loopback and every address of the run's namespaces."""
        return ("127.0.0.1", "localhost", *self.layout.addresses())

    def host(self, site: str) -> str:
        """The site's address on its lab link."""
        return self.layout.lab_address(site)

    def rest_options(self, hub: str) -> list[str]:
        """Listen on every address of the hub's namespace: its lab link, and its WAN link for the joiners' relays.

        The REST certificate names the lab address and the relay address of each spoke that joins.
        """
        names = [self.layout.lab_address(hub), *(self.layout.relay_address(s, hub) for s in sorted(self.joining))]
        return ["--host", "0.0.0.0", *(arg for name in names for arg in ("--tls-name", name))]

    def wrap(self, site: str, argv: list[str]) -> list[str]:
        """``ip netns exec <site's namespace> argv``."""
        return [*self.layout.exec_prefix(site), *argv]

    def shaping(self) -> list[str]:
        """What carries each property here: namespaces, htb, netem or the relays."""
        where = "netem under each pair's htb class" if self.netem else "the relays in the router namespace"
        why = "" if self.netem else " (this kernel has no netem)"
        return [
            f"hosts: one network namespace per site ({self.layout.run}-*), linked through a router namespace",
            "partitions: the site's WAN link taken down (ip link set down) and up again",
            "bandwidth: tc htb per pair of sites and direction, in the router namespace",
            f"delay and jitter: {where}{why}",
            "loss: not emulated (sites.yaml declares none)",
        ]

    async def start(self) -> None:
        """Sweep dead runs' leftovers, create the namespaces and links, shape them, then start as usual."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._create)
        self.sockets = NamespaceSockets(self.layout.router)
        await super().start()

    def _create(self) -> None:
        host.sweep()
        atexit.register(self._remove)
        self.created = True
        for argv in setup_commands(self.layout):
            host.check_command(argv)
        self.netem = host.has_netem(self.layout)
        for site in self.sites.sites:
            inbound = {peer: self._shape(peer, site) for peer in self.sites.sites if peer != site}
            for argv in shaping_commands(self.layout, site, inbound):
                host.check_command(argv)
        if self.netem:  # netem carries delay and jitter: the relays only relay
            for link in self.links.values():
                for way in link.ways.values():
                    way.delay_ms, way.jitter_ms = 0.0, 0.0

    def _shape(self, src: str, dst: str, delay_ms: float | None = None) -> Shape:
        wan = self.wan_params[frozenset((src, dst))]
        if not self.netem:
            return Shape(wan.bandwidth_mbps)
        return Shape(wan.bandwidth_mbps, wan.delay_ms if delay_ms is None else delay_ms, wan.jitter_ms)

    def proxy(self, src: str, dst: str, port: int | None = None) -> LinkProxy:
        """The relay in the router namespace from ``src``'s link to ``dst``'s broker (or its ``port``)."""
        layout = self.layout
        return LinkProxy(
            self.link(src, dst),
            src,
            dst,
            self.brokers[dst].port if port is None else port,
            layout.address(dst),
            listen_host=layout.relay_address(src, dst),
            source_host=layout.relay_address(dst, src),
            sockets=self.sockets.socket if self.sockets else None,
        )

    def partition(self, site: str) -> None:
        """Take the site's WAN link down."""
        host.check_command(link_command(self.layout, site, up=False))

    def heal(self, site: str) -> None:
        """Bring the site's WAN link up again."""
        host.check_command(link_command(self.layout, site, up=True))

    def set_latency(self, site: str, delay_ms: float) -> None:
        """Set the one-way delay of every link of ``site``: netem's, or the relays' without it."""
        if not self.netem:
            super().set_latency(site, delay_ms)
            return
        for peer in self.sites.sites:
            if peer != site:
                for argv in delay_commands(self.layout, site, peer, self._shape(site, peer, delay_ms)):
                    host.check_command(argv)

    def shaped_bytes(self) -> dict[str, int]:
        """Bytes each pair's htb class sent so far, keyed ``"src>dst"``."""
        out = {}
        for dst in self.sites.sites:
            dev = self.layout.router_dev(dst)
            sent = host.class_bytes(
                host.check_command(["tc", "-n", self.layout.router, "-s", "class", "show", "dev", dev])
            )
            for src in self.sites.sites:
                if src != dst:
                    out[f"{src}>{dst}"] = sent.get(f"1:{10 + self.layout.index(src):x}", 0)
        return out

    async def stop(self) -> None:
        """Stop the relays and brokers, write ``netns.json`` (the layout and what htb sent), remove everything."""
        await super().stop()
        if self.sockets is not None:
            self.sockets.close()
        loop = asyncio.get_running_loop()
        if self.created:
            with contextlib.suppress(SimulationError, OSError):
                record = {"run": self.layout.run, "netem": self.netem, "shaping": self.shaping()}
                record["htb_bytes"] = await loop.run_in_executor(None, self.shaped_bytes)
                (self.run_dir / NETNS_RECORD).write_text(json.dumps(record, indent=2))
        await loop.run_in_executor(None, self._remove)

    def _remove(self) -> None:
        if self.created:
            with contextlib.suppress(Exception):
                host.remove(self.layout.namespaces(), self.layout.tag)
            self.created = False
