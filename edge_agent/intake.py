"""Intake: which site brokers and connectors the agent reads, which pipeline source each message feeds, and redelivery dedupe."""

from __future__ import annotations

import collections
import logging
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from edge_agent.connectors.api import make_source
from edge_agent.connectors.runner import SourceRunner
from edge_agent.mqtt.transport import Inbox, Message, MessageSource, Transport, TransportFactory
from spanedge.errors import SpanEdgeError
from spanedge.plan import split_replica
from spanedge.runtime import Pipeline
from spanedge.sites import Sites

log = logging.getLogger(__name__)


def topic_matches(topic_filter: str, topic: str) -> bool:
    """True if ``topic`` matches the MQTT ``topic_filter`` (``+``: one level, ``#``: the rest, parent included).

    Topics starting with ``$`` match only filters that start with ``$`` too.
    """
    if topic[:1] == "$" and topic_filter[:1] != "$":
        return False
    parts = topic.split("/")
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if level == "#":
            return True
        if i >= len(parts) or (level != "+" and level != parts[i]):
            return False
    return len(levels) == len(parts)


@dataclass(frozen=True)
class Route:
    """Messages of ``topic_filter`` at ``source_site``'s broker feed ``replica`` of ``app``, up to ``max_bytes`` each.

    A connector stream's route has no topic filter: the readings of its connector feed the replica.
    """

    source_site: str
    topic_filter: str
    qos: int
    app: str
    replica: str
    max_bytes: int
    stream: str = ""


class Intake:
    """The connections to site brokers, kept in step with the pipelines' source replicas.

    A source replica of group ``S`` reads ``S``'s broker (its own site's, or another spoke's for
    offloaded replicas), with the topic filter ``sites.yaml`` binds to the stream there. Each
    connection keeps no payload over the largest ``max_message_bytes`` of the streams it reads.
    A stream bound with ``url:`` is read by a connector (:mod:`edge_agent.connectors`) instead,
    one per source site and stream, started and stopped with the pipelines that read it.
    """

    def __init__(self, site: str, sites: Sites, inbox: Inbox, connect: TransportFactory) -> None:
        """Read nothing yet; :meth:`rewire` subscribes."""
        self.site = site
        self.sites = sites
        self.inbox = inbox
        self.connect = connect
        self.transports: dict[str, Transport] = {}
        self.routes: list[Route] = []
        self.connectors: dict[tuple[str, str], SourceRunner] = {}
        self._cache: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
        self._live_since = time.monotonic()

    def rewire(self, pipelines: Mapping[str, Pipeline]) -> list[Transport]:
        """Subscribe to what ``pipelines`` read and drop the rest; return the connections closed."""
        self.routes = self._routes(pipelines)
        self._cache.clear()
        wanted: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
        limits: dict[str, int] = {}
        self._rewire_connectors()
        for r in self.routes:
            if r.stream:
                continue
            if (r.topic_filter, r.qos) not in wanted[r.source_site]:
                wanted[r.source_site].append((r.topic_filter, r.qos))
            limits[r.source_site] = max(r.max_bytes, limits.get(r.source_site, 0))
        closed = []
        for source_site, transport in list(self.transports.items()):
            if source_site not in wanted:
                transport.unsubscribe([f for f, _ in transport.filters])
                transport.stop()
                del self.transports[source_site]
                closed.append(transport)
        for source_site, filters in wanted.items():
            transport = self.transports.get(source_site) or self._open(source_site)
            transport.max_message_bytes = limits[source_site]
            stale = [f for f, _ in transport.filters if f not in {x for x, _ in filters}]
            if stale:
                transport.unsubscribe(stale)
            transport.subscribe(filters)
        return closed

    def _rewire_connectors(self) -> None:
        wanted = {(r.source_site, r.stream) for r in self.routes if r.stream}
        for key in [k for k in self.connectors if k not in wanted]:
            self.connectors.pop(key).stop()
        for source_site, stream in wanted - set(self.connectors):
            binding = self.sites.site(source_site).streams[stream]
            try:
                source = make_source(binding, stream)
            except SpanEdgeError as exc:
                log.error("stream %s of site %s gets no input: %s", stream, source_site, exc)
                continue
            runner = SourceRunner(source, source_site, stream, self.inbox)
            runner.start()
            self.connectors[(source_site, stream)] = runner

    def live_for(self) -> float:
        """Seconds every input connection and connector has been up since the last (re)connection; 0 while one is down.

        Until then, silence on an input may only mean its messages are held at a broker or a device.
        """
        now = time.monotonic()
        if not all(t.connected for t in self.transports.values()) or not all(
            r.connected for r in self.connectors.values()
        ):
            self._live_since = now
        return now - self._live_since

    def _reconnected(self) -> None:
        self._live_since = time.monotonic()  # a float store: safe from the network thread

    def live(self) -> set[MessageSource]:
        """The connections and connectors whose messages are routed now."""
        return {*self.transports.values(), *self.connectors.values()}

    def _open(self, source_site: str) -> Transport:
        transport = self.connect(
            self.sites.site(source_site).mqtt(),
            f"spanedge-{self.site}-from-{source_site}",
            f"site broker ({source_site})",
            inbox=self.inbox,
        )
        transport.on_connected = self._reconnected
        transport.start()
        self.transports[source_site] = transport
        return transport

    def _routes(self, pipelines: Mapping[str, Pipeline]) -> list[Route]:
        routes = []
        for name, pipeline in pipelines.items():
            for replica in pipeline.sources:
                stream, group = split_replica(replica)
                source_site = group or self.site
                binding = self.sites.site(source_site).streams.get(stream)
                if binding is None:
                    log.error(
                        "app %s: site %s does not bind stream %r in sites.yaml; %s gets no input",
                        name,
                        source_site,
                        stream,
                        replica,
                    )
                    continue
                stream_of_connector = stream if binding.url is not None else ""
                routes.append(
                    Route(
                        source_site,
                        binding.topic,
                        binding.qos,
                        name,
                        replica,
                        binding.max_message_bytes,
                        stream_of_connector,
                    )
                )
        return routes

    def route(self, message: Message) -> list[tuple[str, str, int]]:
        """The ``(app, source replica, largest message in bytes)`` a message feeds."""
        key = (message.source.name, message.topic)
        found = self._cache.get(key)
        if found is None and isinstance(message.source, SourceRunner):
            runner = message.source
            found = [
                (r.app, r.replica, r.max_bytes)
                for r in self.routes
                if r.stream == runner.stream and r.source_site == runner.site
            ]
            self._cache[key] = found
        if found is None:
            found = [
                (r.app, r.replica, r.max_bytes)
                for r in self.routes
                if self.transports.get(r.source_site) is message.source and topic_matches(r.topic_filter, message.topic)
            ]
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = found
        return found

    def stop(self) -> None:
        """Disconnect from every site broker and connector (unacknowledged messages stay with the brokers)."""
        for transport in self.transports.values():
            transport.stop()
        for runner in self.connectors.values():
            runner.stop()


class Redeliveries:
    """Recognises a QoS 1 message processed before its acknowledgement was lost (a crash, a reconnect).

    A redelivery has the same broker, message id and payload. The last ``size`` committed ones are
    kept with each checkpoint (:meth:`to_blob`), so a restarted agent still recognises them.
    """

    def __init__(self, size: int = 512) -> None:
        """Remember nothing yet."""
        self._recent: collections.deque[tuple[str, int, int]] = collections.deque(maxlen=size)
        self._recent_set: set[tuple[str, int, int]] = set()
        self._pending: set[tuple[str, int, int]] = set()

    @staticmethod
    def _entry(m: Message) -> tuple[str, int, int]:
        return (m.source.name, m.mid, zlib.crc32(m.payload))

    def seen(self, m: Message) -> bool:
        """True if ``m`` was processed already; otherwise remember it as pending its commit."""
        entry = self._entry(m)
        if entry in self._recent_set:
            return True
        self._pending.add(entry)
        self._recent_set.add(entry)
        return False

    def committed(self, messages: list[Message]) -> None:
        """``messages`` are committed: keep them among the recent ones."""
        for m in messages:
            entry = self._entry(m)
            if entry in self._pending:
                self._pending.discard(entry)
                if len(self._recent) == self._recent.maxlen:
                    self._recent_set.discard(self._recent[0])
                self._recent.append(entry)

    def to_blob(self) -> bytes:
        """The recent committed messages, for the checkpoint."""
        return orjson.dumps(list(self._recent))

    def load(self, blob: bytes) -> None:
        """Restore :meth:`to_blob` output."""
        try:
            for name, mid, crc in orjson.loads(blob):
                entry = (str(name), int(mid), int(crc))
                self._recent.append(entry)
                self._recent_set.add(entry)
        except (orjson.JSONDecodeError, TypeError, ValueError):
            log.warning("intake checkpoint unreadable; redelivered messages may be counted twice")
