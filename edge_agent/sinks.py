"""Local outputs of the agent: sink values (MQTT and connector sinks), dead letters to the hub, late records."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from edge_agent.checkpoint import Committed
from edge_agent.connectors.api import Publisher
from edge_agent.connectors.bindings import UnboundDevice, bind
from edge_agent.connectors.mqtt import MqttSink, Unacknowledged
from edge_agent.mqtt.transport import Transport
from spanedge import topics
from spanedge.logsafe import escaped
from spanedge.private_files import open_private
from spanedge.result_latency import ResultLatency
from spanedge.runtime import DeadLetter
from spanedge.sinks import ConnectorSinkSpec
from spanedge.sites import DeviceBinding

if TYPE_CHECKING:
    from edge_agent.connectors.actuators import Actuators
    from spanedge.runtime import Pipeline

log = logging.getLogger(__name__)

#: File sink targets with one of these suffixes are files; other targets are directories.
FILE_SUFFIXES = (".jsonl", ".json", ".txt", ".log")


class LocalSinks:
    """Serves what a commit made durable: ``mqtt``, ``file``, ``console``, ``memory`` and connector sinks, the DLQ and late records.

    MQTT sinks are a connector :class:`~edge_agent.connectors.api.Publisher`
    (:class:`~edge_agent.connectors.mqtt.MqttSink`), handed each value as the commit is served.
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
        self.memory: dict[str, list[Any]] = collections.defaultdict(list)
        self.latency = ResultLatency()
        """Each sink's recent result latencies, by ``<app>/<sink operator>``."""
        self.dlq_count = 0
        self.late_count = 0
        self.counters: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        """Per app, its ``dlq``, ``late`` and ``errors`` since start (:data:`spanedge.wire.heartbeat.COUNTERS`)."""
        self._files: dict[str, IO[str]] = {}
        self._late_full: set[str] = set()
        self.mqtt = MqttSink(site_broker, f"site broker ({site})")
        self.unacknowledged: Unacknowledged = self.mqtt.pending
        """The MQTT sink values the broker has not acknowledged yet."""
        self.publishers: dict[str, Publisher] = {"mqtt": self.mqtt}
        """The sinks, by kind, whose clients queue their values themselves."""
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
            publisher = self.publishers.get(spec.kind)
            if publisher is not None:
                publisher.publish(app, spec.target, body, done.sink_floor.get(app))
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
            self.counters[app]["late"] += 1
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
        self.counters[app]["dlq"] += 1
        if dead.error:
            self.counters[app]["errors"] += 1
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

    def unacknowledged_bounds(self) -> dict[str, float]:
        """Per app, the lowest event time a value some publisher's server has not acknowledged may carry."""
        out: dict[str, float] = {}
        for publisher in self.publishers.values():
            for app, bound in publisher.unacknowledged().items():
                out[app] = min(bound, out.get(app, bound))
        return out

    def closed(self, transport: Transport) -> None:
        """``transport`` is closed: the MQTT sink stops waiting for its acknowledgements (a warning says how many)."""
        self.mqtt.closed(transport)

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
