"""The OPC UA connector (asyncua, ``spanedge[opcua]``): a subscription source and a write sink.

The source subscribes to a stream's nodes and takes each value change with the server's
SourceTimestamp as its event time (its ServerTimestamp if the device sends none). A lost
connection ends the session; the next one connects again and subscribes anew, and the server
sends each node's current value first. The sink writes a value to a node as the node's own data
type (an absolute write: writing it twice leaves the node as once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from asyncua import ua
from asyncua.client.client import Client

from edge_agent.connectors.api import Reading, register_sink, register_source
from spanedge.connectors import opcua
from spanedge.errors import SpanEdgeError
from spanedge.sinks import ConnectorSinkSpec
from spanedge.sites import StreamBinding

log = logging.getLogger(__name__)

#: Seconds between checks that the server still answers, while no value changes.
CHECK_INTERVAL_S = 1.0
#: Seconds to wait for the server to answer a request.
TIMEOUT_S = 4.0
#: Value changes the server keeps per node between two publishes (so none is lost to a coalesced queue).
QUEUE_SIZE = 1000
#: Value changes held between two batches; past this the oldest are dropped, never the session.
MAX_QUEUED = 100_000


def _password(env: str | None) -> str | None:
    if env is None:
        return None
    value = os.environ.get(env)
    if value is None:
        msg = f"environment variable {env} is not set; export it with the OPC UA password"
        raise SpanEdgeError(msg)
    return value


async def _connected_client(
    url: str, security: opcua.Security | None, username: str | None, password_env: str | None
) -> Client:
    client = Client(opcua.endpoint(url), timeout=TIMEOUT_S)
    if username:
        client.set_user(username)
        client.set_password(_password(password_env) or "")
    if security is not None:
        await client.set_security_string(security.asyncua_string())
    await client.connect()
    return client


def _stamp(data_value: Any) -> float:
    for stamp in (data_value.SourceTimestamp, data_value.ServerTimestamp):
        if stamp is not None:
            return float(stamp.timestamp())
    return time.time()


def _fits(value: Any) -> str:
    """Why ``value`` cannot be a record's value ('' if it can)."""
    if isinstance(value, bool | str):
        return ""
    if isinstance(value, int | float):
        return "" if math.isfinite(value) else f"the value {value} is not a finite number"
    return f"a value of type {type(value).__name__} is not a number, boolean or string"


class _Changes:
    """The subscription's handler: value changes of the nodes, by node id, queued for the session."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.queue: asyncio.Queue[Reading] = asyncio.Queue()
        self.dropped = 0

    def datachange_notification(self, node: Any, value: Any, data: Any) -> None:
        node_id = node.nodeid.to_string()
        data_value = data.monitored_item.Value
        problem = _fits(value)
        status = data_value.StatusCode
        if status is not None and not status.is_good():
            problem = f"status {status.name}"
        where = f"node {node_id}"
        if problem:
            problem = f"{where}: {problem}"
        name = self.names.get(node_id, node_id)
        if self.queue.qsize() >= MAX_QUEUED:
            self.queue.get_nowait()
            self.dropped += 1
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning("%d value changes dropped: more than %d waited for the agent", self.dropped, MAX_QUEUED)
        self.queue.put_nowait(Reading(name, None if problem else value, _stamp(data_value), where, problem))

    def status_change_notification(self, status: Any) -> None:
        """The server ended the subscription: the session notices it at its next check."""


class OpcUaSource:
    """The value changes of a stream's nodes (see the module)."""

    def __init__(self, binding: StreamBinding, stream: str) -> None:
        assert binding.url is not None
        self.url = binding.url
        self.binding = binding
        self.stream = stream
        self.name = opcua.endpoint(binding.url)
        self.nodes = binding.opcua_nodes

    async def session(self) -> AsyncIterator[list[Reading]]:
        """Connect, subscribe and yield the value changes until the server stops answering."""
        b = self.binding
        client = await _connected_client(self.url, b.security, b.username, b.password_env)
        try:
            changes = _Changes({})
            nodes = [client.get_node(node_id) for node_id in self.nodes.values()]
            changes.names = {n.nodeid.to_string(): name for n, name in zip(nodes, self.nodes, strict=True)}
            subscription = await client.create_subscription(b.publish_interval * 1000, changes)
            results = await subscription.subscribe_data_change(
                nodes, queuesize=QUEUE_SIZE, sampling_interval=ua.Double(0)
            )
            for name, result in zip(self.nodes, results if isinstance(results, list) else [results], strict=True):
                if not isinstance(result, int):
                    msg = f"cannot subscribe to node {self.nodes[name]} ({name}): {result}"
                    raise SpanEdgeError(msg)
            yield []
            while True:
                try:
                    first = await asyncio.wait_for(changes.queue.get(), CHECK_INTERVAL_S)
                except TimeoutError:
                    await client.check_connection()
                    continue
                batch = [first]
                while not changes.queue.empty() and len(batch) < 1000:
                    batch.append(changes.queue.get_nowait())
                yield batch
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.disconnect(), TIMEOUT_S)

    def acknowledge(self, tokens: list[Any]) -> None:
        """Nothing to do: the server keeps no queue to acknowledge."""


class OpcUaSink:
    """Writes values to nodes: ``sinks.opcua(url, nodes={...})``."""

    def __init__(self, spec: ConnectorSinkSpec) -> None:
        self.spec = spec
        self.name = opcua.endpoint(spec.target)
        self.nodes = {**opcua.url_nodes(spec.target), **spec.nodes}
        self._client: Client | None = None
        self._types: dict[str, Any] = {}

    async def connect(self) -> None:
        """Connect to the server."""
        security = self.spec.options.get("security")
        self._client = await _connected_client(
            self.spec.target, security, self.spec.options.get("username"), self.spec.options.get("password_env")
        )

    async def write(self, key: str, value: Any) -> None:
        """Write ``value`` to the node named ``key``, as the node's data type."""
        assert self._client is not None
        node_id = self.nodes.get(key)
        if node_id is None:
            msg = f"no node named {key!r} in the sink's nodes ({', '.join(self.nodes)})"
            raise ValueError(msg)
        node = self._client.get_node(node_id)
        vtype = self._types.get(key)
        if vtype is None:
            vtype = self._types[key] = await node.read_data_type_as_variant_type()
        problem = _fits(value)
        if problem:
            msg = f"node {node_id}: {problem}"
            raise ValueError(msg)
        await node.write_value(ua.DataValue(ua.Variant(_as(vtype, value, node_id), vtype)))

    async def close(self) -> None:
        """Disconnect."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._client.disconnect(), TIMEOUT_S)
            self._client = None


def _as(vtype: Any, value: Any, node_id: str) -> Any:
    if vtype == ua.VariantType.Boolean:
        return bool(value)
    if vtype in (ua.VariantType.Double, ua.VariantType.Float):
        return float(value)
    if vtype == ua.VariantType.String:
        return str(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer():
        msg = f"node {node_id} holds {vtype.name}, which cannot take {value!r}"
        raise ValueError(msg)
    return int(value)


register_source("opcua", OpcUaSource)
register_sink("opcua", OpcUaSink)
