"""The connector API: what a source and a sink are, and their registration by URL scheme.

A :class:`Source` reads one stream from one server. Its :meth:`Source.session` connects and
yields batches of :class:`Reading`; when the connection fails it raises, and the agent opens a
new session after a growing wait. Each reading is fed to the pipelines, committed with their
state and outputs, and only then handed back to :meth:`Source.acknowledge` (at least once into
the pipeline). A :class:`Sink` writes one value per call; writes must be idempotent (an absolute
set point, an upsert), since after a failure the agent writes the value again. A :class:`Publisher`
is a sink whose client queues and retries values itself, as the MQTT sink's QoS 1 session does:
the agent hands it each value as it serves the commit and keeps no queue of its own.

Every input, the MQTT intake's broker connections included, feeds the agent's inbox as a
:class:`~edge_agent.mqtt.transport.MessageSource` acknowledged after the commit; a :class:`Source`
is run as one by :class:`~edge_agent.connectors.runner.SourceRunner`.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from spanedge.connectors import BUILT_IN
from spanedge.errors import MissingExtra, SpanEdgeError

if TYPE_CHECKING:
    from spanedge.sinks import ConnectorSinkSpec
    from spanedge.sites import StreamBinding


class MissingConnector(SpanEdgeError):
    """No connector is registered for a URL's scheme."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One value a source read.

    Attributes:
        name: the point's name, as records carry it (``nodes:``/``points:`` keys in ``sites.yaml``).
        value: the value (JSON-serialisable).
        event_time: seconds since the epoch: the device's own timestamp where it gives one.
        where: where the value came from (a node id, a register), for dead letters.
        problem: non-empty when the value does not fit: it goes to the dead letters with ``where``.
        token: handed back to :meth:`Source.acknowledge` once the reading is committed.
        payload: a whole JSON record, taken as an MQTT message's payload is (``name`` and ``value``
            are then unused): for sources that carry records rather than point values.
    """

    name: str
    value: Any
    event_time: float
    where: str
    problem: str = ""
    token: Any = None
    payload: bytes | None = None


class Source(Protocol):
    """Reads one stream. The agent runs it with :class:`~edge_agent.connectors.runner.SourceRunner`."""

    name: str
    """A label for log lines, e.g. ``opcua://plc-1:4840``."""

    def session(self) -> AsyncIterator[list[Reading]]:
        """Connect and yield readings until the connection fails (raise then; the agent reconnects)."""
        ...

    def acknowledge(self, tokens: list[Any]) -> None:
        """The readings with these ``token`` values are committed (a no-op for devices that keep no queue)."""


class Sink(Protocol):
    """Writes values to one server. Writes are idempotent: the agent repeats a write that may have failed."""

    name: str

    async def connect(self) -> None:
        """Open the connection (raise if the server is unreachable; the agent retries)."""

    async def write(self, key: str, value: Any) -> None:
        """Write ``value`` to the point ``key``; raise ``ValueError`` for a value that can never be written."""

    async def close(self) -> None:
        """Close the connection."""


class Publisher(Protocol):
    """A sink whose client keeps its own delivery queue (MQTT at QoS 1): see :mod:`edge_agent.connectors.mqtt`.

    The agent calls :meth:`publish` for each value while it serves the commit that made the value
    durable, in the commit's order, with no durable queue of its own in between (a :class:`Sink`
    gets one). Until the server acknowledged a value, a site that dies may lose it, so what the
    site reports as delivered stays below :meth:`unacknowledged`.
    """

    name: str
    """A label for log lines, e.g. ``site broker (truck-7)``."""

    def publish(self, app: str, target: str, body: bytes, bound: float | None) -> None:
        """Hand ``body`` (a JSON result of ``app``) to the client for ``target``, without waiting for the server.

        ``bound`` is the lowest event time the value may carry (``None``: unknown).
        """

    def unacknowledged(self) -> dict[str, float]:
        """Per app, the lowest ``bound`` of the values the server has not acknowledged yet (apps with none left out)."""
        ...


SourceFactory = Callable[["StreamBinding", str], Source]
"""Builds a source from a stream's ``sites.yaml`` binding and the stream's name."""
SinkFactory = Callable[["ConnectorSinkSpec"], Sink]
"""Builds a sink from its ``sinks.connector(...)`` spec."""

_SOURCES: dict[str, SourceFactory] = {}
_SINKS: dict[str, SinkFactory] = {}
_MODULES = {
    "opcua": "edge_agent.connectors.opcua",
    "modbus": "edge_agent.connectors.modbus",
    "http": "edge_agent.connectors.http",
    "https": "edge_agent.connectors.http",
    "file": "edge_agent.connectors.tail",
}


def register_source(scheme: str, factory: SourceFactory) -> None:
    """Read streams whose ``url:`` has ``scheme`` with the sources ``factory`` builds."""
    _SOURCES[scheme] = factory


def register_sink(scheme: str, factory: SinkFactory) -> None:
    """Write sinks whose URL has ``scheme`` with the sinks ``factory`` builds."""
    _SINKS[scheme] = factory


def _load(scheme: str, registry: Mapping[str, Any], what: str) -> Any:
    if scheme not in registry and scheme in BUILT_IN:
        try:
            importlib.import_module(_MODULES[scheme])  # registers itself
        except ImportError as exc:
            raise MissingExtra((exc.name or scheme).partition(".")[0], scheme) from None
    factory = registry.get(scheme)
    if factory is None:
        known = ", ".join(sorted(set(registry) | BUILT_IN))
        msg = (
            f"no connector for {scheme}:// {what} (known: {known}); import the module that calls "
            f"register_{what}({scheme!r}, ...) from the app"
        )
        raise MissingConnector(msg)
    return factory


def make_source(binding: StreamBinding, stream: str) -> Source:
    """The source of a connector stream.

    Raises:
        MissingConnector: no connector is registered for the URL's scheme.
        MissingExtra: the built-in connector's library is not installed (the message says the command).
    """
    assert binding.url is not None
    factory: SourceFactory = _load(binding.connector or "", _SOURCES, "source")
    return factory(binding, stream)


def make_sink(spec: ConnectorSinkSpec) -> Sink:
    """The sink of a ``sinks.modbus/opcua/connector(...)`` spec.

    Raises:
        MissingConnector: no connector is registered for the URL's scheme.
        MissingExtra: the built-in connector's library is not installed.
    """
    factory: SinkFactory = _load(spec.scheme, _SINKS, "sink")
    return factory(spec)
