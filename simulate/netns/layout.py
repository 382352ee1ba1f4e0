"""The names, addresses and ``ip``/``tc`` commands of one run's network namespaces (pure: nothing runs here).

A run ``spanedge-<pid>-<tag>`` has a router namespace ``<run>-r`` and one
namespace ``<run>-s<i>`` per site (``i`` from 1, in ``sites.yaml`` order).
Each site has two veth pairs:

* its WAN link ``wan0`` (site) -- ``w<i>`` (router), on ``10.77.<i>.0/24``:
  the site is ``10.77.<i>.2``, the router ``10.77.<i>.1`` and, for each
  peer site ``j``, ``10.77.<i>.<10+j>``: the address where the relay to
  ``j``'s broker listens for the site, and the source address of the relay
  from ``j`` to the site's broker. Everything sent to site ``i`` by peer
  ``j`` therefore leaves ``w<i>`` from ``10.77.<i>.<10+j>``, which is how
  ``tc`` shapes each pair of sites apart;
* its lab link ``lab0`` (site) -- ``se<tag>m<i>`` (the simulator's own
  namespace), on ``100.<64+k>.<i>.0/24``, never shaped or cut: the sensors
  and watchers of the simulator reach the site's broker, and the simulator
  the hub's REST API, over it. ``k`` is chosen per run so that concurrent
  runs do not clash.

The pid in the names lets a later run tell a dead run's leftovers from a live
run's (:mod:`simulate.netns.host`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

PREFIX = "spanedge-"
#: ``spanedge-<pid>-<tag>-r`` / ``-s<i>``: the namespaces of a run.
NAMESPACE = re.compile(r"spanedge-(?P<pid>\d+)-(?P<tag>[0-9a-f]{4})-(?:r|s\d+)")
#: Peers a site may have: the last byte of the relay addresses is ``10 + j``.
MAX_SITES = 200
#: The rate of the traffic no pair of sites caps (htb needs one on every class).
UNCAPPED = "1gbit"
#: htb's bytes per round for every class (the default, rate / 10, is out of range at 1 Gbit/s).
QUANTUM = "60000"


@dataclass(frozen=True)
class Shape:
    """How one direction of a pair of sites is shaped by ``tc``: a rate cap and, with netem, the delay."""

    bandwidth_mbps: float | None
    delay_ms: float | None = None
    jitter_ms: float = 0.0


@dataclass(frozen=True)
class Layout:
    """The namespaces, interfaces and addresses of one run."""

    pid: int
    tag: str
    lab_block: int
    sites: tuple[str, ...]

    def __post_init__(self) -> None:
        """Check the tag, the lab block and the number of sites."""
        if not re.fullmatch(r"[0-9a-f]{4}", self.tag):
            msg = f"a run tag is 4 lowercase hex digits, got {self.tag!r}"
            raise ValueError(msg)
        if not 0 <= self.lab_block < 64:
            msg = f"the lab block is 0-63 (100.64.0.0/10), got {self.lab_block}"
            raise ValueError(msg)
        if not 0 < len(self.sites) <= MAX_SITES:
            msg = f"a namespace run takes 1 to {MAX_SITES} sites, got {len(self.sites)}"
            raise ValueError(msg)

    @property
    def run(self) -> str:
        """``spanedge-<pid>-<tag>``: the prefix of every namespace of the run."""
        return f"{PREFIX}{self.pid}-{self.tag}"

    @property
    def router(self) -> str:
        """The router namespace."""
        return f"{self.run}-r"

    def index(self, site: str) -> int:
        """The site's number, from 1."""
        return self.sites.index(site) + 1

    def namespace(self, site: str) -> str:
        """The site's namespace."""
        return f"{self.run}-s{self.index(site)}"

    def router_dev(self, site: str) -> str:
        """The router's end of the site's WAN link."""
        return f"w{self.index(site)}"

    def lab_dev(self, site: str) -> str:
        """The simulator's end of the site's lab link (15 characters at most, unique per run)."""
        return f"se{self.tag}m{self.index(site)}"

    def address(self, site: str) -> str:
        """The site's WAN address."""
        return f"10.77.{self.index(site)}.2"

    def relay_address(self, site: str, peer: str) -> str:
        """The router's address on ``site``'s link for traffic between ``site`` and ``peer``."""
        return f"10.77.{self.index(site)}.{10 + self.index(peer)}"

    def lab_address(self, site: str) -> str:
        """The site's address on its lab link, where the simulator reaches it."""
        return f"100.{64 + self.lab_block}.{self.index(site)}.2"

    def lab_gateway(self, site: str) -> str:
        """The simulator's address on the site's lab link."""
        return f"100.{64 + self.lab_block}.{self.index(site)}.1"

    def namespaces(self) -> list[str]:
        """Every namespace of the run, the router first."""
        return [self.router, *(self.namespace(s) for s in self.sites)]

    def addresses(self) -> list[str]:
        """Every address a process may use to reach a broker (for the brokers' certificate)."""
        out = []
        for site in self.sites:
            out += [self.address(site), self.lab_address(site)]
            out += [self.relay_address(site, peer) for peer in self.sites if peer != site]
        return out

    def exec_prefix(self, site: str) -> list[str]:
        """The argv prefix that runs a command in ``site``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(site)]


def setup_commands(layout: Layout) -> list[list[str]]:
    """Create the namespaces, both links of every site and their addresses, and bring everything up."""
    r = layout.router
    cmds = [["ip", "netns", "add", ns] for ns in layout.namespaces()]
    cmds += [["ip", "-n", ns, "link", "set", "lo", "up"] for ns in layout.namespaces()]
    for site in layout.sites:
        ns, dev, i = layout.namespace(site), layout.router_dev(site), layout.index(site)
        cmds += [
            ["ip", "-n", r, "link", "add", dev, "type", "veth", "peer", "name", "wan0", "netns", ns],
            ["ip", "-n", r, "addr", "add", f"10.77.{i}.1/24", "dev", dev],
            *(
                ["ip", "-n", r, "addr", "add", f"{layout.relay_address(site, peer)}/24", "dev", dev]
                for peer in layout.sites
                if peer != site
            ),
            ["ip", "-n", ns, "addr", "add", f"{layout.address(site)}/24", "dev", "wan0"],
            ["ip", "link", "add", layout.lab_dev(site), "type", "veth", "peer", "name", "lab0", "netns", ns],
            ["ip", "addr", "add", f"{layout.lab_gateway(site)}/24", "dev", layout.lab_dev(site)],
            ["ip", "-n", ns, "addr", "add", f"{layout.lab_address(site)}/24", "dev", "lab0"],
            ["ip", "-n", r, "link", "set", dev, "up"],
            ["ip", "-n", ns, "link", "set", "wan0", "up"],
            ["ip", "link", "set", layout.lab_dev(site), "up"],
            ["ip", "-n", ns, "link", "set", "lab0", "up"],
        ]
    return cmds


def _minor(layout: Layout, peer: str) -> str:
    """The htb class (and netem handle) of the traffic from ``peer``, in hex as ``tc`` reads it."""
    return f"{10 + layout.index(peer):x}"


def _netem(shape: Shape) -> list[str]:
    delay = f"{shape.delay_ms or 0:g}ms"
    return ["netem", "delay", delay, *([f"{shape.jitter_ms:g}ms"] if shape.jitter_ms > 0 else [])]


def shaping_commands(layout: Layout, site: str, inbound: dict[str, Shape]) -> list[list[str]]:
    """The ``tc`` commands that shape what each peer sends to ``site``, on the router's end of its link.

    ``inbound[peer]`` shapes the direction ``peer`` -> ``site``: an htb class
    per peer, selected by the source address of the relays of that pair, capped
    at the pair's bandwidth, with a netem leaf for the delay when ``delay_ms``
    is given (the kernel has netem).
    """
    r, dev = layout.router, layout.router_dev(site)
    tc = ["tc", "-n", r]
    cmds = [
        [*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
        [*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", UNCAPPED,
         "quantum", QUANTUM],
    ]  # fmt: skip
    for peer, shape in inbound.items():
        minor = _minor(layout, peer)
        rate = f"{shape.bandwidth_mbps:g}mbit" if shape.bandwidth_mbps else UNCAPPED
        cmds += [
            [*tc, "class", "add", "dev", dev, "parent", "1:", "classid", f"1:{minor}", "htb", "rate", rate,
             "ceil", rate, "quantum", QUANTUM],
            [*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
             "ip", "src", f"{layout.relay_address(site, peer)}/32", "flowid", f"1:{minor}"],
        ]  # fmt: skip
        if shape.delay_ms is not None:
            cmds.append(
                [*tc, "qdisc", "add", "dev", dev, "parent", f"1:{minor}", "handle", f"{minor}:", *_netem(shape)]
            )
    return cmds


def delay_commands(layout: Layout, site: str, peer: str, shape: Shape) -> list[list[str]]:
    """Change the netem delay of both directions between ``site`` and ``peer``."""
    cmds = []
    for dst, src in ((site, peer), (peer, site)):
        minor = _minor(layout, src)
        cmds.append(
            ["tc", "-n", layout.router, "qdisc", "change", "dev", layout.router_dev(dst), "parent", f"1:{minor}",
             "handle", f"{minor}:", *_netem(shape)]
        )  # fmt: skip
    return cmds


def link_command(layout: Layout, site: str, up: bool) -> list[str]:
    """Take the site's WAN link down (a partition) or bring it up again (a heal), at the router's end."""
    return ["ip", "-n", layout.router, "link", "set", layout.router_dev(site), "up" if up else "down"]


def netem_probe_commands(layout: Layout) -> tuple[list[str], list[str]]:
    """A netem qdisc on the router's loopback, and its removal: whether the kernel has netem."""
    tc = ["tc", "-n", layout.router, "qdisc"]
    return [*tc, "add", "dev", "lo", "root", "netem", "delay", "1ms"], [*tc, "del", "dev", "lo", "root"]


def teardown_commands(namespaces: Sequence[str], lab_devs: Sequence[str]) -> list[list[str]]:
    """Delete the namespaces (their veth ends go with them) and the simulator's ends of the lab links."""
    return [["ip", "netns", "del", ns] for ns in namespaces] + [["ip", "link", "del", dev] for dev in lab_devs]


def parse_run(namespace: str) -> tuple[int, str] | None:
    """The pid and tag of a run's namespace name, or None for a namespace of no run."""
    match = NAMESPACE.fullmatch(namespace)
    return (int(match["pid"]), match["tag"]) if match else None


def lab_dev_prefix(tag: str) -> str:
    """The prefix of the simulator's ends of a run's lab links."""
    return f"se{tag}m"
