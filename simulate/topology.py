"""A simulated topology: one broker per site, WAN links between every pair, per-process sites files.

Each process gets its own ``sites.yaml`` in the run directory, in which its
own site's broker is direct and every other site's broker is the proxy of the
link between the two sites, so every inter-site byte crosses the emulated WAN.

By default every broker is secured as a fleet's should be: a TLS listener with
a certificate from a CA made for the run, no anonymous access, one MQTT
identity per site (its name, with a random password) and the ACL
:func:`spanedge.broker_acl.acl_text` generates. A process's sites file names
its own site as the username on every broker, the CA, and the environment
variable :data:`PASSWORD_ENV` that holds its password (:meth:`Topology.env`).
The simulator's own clients log in as :data:`OBSERVER` (read-only) or, for
sensors, as their site. ``secure=False`` runs plain anonymous brokers instead.

A run with spokes that join mid-run (``joining``) uses certificate identities
instead of passwords, since a gateway that enrols gets a client certificate: the
CA is the managed hub's own, made in its state directory (:func:`hub_ca_dir`)
before the hub first starts, so the hub finds and keeps it; every identity gets
a client certificate of it, and every broker requires one
(``require_certificate``, ``use_identity_as_username``) and checks the CA's
revocation list, which the hub rewrites into the ACL directory. A joining spoke
is in no process's sites file until it joins (its broker, links and sensors
exist from the start).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
from collections.abc import Collection
from pathlib import Path
from typing import Protocol

import msgspec
import yaml

from simulate.broker import BrokerSecurity, Login, Mosquitto, mosquitto_path
from simulate.config import Simulation, resolve_links
from simulate.tls import make_tls
from simulate.wan import LinkProxy, WanLink
from spanedge.broker_acl import acl_text, identities, new_password, password_file
from spanedge.ca import CertificateAuthority, new_request
from spanedge.errors import SpanEdgeError
from spanedge.sites import TLS, Sites

#: The read-only MQTT identity of the simulator's watchers.
OBSERVER = "spanedge-sim-observer"
#: The environment variable that holds a simulated process's MQTT password.
PASSWORD_ENV = "SPANEDGE_MQTT_PASSWORD"  # noqa: S105 - the name of a variable, not a password
_NO_SECURE_EMBEDDED = (
    "the embedded Python broker cannot enforce per-site credentials, ACLs and TLS; "
    "install Mosquitto ('apt-get install mosquitto' or 'brew install mosquitto'), "
    "or run plain anonymous brokers with --insecure-brokers (development only)"
)


def hub_ca_dir(run_dir: Path) -> Path:
    """The managed hub's certificate authority: ``ca`` in its state directory ``<run>/hub``."""
    return run_dir / "hub" / "ca"


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


def make_broker(kind: str, name: str, workdir: Path, security: BrokerSecurity | None = None) -> BrokerProcess:
    """A stopped broker of ``kind`` for site ``name`` (Mosquitto enforces ``security`` if given)."""
    if kind == "amqtt":
        if security is not None:
            raise SpanEdgeError(_NO_SECURE_EMBEDDED)
        from simulate.embedded import EmbeddedBroker

        embedded: BrokerProcess = EmbeddedBroker(workdir=workdir, name=name)
        return embedded
    return Mosquitto(workdir=workdir, name=name, extra_config="sys_interval 1\n", security=security)


class Topology:
    """Brokers, WAN links and proxies of a simulated set of sites."""

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
        """Plan the topology and, if ``secure``, make its CA, credentials and ACLs; :meth:`start` starts brokers and proxies.

        ``joining`` are the spokes that join mid-run: left out of every sites file, with certificate identities.

        Raises:
            SpanEdgeError: ``secure`` with the embedded broker, or a site name that cannot be an MQTT identity.
        """
        self.sites = sites
        self.sim = sim
        self.run_dir = run_dir
        self.broker_kind = broker_kind(broker)
        self.secure = secure
        self.joining = frozenset(joining)
        self.certificates = secure and bool(self.joining)
        self.security = (
            "TLS, client certificates of the hub's CA and ACLs"
            if self.certificates
            else "TLS, per-site credentials and ACLs"
            if secure
            else "plain and anonymous (--insecure-brokers)"
        )
        self.passwords: dict[str, str] = {}
        self.identities: dict[str, TLS] = {}
        self.ca_file: Path | None = None
        self.relays: list[LinkProxy] = []
        security = self._secure_brokers(run_dir / "brokers") if secure else {}
        self.brokers: dict[str, BrokerProcess] = {
            name: make_broker(self.broker_kind, name, run_dir / "brokers" / name, security.get(name))
            for name in sites.sites
        }
        self.links: dict[frozenset[str], WanLink] = {}
        for i, wan in enumerate(resolve_links(sites, sim)):
            link = WanLink(wan.a, wan.b, wan.delay_ms, wan.jitter_ms, wan.bandwidth_mbps, seed=sim.seed * 1000 + i)
            self.links[frozenset((wan.a, wan.b))] = link
        self.proxies: dict[tuple[str, str], LinkProxy] = {}
        self.files: dict[str, Path] = {}
        self.device_urls: dict[str, str] = {}
        """Device URLs of the sites' ``devices:`` and those of their simulated devices, rewritten in every sites file."""
        self.stream_urls: dict[tuple[str, str], str] = {}
        """The URLs of simulated servers that (site, stream) reads, rewritten in every sites file."""
        atexit.register(self._close_brokers)

    def _secure_brokers(self, directory: Path) -> dict[str, BrokerSecurity]:
        """Make the run's CA and server certificate, a password per identity and each broker's ACL."""
        if self.broker_kind != "mosquitto":
            raise SpanEdgeError(_NO_SECURE_EMBEDDED)
        users = identities(self.sites, [OBSERVER])
        passwords: Path | None = None
        crl: Path | None = None
        if self.certificates:
            ca = CertificateAuthority.open(hub_ca_dir(self.run_dir))
            tls = ca.write_server_files(directory / "tls", self.tls_hosts())
            self.identities = {user: _identity(ca, user, directory / "identities") for user in users}
            crl = self.acl_dir / "crl.pem"  # where the hub's --broker-dir keeps it (hub.control.brokers)
            crl.parent.mkdir(parents=True, exist_ok=True)
            crl.write_bytes(ca.crl_file.read_bytes())
        else:
            self.passwords = {user: new_password() for user in users}
            tls = make_tls(directory / "tls", self.tls_hosts())
            passwords = directory / "passwords"
            passwords.touch(mode=0o600)
            passwords.write_text(password_file(self.passwords))
        self.ca_file = tls.ca_file
        security = {}
        for name in self.sites.sites:
            acl = self.acl_file(name)
            acl.parent.mkdir(parents=True, exist_ok=True)
            acl.write_text(acl_text(self.sites, [name], observers=[OBSERVER], per_site=True))
            security[name] = BrokerSecurity(tls, passwords, acl, crl)
        return security

    @property
    def acl_dir(self) -> Path:
        """The brokers' ACL files, laid out as the hub's ``--broker-dir`` writes them (:mod:`hub.control.brokers`)."""
        return self.run_dir / "brokers" / "acl"

    def acl_file(self, site: str) -> Path:
        """The ACL of ``site``'s broker: ``acl`` for the first hub's, ``<site>/acl`` for the others (one broker each)."""
        first_hub = self.sites.hubs[0].name if self.sites.hubs else None
        return self.acl_dir / "acl" if site == first_hub else self.acl_dir / site / "acl"

    def tls_hosts(self) -> tuple[str, ...]:
        """The addresses the brokers' certificate names: every address a process reaches a broker at."""
        return ("127.0.0.1", "localhost")

    def host(self, site: str) -> str:
        """Where the simulator itself (sensors, watchers, REST client) reaches ``site``'s servers."""
        return "127.0.0.1"

    def wrap(self, site: str, argv: list[str]) -> list[str]:
        """The command that runs ``argv`` as a process of ``site`` (unchanged: every site shares this host)."""
        return argv

    def shaping(self) -> list[str]:
        """What carries each property of the emulated WAN, one line each (for the report)."""
        return [
            "hosts: every site on this host's loopback interface",
            "delay, jitter, bandwidth, partitions: the simulator's TCP proxies (simulate.wan)",
        ]

    def rest_options(self, hub: str) -> list[str]:
        """The options of ``spanedge hub`` that make its REST API listen where the simulator and relays reach it."""
        return []

    def env(self, site: str) -> dict[str, str]:
        """The environment a process of ``site`` needs to log in to the brokers (empty without passwords)."""
        return {PASSWORD_ENV: self.passwords[site]} if self.secure and not self.certificates else {}

    def sensor_endpoints(self) -> tuple[dict[str, int], dict[str, str], dict[str, Login | None]]:
        """Per site, the port and host of its broker and the login its sensors use there (as the site)."""
        ports = {name: broker.port for name, broker in self.brokers.items()}
        return ports, {name: self.host(name) for name in ports}, {name: self.login(name) for name in ports}

    def login(self, user: str) -> Login | None:
        """How the simulator's client ``user`` (:data:`OBSERVER` or a site) logs in; None when not secure."""
        if not self.secure:
            return None
        assert self.ca_file is not None
        if self.certificates:
            tls = self.identities[user]
            return Login(user, None, self.ca_file, Path(str(tls.cert_file)), Path(str(tls.key_file)))
        return Login(user, self.passwords[user], self.ca_file)

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
                    self.proxies[(src, dst)] = await self.proxy(src, dst).start()
        for name in self.sites.sites:
            if name not in self.joining:  # a spoke that joins gets its sites file from the hub
                self.files[name] = self.write_sites_file(name)

    def proxy(self, src: str, dst: str, port: int | None = None) -> LinkProxy:
        """The (stopped) proxy that carries connections from ``src`` to the broker of ``dst`` (or its ``port``)."""
        return LinkProxy(self.link(src, dst), src, dst, self.brokers[dst].port if port is None else port)

    async def relay(self, src: str, dst: str, port: int) -> str:
        """Start a proxy over the WAN link from ``src`` to the server on ``port`` at ``dst``; the ``host:port`` to use."""
        proxy = await self.proxy(src, dst, port).start()
        self.relays.append(proxy)
        return f"{proxy.listen_host}:{proxy.port}"

    def broker_url(self, seen_from: str, site: str) -> str:
        """The URL of ``site``'s broker as a process at ``seen_from`` must use."""
        if seen_from == site:
            return self.brokers[site].url
        url = self.proxies[(seen_from, site)].url  # the proxy relays bytes: TLS runs end to end through it
        return url.replace("mqtt://", "mqtts://", 1) if self.secure else url

    def write_sites_file(self, seen_from: str) -> Path:
        """Write the sites file for processes at ``seen_from`` and return its path."""
        data = self.sites.replace(simulation=None).to_data()
        data["sites"] = {n: site for n, site in data["sites"].items() if n not in self.joining}
        data["links"] = [lk for lk in data.get("links", []) if not self.joining & set(lk["between"])]
        for name, site in data["sites"].items():
            site.pop("name", None)
            site["broker"] = self.broker_url(seen_from, name)
            for device in site.get("devices", {}).values():
                device["url"] = self.device_urls.get(device["url"]) or device["url"]
            for stream, binding in site.get("streams", {}).items():
                if (name, stream) in self.stream_urls:
                    binding["url"] = self.stream_urls[name, stream]
            if self.certificates:  # every broker takes the name of this process's certificate as its username
                site["tls"] = msgspec.to_builtins(self.identities[seen_from])
            elif self.secure:  # every broker sees this process as its own site
                site.update(username=seen_from, password_env=PASSWORD_ENV, tls={"ca_file": str(self.ca_file)})
        path = self.run_dir / "sites" / f"{seen_from}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        header = f"# sites as seen from {seen_from}: remote brokers go through the emulated WAN\n"
        path.write_text(header + yaml.safe_dump(data, sort_keys=False))
        return path

    def rebase_sites_file(self, path: Path, seen_from: str) -> None:
        """Point every broker of the sites file at ``path`` (one the hub gave a joined spoke) at its address from ``seen_from``.

        The hub's file names the brokers as the hub reaches them; here each process reaches them over its own
        emulated WAN links. Everything else in the file stays as written.
        """
        data = yaml.safe_load(path.read_text())
        for name, site in data["sites"].items():
            site["broker"] = self.broker_url(seen_from, name)
        text = f"# as the hub answered the join, each broker as seen from {seen_from}\n" + yaml.safe_dump(
            data, sort_keys=False
        )
        _write_private(path, text.encode())

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
        for proxy in [*self.proxies.values(), *self.relays]:
            with contextlib.suppress(Exception):
                await proxy.stop()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._close_brokers)

    def _close_brokers(self) -> None:
        for broker in self.brokers.values():
            with contextlib.suppress(Exception):
                broker.stop()


def _write_private(path: Path, data: bytes) -> None:
    """Write ``path`` readable by its owner only (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _identity(ca: CertificateAuthority, user: str, directory: Path) -> TLS:
    """A key and a client certificate of ``ca`` for ``user`` in ``directory``: its TLS settings in a sites file."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    csr, key = new_request(user)
    cert_file, key_file = directory / f"{user}.pem", directory / f"{user}-key.pem"
    _write_private(key_file, key)
    cert_file.write_bytes(ca.issue_client(user, csr))
    return TLS(ca_file=str(ca.cert_file), cert_file=str(cert_file), key_file=str(key_file))
