"""``sites.yaml``: the hub and spoke sites, their brokers, streams and links.

Example::

    sites:
      cloud: {tier: hub, broker: "mqtt://localhost:1883", cpu: 8}
      factory-a:
        tier: spoke
        broker: "mqtts://gw-a.example.net:8883"
        tls: {ca_file: ca.pem}
        username: agent-a
        password_env: FACTORY_A_MQTT_PASSWORD
        cpu: 1.0
        streams:
          readings: {topic: "sensors/+/temp", rate: 50, record_bytes: 120}
    default_link: {latency_ms: 50, bandwidth_mbps: 10}
    links:
      - {between: [factory-a, cloud], latency_ms: 20, bandwidth_mbps: 50}
"""

from __future__ import annotations

import copy
import enum
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import msgspec

from spanedge import connectors, topics
from spanedge.connectors import modbus, opcua
from spanedge.connectors import streams as connector_streams
from spanedge.errors import InvalidSites
from spanedge.file_models import FileModel, Place, convert, key_path
from spanedge.files import read_text
from spanedge.names import label_problem, name_problem, stream_name_problem
from spanedge.yaml_text import read_yaml

Positive = Annotated[float, msgspec.Meta(gt=0)]
NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Bytes = Annotated[int, msgspec.Meta(gt=0)]

MAX_MESSAGE_BYTES = 2**20
"""The default largest message: a stream's sensor message at its agent, an edge batch at the hub's ingest (1 MiB)."""


class Tier(enum.StrEnum):
    """A site is either a hub (runs Spark) or a spoke (runs an edge agent)."""

    HUB = "hub"
    SPOKE = "spoke"


class TLS(FileModel, frozen=True):
    """TLS settings for an ``mqtts://`` broker."""

    ca_file: str
    cert_file: str | None = None
    key_file: str | None = None

    def context(self) -> ssl.SSLContext:
        """An SSL context that verifies the broker against ``ca_file`` and presents the client certificate, if any."""
        return tls_context(self.ca_file, self.cert_file, self.key_file)


def tls_context(ca_file: str | None, cert_file: str | None = None, key_file: str | None = None) -> ssl.SSLContext:
    """An SSL context verifying servers against ``ca_file`` (the system's CAs if ``None``), with a client certificate."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context


class StreamBinding(FileModel, frozen=True, kw_only=True):
    """How a site sources a named stream: its MQTT topic filter, or a connector URL, and expected load.

    Attributes:
        topic: the MQTT topic filter of the stream's sensors (leave out with ``url``).
        url: a connector instead of MQTT: ``opcua://host:4840/path``, ``modbus://host:502`` or
            the scheme of a connector the agent registers (see the connectors guide).
        rate: expected records/s.
        record_bytes: mean record size in bytes.
        qos: MQTT QoS of the sensors' messages (0 or 1).
        max_message_bytes: the largest message the agent takes on this stream; a larger one is
            dead-lettered with its size and topic, unread.
        nodes: ``opcua://`` only: the nodes to subscribe to, by the name records carry.
        publish_interval: ``opcua://`` only: the subscription's publishing interval in seconds.
        security: ``opcua://`` only: certificate security (left out: none).
        username: ``opcua://`` only: a user name, with its password in ``password_env``.
        password_env: the environment variable holding that password.
        unit: ``modbus://`` only: the device (unit) id.
        interval: ``modbus://`` only: seconds between polls of the device.
        points: ``modbus://`` only: the registers and coils to poll, by the name records carry.
        options: settings of a connector the user registered, passed to it as they are.
    """

    topic: str = ""
    rate: Positive
    url: str | None = None
    record_bytes: Positive = 200.0
    qos: Annotated[int, msgspec.Meta(ge=0, le=1)] = 1
    max_message_bytes: Bytes = MAX_MESSAGE_BYTES
    nodes: dict[str, str] = msgspec.field(default_factory=dict)
    publish_interval: Annotated[float, msgspec.Meta(ge=0.01, le=3600)] = 0.5
    security: opcua.Security | None = None
    username: str | None = None
    password_env: str | None = None
    unit: Annotated[int, msgspec.Meta(ge=0, le=255)] = 1
    interval: Annotated[float, msgspec.Meta(ge=0.01, le=86400)] = 1.0
    points: dict[str, modbus.Point] = msgspec.field(default_factory=dict)
    options: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check the topic filter (:func:`spanedge.topics.filter_problem`) or the connector URL and its settings."""
        if self.url is None:
            if not self.topic:
                msg = "topic: a stream needs an MQTT topic filter (topic:) or a connector URL (url:)"
                raise ValueError(msg)
            problem = topics.filter_problem(self.topic)
            if problem is not None:
                msg = f"topic: topic filter {self.topic!r} is invalid: it {problem}"
                raise ValueError(msg)
            return
        if self.topic:
            msg = "topic: a stream has either a topic filter or a connector url:, not both"
            raise ValueError(msg)
        scheme = connectors.scheme_of(self.url)
        if scheme == "opcua":
            for name, node in self.nodes.items():
                problem = name_problem(name, "node") or opcua.node_problem(node)
                if problem is not None:
                    msg = f"{key_path('nodes', name)}: {problem}"
                    raise ValueError(msg)
            if not self.nodes and not opcua.url_nodes(self.url):
                msg = "nodes: an opcua:// stream needs nodes: {name: 'ns=2;i=7', ...} or ?nodes=ns=2;i=7,... in its url"
                raise ValueError(msg)
        elif scheme == "modbus":
            for name in self.points:
                problem = name_problem(name, "point")
                if problem is not None:
                    msg = f"{key_path('points', name)}: {problem}"
                    raise ValueError(msg)
            if not self.points:
                msg = "points: a modbus:// stream needs points: {name: {table: holding, address: 0}, ...}"
                raise ValueError(msg)
        else:
            connector_streams.stream_options(scheme, self.options)

    @property
    def connector(self) -> str | None:
        """The scheme of the stream's connector, or ``None`` for an MQTT stream."""
        return None if self.url is None else connectors.scheme_of(self.url)

    @property
    def opcua_nodes(self) -> dict[str, str]:
        """An ``opcua://`` stream's nodes by name, those of its URL's ``?nodes=`` included."""
        return {**opcua.url_nodes(self.url or ""), **self.nodes}


class DeviceBinding(FileModel, frozen=True, kw_only=True):
    """A spoke's named device that connector sinks given ``"device:NAME"`` write to.

    Attributes:
        url: the device, as a stream's ``url:`` gives it (``modbus://10.0.0.5:502``, ``opcua://plc:4840/path``).
        unit: ``modbus://`` only: the device (unit) id, unless the URL has ``?unit=``.
        security: ``opcua://`` only: certificate security (left out: none).
        username: ``opcua://`` only: a user name, with its password in ``password_env``.
        password_env: the environment variable holding that password.
        options: settings of a connector the user registered, passed to its sink as they are.
    """

    url: str
    unit: Annotated[int, msgspec.Meta(ge=0, le=255)] = 1
    security: opcua.Security | None = None
    username: str | None = None
    password_env: str | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check the URL as a stream's (a connector URL, no MQTT, no password in it)."""
        connectors.scheme_of(self.url)

    @property
    def connector(self) -> str:
        """The scheme of the device's connector."""
        return connectors.scheme_of(self.url)

    def sink_options(self) -> dict[str, Any]:
        """The settings a connector sink at this device takes, those of the scheme's connector only."""
        scheme = self.connector
        if scheme == "modbus":
            return {"unit": self.unit}
        if scheme == "opcua":
            found = {"security": self.security, "username": self.username, "password_env": self.password_env}
            return {k: v for k, v in found.items() if v is not None}
        return dict(self.options)


class Broker(FileModel, frozen=True):
    """A parsed broker URL with its credentials."""

    scheme: str
    host: str
    port: int
    username: str | None = None
    password_env: str | None = None
    tls: TLS | None = None

    @property
    def url(self) -> str:
        """The broker URL without credentials."""
        return f"{self.scheme}://{self.host}:{self.port}"

    def authenticate(self, client: Any) -> None:
        """Give a paho-mqtt client this broker's credentials and TLS settings (certificates verified)."""
        if self.username:
            client.username_pw_set(self.username, self.password())
        if self.tls is not None:
            client.tls_set(ca_certs=self.tls.ca_file, certfile=self.tls.cert_file, keyfile=self.tls.key_file)

    def password(self) -> str | None:
        """Read the password from the environment variable the file names."""
        if self.password_env is None:
            return None
        value = os.environ.get(self.password_env)
        if value is None:
            msg = f"broker {self.url}: environment variable {self.password_env} is not set; export it with the MQTT password"
            raise InvalidSites(msg)
        return value


class Site(FileModel, frozen=True):
    """One site: a hub or a spoke with its broker, capacity and streams.

    Attributes:
        name: the site's key in ``sites:`` (filled in by :class:`Sites`).
        cpu: CPU cores available to SpanEdge.
        devices: a spoke's only: its named devices, which sinks given ``"device:NAME"`` write to.
        labels: ``key: value`` pairs that select the site (``fleet: north``), each following the site name rule.
        max_message_bytes: a hub's only: the largest edge batch its ingest takes (``None``:
            :data:`MAX_MESSAGE_BYTES`, see :attr:`message_limit`); the agents send none larger.
        model_budget_bytes: the most memory one model version may take at the site (``None``: no limit);
            placement runs no ``predict`` here of a model whose estimated size is larger.
    """

    tier: Tier
    broker: str
    name: str = ""
    cpu: Positive = 1.0
    username: str | None = None
    password_env: str | None = None
    tls: TLS | None = None
    streams: dict[str, StreamBinding] = msgspec.field(default_factory=dict)
    devices: dict[str, DeviceBinding] = msgspec.field(default_factory=dict)
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    max_message_bytes: Bytes | None = None
    model_budget_bytes: Bytes | None = None

    def __post_init__(self) -> None:
        """Check the broker URL, that an ``mqtts://`` broker has TLS settings, the stream names and the labels."""
        if self.max_message_bytes is not None and self.tier is not Tier.HUB:
            msg = (
                "max_message_bytes: only a hub takes one (its ingest's limit); a spoke's limits are per stream, "
                "e.g. streams: {readings: {topic: ..., rate: ..., max_message_bytes: 4194304}}"
            )
            raise ValueError(msg)
        if self.devices and self.tier is not Tier.SPOKE:
            msg = "devices: only a spoke has devices (its agent writes to them); move them to the spoke on their LAN"
            raise ValueError(msg)
        for device in self.devices:
            problem = name_problem(device, "device")
            if problem is not None:
                msg = f"{key_path('devices', device)}: {problem}"
                raise ValueError(msg)
        for key, value in self.labels.items():
            problem = label_problem(key, value)
            if problem is not None:
                msg = f"{key_path('labels', key)}: {problem}"
                raise ValueError(msg)
        for stream in self.streams:
            problem = stream_name_problem(stream)
            if problem is not None:
                msg = f"{key_path('streams', stream)}: {problem}"
                raise ValueError(msg)
        parts = urlsplit(self.broker)
        if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            msg = "broker: must look like mqtt://host:1883 or mqtts://host:8883"
            raise ValueError(msg)
        if parts.password:
            msg = "broker: do not put a password in the broker URL; name an environment variable with password_env:"
            raise ValueError(msg)
        if parts.scheme == "mqtts" and self.tls is None:
            msg = "an mqtts:// broker needs tls: {ca_file: <path to CA certificate>}"
            raise ValueError(msg)

    @property
    def message_limit(self) -> int:
        """The largest edge batch, in bytes, that this hub's ingest takes."""
        return self.max_message_bytes or MAX_MESSAGE_BYTES

    def mqtt(self) -> Broker:
        """The broker of this site, parsed."""
        parts = urlsplit(self.broker)
        secure = parts.scheme == "mqtts"
        return Broker(
            scheme=parts.scheme,
            host=parts.hostname or "localhost",
            port=parts.port or (8883 if secure else 1883),
            username=self.username or parts.username,
            password_env=self.password_env,
            tls=self.tls,
        )


class Link(FileModel, frozen=True):
    """A declared link between two sites (both directions).

    Attributes:
        cost: relative cost per byte.
    """

    between: tuple[str, str]
    latency_ms: NonNegative
    bandwidth_mbps: Positive = 100.0
    cost: NonNegative = 1.0


class DefaultLink(FileModel, frozen=True):
    """The link assumed between sites with no declared link."""

    latency_ms: NonNegative = 50.0
    bandwidth_mbps: Positive = 100.0
    cost: NonNegative = 1.0


class Sites(FileModel, frozen=True):
    """The whole ``sites.yaml``.

    Build it with :func:`parse_sites`, :func:`load_sites` or :meth:`Sites.of`, which check every
    field; the constructor checks only that the sites are consistent.
    """

    sites: dict[str, Site]
    default_link: DefaultLink = msgspec.field(default_factory=DefaultLink)
    links: list[Link] = msgspec.field(default_factory=list)
    simulation: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Check the site names, name every site after its key; check there is a hub and that links join known sites."""
        for name in self.sites:
            problem = name_problem(name, "site")
            if problem is not None:
                msg = f"{key_path('sites', name)}: {problem}"
                raise ValueError(msg)
        named = {k: v if v.name == k else _named(v, k) for k, v in self.sites.items()}
        msgspec.structs.force_setattr(self, "sites", named)
        if not any(s.tier is Tier.HUB for s in named.values()):
            msg = "sites: at least one site must have tier: hub"
            raise ValueError(msg)
        for i, link in enumerate(self.links):
            for end in link.between:
                if end not in named:
                    msg = f"links[{i}].between: unknown site {end!r}; known sites: {', '.join(named)}"
                    raise ValueError(msg)

    @classmethod
    def of(cls, data: Any, where: str = "<sites>") -> Sites:
        """Check ``data`` (``sites.yaml`` as YAML reads it) and build the sites; errors name ``where``.

        Raises:
            InvalidSites: a field is missing, unknown or out of range, or the sites are inconsistent.
        """
        return convert(data, cls, where, title="sites file")

    def to_data(self) -> dict[str, Any]:
        """The sites as plain data, as :meth:`of` reads them (options left at their default are left out)."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data

    @property
    def hubs(self) -> list[Site]:
        """Sites of tier hub."""
        return [s for s in self.sites.values() if s.tier is Tier.HUB]

    @property
    def spokes(self) -> list[Site]:
        """Sites of tier spoke."""
        return [s for s in self.sites.values() if s.tier is Tier.SPOKE]

    def labelled(self, selector: dict[str, str]) -> list[Site]:
        """Sites whose labels include every ``key: value`` of ``selector`` (all sites for an empty one)."""
        return [s for s in self.sites.values() if all(s.labels.get(k) == v for k, v in selector.items())]

    def sources_of(self, stream: str) -> list[Site]:
        """Sites that source ``stream``."""
        return [s for s in self.sites.values() if stream in s.streams]

    def with_device(self, device: str) -> list[Site]:
        """The spokes that declare the device ``device`` (under their ``devices:``)."""
        return [s for s in self.spokes if device in s.devices]

    def site(self, name: str) -> Site:
        """Return the site called ``name`` or raise with the known names."""
        try:
            return self.sites[name]
        except KeyError:
            msg = f"unknown site {name!r}; sites.yaml defines: {', '.join(self.sites)}"
            raise InvalidSites(msg) from None

    def learn(self, peers: Mapping[str, Site]) -> list[str]:
        """Add the sites of ``peers`` this file does not define (the hub's entries of sites that joined later).

        A site the file defines keeps its own entry. Returns the names added.
        """
        added = [name for name in peers if name not in self.sites]
        for name in added:
            self.sites[name] = peers[name]  # the one dict every part of the agent reads its sites from
        return added

    def spoke(self, name: str) -> Site:
        """Return the spoke called ``name``, or raise saying what it is and which sites are spokes.

        Raises:
            InvalidSites: ``name`` is unknown, or a hub: its part runs in ``spanedge hub``, not in an agent.
        """
        site = self.site(name)
        if site.tier is not Tier.SPOKE:
            spokes = ", ".join(s.name for s in self.spokes) or "none"
            msg = (
                f"site {name!r} is a hub (tier: hub in sites.yaml); an agent serves one of the spokes "
                f"({spokes}), and the hub's part runs in spanedge hub"
            )
            raise InvalidSites(msg)
        return site

    def check_app_streams(
        self, streams: set[str], app_name: str, where: str = "sites.yaml", lines: Mapping[Place, int] | None = None
    ) -> None:
        """Raise if sites.yaml and the app disagree on stream names; ``where`` and ``lines`` place the error in the file."""
        for site in self.sites.values():
            for stream in site.streams:
                if stream not in streams:
                    line = (lines or {}).get(("sites", site.name, "streams", stream))
                    msg = (
                        f"{where}{'' if line is None else f':{line}'}: site '{site.name}' binds stream '{stream}', "
                        f"but app '{app_name}' has no source by that name (its sources: {', '.join(sorted(streams))}); "
                        "fix the stream name in sites.yaml or add app.source(...)"
                    )
                    raise InvalidSites(msg)
        for stream in streams:
            if not self.sources_of(stream):
                msg = (
                    f"app '{app_name}' reads stream '{stream}', but no site in {where} sources it; "
                    f"add it under a site's streams: with a topic filter and rate"
                )
                raise InvalidSites(msg)


def _named(site: Site, name: str) -> Site:
    """A copy of ``site`` called ``name``, its checks not run again (they passed, and the name is not theirs)."""
    renamed = copy.copy(site)
    msgspec.structs.force_setattr(renamed, "name", name)
    return renamed


def load_sites(path: str | Path) -> Sites:
    """Parse and validate a ``sites.yaml``; errors name the file, line and field."""
    path = Path(path)
    return parse_sites(read_text(path, "sites file", InvalidSites), str(path))


def parse_sites(text: str, where: str = "<sites.yaml>") -> Sites:
    """Parse sites from YAML text; ``where`` names the file in errors, which give its line and field."""
    document = read_yaml(text, where, InvalidSites)
    if not isinstance(document.data, dict):
        msg = f"{where}: expected a mapping with a 'sites:' key, got {type(document.data).__name__}"
        raise InvalidSites(msg)
    return convert(document.data, Sites, where, title="sites file", lines=document.lines)


DEFAULT_STREAM_RATE = 1.0
"""The records/s a stream given as ``NAME=TOPIC`` is declared with; its site's agent measures the real rate."""


def parse_stream(text: str, where: str = "--stream") -> tuple[str, StreamBinding]:
    """A site's stream from ``NAME=TOPIC``, or ``NAME={topic: TOPIC, rate: R, ...}`` as ``streams:`` writes it.

    ``NAME=TOPIC`` declares :data:`DEFAULT_STREAM_RATE` records/s; the mapping
    form takes every field of :class:`StreamBinding` and is checked as
    ``sites.yaml`` is (the topic filter included).

    Raises:
        InvalidSites: no ``NAME=``, an invalid stream name, or an invalid entry; the message says which, from ``where``.
    """
    name, sep, value = (part.strip() for part in text.partition("="))
    if not sep or not name or not value:
        msg = f"{where}: {text!r} is not NAME=TOPIC"
        raise InvalidSites(msg)
    problem = stream_name_problem(name)
    if problem is not None:
        msg = f"{where}: {problem}"
        raise InvalidSites(msg)
    data: Any = {"topic": value, "rate": DEFAULT_STREAM_RATE}
    if value.startswith("{"):
        invalid = f"{value!r} is not a YAML mapping"
        data = read_yaml(value, f"{where}: stream {name!r}", InvalidSites, invalid=invalid, show_line=False).data
    return name, convert(data, StreamBinding, where, title=f"stream {name!r}", prefix=("streams", name))
