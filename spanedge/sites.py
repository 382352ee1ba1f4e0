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

import enum
import os
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spanedge.errors import InvalidSites
from spanedge.files import read_text


class Tier(enum.StrEnum):
    """A site is either a hub (runs Spark) or a spoke (runs an edge agent)."""

    HUB = "hub"
    SPOKE = "spoke"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLS(_Model):
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


class StreamBinding(_Model):
    """How a site sources a named stream: its topic filter and expected load."""

    topic: str = Field(min_length=1)
    rate: float = Field(gt=0, description="expected records/s")
    record_bytes: float = Field(default=200, gt=0, description="mean record size in bytes")
    qos: int = Field(default=1, ge=0, le=1)


class Broker(_Model):
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


class Site(_Model):
    """One site: a hub or a spoke with its broker, capacity and streams."""

    name: str = ""
    tier: Tier
    broker: str
    cpu: float = Field(default=1.0, gt=0, description="CPU cores available to SpanEdge")
    username: str | None = None
    password_env: str | None = None
    tls: TLS | None = None
    streams: dict[str, StreamBinding] = Field(default_factory=dict)

    @field_validator("broker")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            msg = f"broker must look like mqtt://host:1883 or mqtts://host:8883, got {value!r}"
            raise ValueError(msg)
        if parts.password:
            msg = "do not put a password in the broker URL; name an environment variable with password_env:"
            raise ValueError(msg)
        return value

    @model_validator(mode="after")
    def _tls(self) -> Site:
        if urlsplit(self.broker).scheme == "mqtts" and self.tls is None:
            msg = "an mqtts:// broker needs tls: {ca_file: <path to CA certificate>}"
            raise ValueError(msg)
        if self.tier is Tier.HUB and self.streams:
            pass  # hubs may source streams too (e.g. a data-centre feed)
        return self

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


class Link(_Model):
    """A declared link between two sites (both directions)."""

    between: tuple[str, str]
    latency_ms: float = Field(ge=0)
    bandwidth_mbps: float = Field(default=100.0, gt=0)
    cost: float = Field(default=1.0, ge=0, description="relative cost per byte")


class DefaultLink(_Model):
    """The link assumed between sites with no declared link."""

    latency_ms: float = Field(default=50.0, ge=0)
    bandwidth_mbps: float = Field(default=100.0, gt=0)
    cost: float = Field(default=1.0, ge=0)


class Sites(_Model):
    """The whole ``sites.yaml``."""

    sites: dict[str, Site]
    default_link: DefaultLink = DefaultLink()
    links: list[Link] = Field(default_factory=list)
    simulation: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Sites:
        named = {k: v.model_copy(update={"name": k}) for k, v in self.sites.items()}
        object.__setattr__(self, "sites", named)
        if not any(s.tier is Tier.HUB for s in named.values()):
            msg = "at least one site must have tier: hub"
            raise ValueError(msg)
        for i, link in enumerate(self.links):
            for end in link.between:
                if end not in named:
                    msg = f"links[{i}]: unknown site {end!r}; known sites: {', '.join(named)}"
                    raise ValueError(msg)
        return self

    @property
    def hubs(self) -> list[Site]:
        """Sites of tier hub."""
        return [s for s in self.sites.values() if s.tier is Tier.HUB]

    @property
    def spokes(self) -> list[Site]:
        """Sites of tier spoke."""
        return [s for s in self.sites.values() if s.tier is Tier.SPOKE]

    def sources_of(self, stream: str) -> list[Site]:
        """Sites that source ``stream``."""
        return [s for s in self.sites.values() if stream in s.streams]

    def site(self, name: str) -> Site:
        """Return the site called ``name`` or raise with the known names."""
        try:
            return self.sites[name]
        except KeyError:
            msg = f"unknown site {name!r}; sites.yaml defines: {', '.join(self.sites)}"
            raise InvalidSites(msg) from None

    def check_app_streams(self, streams: set[str], app_name: str) -> None:
        """Raise if sites.yaml and the app disagree on stream names."""
        for site in self.sites.values():
            for stream in site.streams:
                if stream not in streams:
                    msg = (
                        f"sites.yaml: site '{site.name}' binds stream '{stream}', but app "
                        f"'{app_name}' has no source by that name (its sources: {', '.join(sorted(streams))}); "
                        "fix the stream name in sites.yaml or add app.source(...)"
                    )
                    raise InvalidSites(msg)
        for stream in streams:
            if not self.sources_of(stream):
                msg = (
                    f"app '{app_name}' reads stream '{stream}', but no site in sites.yaml sources it; "
                    f"add it under a site's streams: with a topic filter and rate"
                )
                raise InvalidSites(msg)


class _LineLoader(yaml.SafeLoader):
    """A YAML loader that remembers the line of every mapping key and list item."""


def _lines(node: yaml.Node, path: tuple[Any, ...], out: dict[tuple[Any, ...], int]) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, key.value)
            out[child] = key.start_mark.line + 1
            _lines(value, child, out)
            out[child] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _lines(item, (*path, i), out)


def load_sites(path: str | Path) -> Sites:
    """Parse and validate a ``sites.yaml``; errors name the file, line and field."""
    path = Path(path)
    return parse_sites(read_text(path, "sites file", InvalidSites), str(path))


def parse_sites(text: str, where: str = "<sites.yaml>") -> Sites:
    """Parse sites from YAML text; ``where`` names the file in errors."""
    try:
        node = yaml.compose(text, Loader=_LineLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        msg = f"{where}{line}: not valid YAML: {getattr(exc, 'problem', exc)}"
        raise InvalidSites(msg) from None
    if not isinstance(data, dict):
        msg = f"{where}: expected a mapping with a 'sites:' key, got {type(data).__name__}"
        raise InvalidSites(msg)
    lines: dict[tuple[Any, ...], int] = {}
    if node is not None:
        _lines(node, (), lines)
    try:
        return Sites.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            line_no = next((lines[loc[:i]] for i in range(len(loc), -1, -1) if loc[:i] in lines), None)
            field = ".".join(str(p) for p in loc) or "(top level)"
            problems.append(f"{where}:{line_no or 1}: {field}: {err['msg']} (got {err.get('input')!r})")
        msg = "invalid sites file:\n  " + "\n  ".join(problems)
        raise InvalidSites(msg) from None
