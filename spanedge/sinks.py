"""Sink constructors: where a stream's results go."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from spanedge.connectors import modbus as modbus_points
from spanedge.connectors import opcua as opcua_nodes
from spanedge.connectors import scheme_of
from spanedge.errors import InvalidDataflow
from spanedge.names import name_problem
from spanedge.operators import PostgresSinkSpec, SinkSpec

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

DEVICE = "device:"
"""The prefix of a connector sink's target that names a device binding of the site (``"device:valves"``)."""


def mqtt(topic: str) -> SinkSpec:
    """Publish results to an MQTT topic on the broker of the site where the sink runs."""
    return SinkSpec("mqtt", topic)


def file(path: str) -> SinkSpec:
    """Append results as JSON lines (edge) or Parquet files (hub) under ``path``."""
    return SinkSpec("file", path)


def console() -> SinkSpec:
    """Print results to standard output."""
    return SinkSpec("console")


def memory(name: str) -> SinkSpec:
    """Keep results in memory under ``name``, for tests."""
    return SinkSpec("memory", name)


def parquet(path: str) -> SinkSpec:
    """Write results at the hub as a Parquet dataset under ``path``, with Spark's writer.

    ``path`` is a directory or a URI Spark writes to (``s3a://...``,
    ``hdfs://...``). The dataset is partitioned by ``app``, ``sink``, ``date``
    (of the event time, UTC) and ``batch`` (the micro-batch). The sink runs at
    the hub.
    """
    if not path:
        msg = "sinks.parquet(path): the path is empty; give the dataset's directory or URI"
        raise InvalidDataflow(msg)
    return SinkSpec("parquet", path)


def postgres(table: str, *, key: Sequence[str] | None = None, dsn_env: str = "SPANEDGE_PG_DSN") -> PostgresSinkSpec:
    """Write results at the hub to the PostgreSQL table ``table`` (``name`` or ``schema.name``), exactly once.

    Each micro-batch is one transaction that also records the batch's id, so
    a batch replayed after a hub restart writes nothing twice. A result's
    fields go to the columns of the same name; a table with a primary key
    (or the columns ``key`` names, which need a unique index) is upserted on
    it, so the last result for a key wins. The hub reads the connection
    string from its environment variable ``dsn_env``; the app never holds it.
    Needs ``spanedge[postgres]`` on the hub.

    Raises:
        InvalidDataflow: ``table``, a ``key`` column or ``dsn_env`` is not a plain name.
    """
    parts = table.split(".")
    if len(parts) > 2 or not all(_IDENTIFIER.fullmatch(p) for p in parts):
        msg = (
            f"sinks.postgres({table!r}): the table must be 'name' or 'schema.name', each a letter or _ "
            "followed by letters, digits, _ or $"
        )
        raise InvalidDataflow(msg)
    if isinstance(key, str):
        key = (key,)
    columns = tuple(key) if key is not None else None
    if columns is not None and (not columns or not all(_IDENTIFIER.fullmatch(c) for c in columns)):
        msg = f"sinks.postgres({table!r}, key={key!r}): the key must be one or more column names"
        raise InvalidDataflow(msg)
    if not _ENV_NAME.fullmatch(dsn_env):
        msg = f"sinks.postgres({table!r}, dsn_env={dsn_env!r}): dsn_env is the name of an environment variable"
        raise InvalidDataflow(msg)
    return PostgresSinkSpec("postgres", table, dsn_env=dsn_env, key=columns)


@dataclass(frozen=True)
class ConnectorSinkSpec(SinkSpec):
    """A sink written by an edge connector (``target`` is its URL); see :func:`modbus`, :func:`opcua`, :func:`connector`.

    Each result is a mapping: ``key_field`` names the point to write, ``value_field`` the value.
    With ``last_value_wins``, a result replaces a value of the same point not yet written.
    A ``target`` of ``"device:NAME"`` is the device binding ``NAME`` of the site where the sink
    runs (its ``devices:`` in ``sites.yaml``); ``connector`` is then the scheme it must have
    (``""``: any).
    """

    nodes: Mapping[str, str] = field(default_factory=dict, hash=False)
    points: Mapping[str, modbus_points.Point] = field(default_factory=dict, hash=False)
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    key_field: str = "point"
    value_field: str = "value"
    last_value_wins: bool = True
    connector: str = ""

    @property
    def device(self) -> str | None:
        """The name of the device binding the sink writes to, or ``None`` for a sink given a URL."""
        return self.target.removeprefix(DEVICE) if self.target.startswith(DEVICE) else None

    @property
    def scheme(self) -> str:
        """The URL's scheme: which connector writes the sink (for a device binding, the one it must have)."""
        return self.connector if self.device is not None else scheme_of(self.target)


def _scheme(url: str, expected: str | None, what: str) -> None:
    if url.startswith(DEVICE):
        problem = name_problem(url.removeprefix(DEVICE), "device")
        if problem is not None:
            msg = f"{what}: {problem} (a device binding is 'device:NAME', NAME under a spoke's devices: in sites.yaml)"
            raise InvalidDataflow(msg)
        return
    try:
        scheme = scheme_of(url)
    except ValueError as exc:
        msg = f"{what}: {str(exc).removeprefix('url: ')}"
        raise InvalidDataflow(msg) from None
    if expected is not None and scheme != expected:
        msg = f"{what}: the URL must start with {expected}://"
        raise InvalidDataflow(msg)


def modbus(
    url: str,
    points: Mapping[str, Mapping[str, Any]],
    *,
    key: str = "point",
    value: str = "value",
    last_value_wins: bool = True,
) -> ConnectorSinkSpec:
    """Write results to a Modbus TCP device's coils and holding registers, at least once (``spanedge[modbus]``).

    ``url`` is ``modbus://host:502`` (``?unit=N`` for a device id other than 1), or
    ``"device:NAME"``: the ``modbus://`` device ``NAME`` of the site where the sink runs; ``points`` names
    the points as a ``modbus://`` stream's ``points:`` do. A result ``{key: "valve", value: true}``
    writes to the point ``valve``. Values wait in a durable queue at the agent until the device
    took them; with ``last_value_wins`` only the newest value of each point waits. The sink runs at
    the edge (its scope is ``local``).
    """
    what = f"sinks.modbus({url!r})"
    _scheme(url, "modbus", what)
    if not points:
        msg = f"{what}: give points={{name: {{table: coil, address: 0}}, ...}}"
        raise InvalidDataflow(msg)
    parsed: dict[str, modbus_points.Point] = {}
    for name, point in points.items():
        try:
            parsed[name] = msgspec.convert(dict(point), modbus_points.Point)
        except (msgspec.ValidationError, ValueError, TypeError) as exc:
            msg = f"{what}: point {name!r}: {exc}"
            raise InvalidDataflow(msg) from None
        if not parsed[name].writable:
            msg = f"{what}: point {name!r} is a {parsed[name].where()}; only coils and holding registers are written"
            raise InvalidDataflow(msg)
        if parsed[name].time is not None:
            msg = f"{what}: point {name!r} has a time:, which only a stream's points read; leave it out of the sink"
            raise InvalidDataflow(msg)
    return ConnectorSinkSpec(
        "connector",
        url,
        points=parsed,
        key_field=key,
        value_field=value,
        last_value_wins=last_value_wins,
        connector="modbus",
    )


def opcua(
    url: str,
    nodes: Mapping[str, str],
    *,
    key: str = "point",
    value: str = "value",
    last_value_wins: bool = True,
    **options: Any,
) -> ConnectorSinkSpec:
    """Write results to OPC UA nodes, at least once (``spanedge[opcua]``), as :func:`modbus` does to points.

    ``url`` is ``opcua://host:4840/path`` or ``"device:NAME"``; ``nodes`` maps point names to node ids. ``options``
    takes ``security={...}``, ``username=`` and ``password_env=`` as an ``opcua://`` stream does.
    """
    what = f"sinks.opcua({url!r})"
    _scheme(url, "opcua", what)
    if not nodes:
        msg = f"{what}: give nodes={{name: 'ns=2;i=7', ...}}"
        raise InvalidDataflow(msg)
    for name, node in nodes.items():
        problem = opcua_nodes.node_problem(node)
        if problem is not None:
            msg = f"{what}: node {name!r}: {problem}"
            raise InvalidDataflow(msg)
    unknown = set(options) - {"security", "username", "password_env"}
    if unknown:
        msg = f"{what}: unknown option(s) {', '.join(sorted(unknown))}; it takes security=, username=, password_env="
        raise InvalidDataflow(msg)
    if "security" in options:
        try:
            options["security"] = msgspec.convert(options["security"], opcua_nodes.Security)
        except (msgspec.ValidationError, ValueError, TypeError) as exc:
            msg = f"{what}: security: {exc}"
            raise InvalidDataflow(msg) from None
    return ConnectorSinkSpec(
        "connector",
        url,
        nodes=dict(nodes),
        options=options,
        key_field=key,
        value_field=value,
        last_value_wins=last_value_wins,
        connector="opcua",
    )


def connector(
    url: str, *, key: str = "point", value: str = "value", last_value_wins: bool = True, **options: Any
) -> ConnectorSinkSpec:
    """Write results with a connector the app registers for the URL's scheme (see the connectors guide).

    ``url`` may be ``"device:NAME"``: the device ``NAME`` of the site where the sink runs, any scheme.
    """
    _scheme(url, None, f"sinks.connector({url!r})")
    return ConnectorSinkSpec(
        "connector", url, options=options, key_field=key, value_field=value, last_value_wins=last_value_wins
    )


def webhook(
    url: str,
    *,
    key: str = "",
    last_value_wins: bool = False,
    token_env: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> ConnectorSinkSpec:
    """POST each result as JSON to ``url`` (``http://`` or ``https://``) from the edge, at least once.

    Results wait in the agent's durable queue until the receiver answered 2xx; 408, 425, 429, a
    5xx or no answer are retried with backoff, any other answer drops the value (logged and counted).
    ``token_env`` names the agent's environment variable holding a bearer token. With ``key`` and
    ``last_value_wins``, only the newest waiting result per value of the ``key`` field is sent.
    """
    what = f"sinks.webhook({url!r})"
    _scheme(url, None, what)
    if url.startswith(DEVICE) or scheme_of(url) not in ("http", "https"):
        msg = f"{what}: the URL must start with http:// or https://"
        raise InvalidDataflow(msg)
    if token_env is not None and not _ENV_NAME.fullmatch(token_env):
        msg = f"{what}: token_env={token_env!r} is not the name of an environment variable"
        raise InvalidDataflow(msg)
    if last_value_wins and not key:
        msg = f"{what}: last_value_wins=True needs key=, the field whose newest result wins"
        raise InvalidDataflow(msg)
    if not 0 < timeout_s <= 600:
        msg = f"{what}: timeout_s={timeout_s!r} must be over 0 and at most 600 seconds"
        raise InvalidDataflow(msg)
    options = {"token_env": token_env, "headers": dict(headers or {}), "timeout_s": timeout_s}
    return ConnectorSinkSpec(
        "connector", url, options=options, key_field=key, value_field="", last_value_wins=last_value_wins
    )
