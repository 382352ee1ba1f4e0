"""Local outputs of the agent: sink values, dead letters to the hub, late records to a side file."""

from __future__ import annotations

import collections
import functools
import logging
import math
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from edge_agent.checkpoint import Committed
from edge_agent.connectors.bindings import UnboundDevice, bind
from edge_agent.intake import Intake
from edge_agent.mqtt.transport import Transport, TransportFactory
from spanedge import topics
from spanedge.logsafe import escaped
from spanedge.mqtt import AGENT_SINK
from spanedge.private_files import open_private
from spanedge.result_latency import ResultLatency
from spanedge.runtime import DeadLetter
from spanedge.sinks import ConnectorSinkSpec
from spanedge.sites import DeviceBinding, Sites

if TYPE_CHECKING:
    from edge_agent.connectors.actuators import Actuators
    from spanedge.runtime import Pipeline

log = logging.getLogger(__name__)

#: File sink targets with one of these suffixes are files; other targets are directories.
FILE_SUFFIXES = (".jsonl", ".json", ".txt", ".log")


class SiteBrokerLink:
    """The connection MQTT sinks publish on: the intake's to this site's broker if it reads it, else its own."""

    def __init__(self, site: str, sites: Sites, intake: Intake, connect: TransportFactory) -> None:
        """Connect on first use."""
        self.site = site
        self.sites = sites
        self.intake = intake
        self.connect = connect
        self._transport: Transport | None = None

    def get(self) -> Transport:
        """The connection, opened on first use."""
        if self._transport is None:
            own = self.intake.transports.get(self.site)
            if own is None:
                own = self.connect(
                    self.sites.site(self.site).mqtt(),
                    f"spanedge-{self.site}-sink",
                    f"site broker ({self.site})",
                    settings=AGENT_SINK,
                )
                own.start()
            self._transport = own
        return self._transport

    def closed(self, transport: Transport) -> None:
        """The intake closed ``transport``: open another on next use if it was this one."""
        if self._transport is transport:
            self._transport = None

    def stop(self) -> None:
        """Disconnect, unless the intake owns the connection (it stops its own)."""
        if self._transport is not None and self._transport not in self.intake.transports.values():
            self._transport.stop()


class Unacknowledged:
    """MQTT sink values published and not yet acknowledged by the broker, each with the event time it lies at or past.

    Sink values are published after their commit; until the broker
    acknowledges one, a site that dies may lose it. So what the site says it
    has delivered (:func:`edge_agent.telemetry.delivered`) stays below the
    lowest bound of these: the app's sink frontier at the commit before
    (every value of a commit lies at or past it). Acknowledgements come on
    the connection's thread, possibly before :meth:`published` records the
    message: such an early one is kept until it does.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int], tuple[str, float | None]] = {}  # (connection, mid) -> (app, bound)
        self._early: set[tuple[int, int]] = set()

    def hook(self, transport: Transport) -> None:
        """Hear ``transport``'s acknowledgements (set once per connection, before its first publish)."""
        if getattr(transport.on_published, "func", None) != self._acked:
            transport.on_published = functools.partial(self._acked, id(transport))

    def published(self, transport: Transport, mid: int, app: str, bound: float | None) -> None:
        """``transport`` published a value of ``app`` as ``mid``; its event time is at or past ``bound`` (None: unknown)."""
        key = (id(transport), mid)
        with self._lock:
            if key in self._early:
                self._early.discard(key)
            else:
                self._pending[key] = (app, bound)

    def _acked(self, connection: int, mid: int) -> None:
        key = (connection, mid)
        with self._lock:
            if self._pending.pop(key, None) is None:
                self._early.add(key)

    def forget(self, transport: Transport) -> int:
        """Stop waiting for a closed connection's acknowledgements; return how many never came."""
        connection = id(transport)
        with self._lock:
            gone = [k for k in self._pending if k[0] == connection]
            for k in gone:
                del self._pending[k]
            self._early = {k for k in self._early if k[0] != connection}
        return len(gone)

    def bounds(self) -> dict[str, float]:
        """Per app, the lowest event time a value still unacknowledged may carry (apps with none left out)."""
        out: dict[str, float] = {}
        with self._lock:
            for app, bound in self._pending.values():
                if bound is not None and bound < out.get(app, math.inf):
                    out[app] = bound
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


class LocalSinks:
    """Serves what a commit made durable: ``mqtt``, ``file``, ``console``, ``memory`` and connector sinks, the DLQ and late records.

    Connector sinks (``sinks.modbus/opcua/connector(...)``) go to a durable queue in the state
    directory, written by their connectors (:mod:`edge_agent.connectors.actuators`). A sink given
    ``"device:NAME"`` writes to this site's device ``NAME`` (:func:`~edge_agent.connectors.bindings.bind`);
    without that binding its values are dead-lettered.

    Args:
        site: the site this agent serves (file names, DLQ topics).
        state_dir: where ``late-<app>.jsonl`` goes.
        late_file_max_bytes: bound of each late-records file (the count is always kept).
        hub: the hub broker connection (dead letters).
        site_broker: returns the connection to this site's broker, for MQTT sinks (opened on first use).
        devices: returns this site's device bindings (``devices:`` in ``sites.yaml``; none if left out).
    """

    def __init__(
        self,
        site: str,
        state_dir: Path,
        late_file_max_bytes: int,
        hub: Transport,
        site_broker: Callable[[], Transport],
        devices: Callable[[], Mapping[str, DeviceBinding]] | None = None,
    ) -> None:
        """Open nothing until a sink needs it."""
        self.site = site
        self.devices = devices or dict
        self.state_dir = state_dir
        self.late_file_max_bytes = late_file_max_bytes
        self.hub = hub
        self.site_broker = site_broker
        self.memory: dict[str, list[Any]] = collections.defaultdict(list)
        self.latency = ResultLatency()
        """Each sink's recent result latencies, by ``<app>/<sink operator>``."""
        self.dlq_count = 0
        self.late_count = 0
        self._files: dict[str, IO[str]] = {}
        self._late_full: set[str] = set()
        self.unacknowledged = Unacknowledged()
        self._actuators: Actuators | None = None

    @property
    def actuators(self) -> Actuators:
        """The connector sinks' queue, opened on first use."""
        if self._actuators is None:
            from edge_agent.connectors.actuators import Actuators

            self._actuators = Actuators(self.state_dir / "actuators.db")
        return self._actuators

    @property
    def opened_actuators(self) -> Actuators | None:
        """The connector sinks' queue if a sink opened it, else ``None``."""
        return self._actuators

    def resume(self, pipelines: dict[str, Pipeline]) -> None:
        """Write what the connector sinks of ``pipelines`` had left before the agent stopped."""
        specs: dict[str, ConnectorSinkSpec] = {}
        for app, pipeline in pipelines.items():
            for node in pipeline.nodes:
                if isinstance(node.op.sink, ConnectorSinkSpec):
                    try:
                        specs[f"{app}/{node.op.name}"] = bind(node.op.sink, self.site, self.devices())
                    except UnboundDevice as exc:
                        log.error("sink %s/%s: %s; its waiting values stay queued", app, node.op.name, exc)
        if specs and (self._actuators is not None or (self.state_dir / "actuators.db").exists()):
            self.actuators.resume(specs)

    def serve(self, done: Committed) -> None:
        """Deliver the sink values, dead letters and late records of a commit."""
        written: dict[str, list[float | None]] = {}
        for app, item in done.sinks:
            written.setdefault(f"{app}/{item.operator}", []).append(item.event_time)
            spec = item.spec
            body = orjson.dumps(item.value, default=str)  # a sink never fails on an odd value type
            if spec.kind == "mqtt":
                broker = self.site_broker()
                self.unacknowledged.hook(broker)
                mid = broker.publish(spec.target, body, 1)
                self.unacknowledged.published(broker, mid, app, done.sink_floor.get(app))
            elif spec.kind == "file":
                self._file(item.operator, spec.target).write(body.decode() + "\n")
            elif spec.kind == "console":
                print(body.decode(), flush=True)
            elif isinstance(spec, ConnectorSinkSpec):
                self._actuate(app, item.operator, spec, item.value, body, item.event_time)
            else:
                self.memory[spec.target or item.operator].append(item.value)
        for app, dead in done.dlq:
            self._dead(app, dead)
        for app, dead in done.late:
            self.late_count += 1
            self._side_output(app, dead)
        for handle in self._files.values():
            handle.flush()
        for sink, event_times in written.items():
            self.latency.written(sink, event_times)

    def _actuate(
        self, app: str, operator: str, spec: ConnectorSinkSpec, value: Any, body: bytes, event_time: float | None
    ) -> None:
        """Queue a connector sink's value for its device, or dead-letter it if this site lacks the device."""
        try:
            bound = bind(spec, self.site, self.devices())
        except UnboundDevice as exc:
            self._dead(app, DeadLetter.of(str(exc), operator, body, self.site, event_time or 0.0))
            return
        self.actuators.put(f"{app}/{operator}", bound, value)

    def _dead(self, app: str, dead: DeadLetter) -> None:
        """Publish a dead letter to the hub (logged for the first ten, then every thousandth)."""
        self.dlq_count += 1
        if self.dlq_count <= 10 or self.dlq_count % 1000 == 0:
            log.info("dead letter #%d (%s, %s): %s", self.dlq_count, app, dead.operator, escaped(dead.reason))
        self.hub.publish(topics.dlq(app, self.site), dead.to_json(), 1)

    def result_latency(self) -> dict[str, dict[str, dict[str, float]]]:
        """Per app, per local sink that wrote in the last minute, its result latency p50/p95 and count."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for name, summary in self.latency.summary().items():
            app, _, sink = name.partition("/")
            out.setdefault(app, {})[sink] = summary
        return out

    def closed(self, transport: Transport) -> None:
        """``transport`` is closed: its values not yet acknowledged may be lost; say so and stop waiting for them."""
        lost = self.unacknowledged.forget(transport)
        if lost:
            log.warning(
                "%d MQTT sink value(s) published on %s were never acknowledged before it closed and may be lost",
                lost,
                transport.name,
            )

    def _side_output(self, app: str, dead: DeadLetter) -> None:
        """Append a late record to ``<state dir>/late-<app>.jsonl`` (bounded; the count is always kept)."""
        path = self.state_dir / f"late-{app}.jsonl"
        handle = self._files.get(str(path))
        if handle is None:
            handle = self._files[str(path)] = open_private(path)
        if handle.tell() < self.late_file_max_bytes:
            handle.write(dead.to_json().decode() + "\n")
        elif app not in self._late_full:
            self._late_full.add(app)
            log.warning("late records of app %s exceed %s bytes; counting only", app, self.late_file_max_bytes)

    def _file(self, operator: str, target: str) -> IO[str]:
        path = Path(target)
        if path.suffix not in FILE_SUFFIXES:
            path = path / f"{operator}-{self.site}.jsonl"
        key = str(path)
        handle = self._files.get(key)
        if handle is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = self._files[key] = path.open("a", encoding="utf-8")
        return handle

    def close(self) -> None:
        """Close the files."""
        for handle in self._files.values():
            handle.close()
        self._files.clear()
        if self._actuators is not None:
            self._actuators.close()
            self._actuators = None
