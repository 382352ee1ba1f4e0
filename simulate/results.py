"""Watching the brokers: sink results, heartbeats and dead letters, with their arrival times."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson

from simulate.broker import Login
from simulate.operator_totals import OperatorTotals
from spanedge import topics
from spanedge.app import App
from spanedge.numbers import number
from spanedge.operators import Kind

log = logging.getLogger(__name__)

#: Mosquitto's count of subscriptions, published every ``sys_interval``.
SUBSCRIPTIONS = "$SYS/broker/subscriptions/count"


@dataclass(frozen=True, slots=True)
class Result:
    """One value a sink published, where (the broker's site) and when it arrived."""

    sink: str
    site: str
    value: Any
    received_at: float


def mqtt_sinks(app: App) -> dict[str, list[str]]:
    """Sink topics of the app and the sink operators that publish on each."""
    out: dict[str, list[str]] = defaultdict(list)
    for op in app.operators.values():
        if op.kind is Kind.SINK and op.sink is not None and op.sink.kind == "mqtt":
            out[op.sink.target].append(op.name)
    return dict(out)


@dataclass
class Collector:
    """Everything the simulator observes on the brokers."""

    app: str
    sink_topics: dict[str, list[str]]
    results: list[Result] = field(default_factory=list)
    heartbeats: dict[str, dict[str, Any]] = field(default_factory=dict)
    heartbeat_times: dict[str, float] = field(default_factory=dict)
    heartbeat_count: int = 0
    max_backlog: dict[str, int] = field(default_factory=dict)
    backlog_history: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Per site, ``(arrival time, outbox records)`` of every heartbeat."""
    dlq: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    dlq_samples: list[Any] = field(default_factory=list)
    subscriptions: dict[str, int] = field(default_factory=dict)
    subscribed: set[str] = field(default_factory=set)
    reconnects: int = 0
    malformed_results: int = 0
    operators: OperatorTotals = field(default_factory=OperatorTotals)
    """Records in and out per operator from every heartbeat, across agent restarts."""

    def filters(self, hub: bool) -> list[str]:
        """Topic filters to watch on a hub broker or a spoke broker."""
        out = [*self.sink_topics, SUBSCRIPTIONS]
        if hub:
            out += [topics.control("+", "heartbeat"), topics.dlq(self.app, "+")]
        return out

    def on_message(self, site: str, topic: str, payload: bytes) -> None:
        """Record one message received from the broker of ``site``."""
        now = time.time()
        if topic == SUBSCRIPTIONS:
            with contextlib.suppress(ValueError):
                self.subscriptions[site] = int(payload)
            return
        sinks = self.sink_topics.get(topic)
        if sinks is not None:
            try:
                value = orjson.loads(payload)
            except orjson.JSONDecodeError:
                self.malformed_results += 1
                return
            for item in value if isinstance(value, list) else [value]:
                self.results.append(Result(sinks[0], site, item, now))
            return
        parts = topic.split("/")
        if len(parts) == 5 and parts[2] == "control" and parts[4] == "heartbeat":
            try:
                beat = orjson.loads(payload)
            except orjson.JSONDecodeError:
                return
            if isinstance(beat, dict):
                site_name = parts[3]
                backlog = int(_reported(beat, "outbox", "records"))
                self.max_backlog[site_name] = max(self.max_backlog.get(site_name, 0), backlog)
                self.backlog_history.setdefault(site_name, []).append((now, backlog))
                self.heartbeats[site_name] = beat
                self.operators.add(site_name, beat)
                self.heartbeat_times[parts[3]] = now
                self.heartbeat_count += 1
            return
        if len(parts) == 5 and parts[3] == "dlq":
            self.dlq[parts[4]] += _dlq_records(payload)
            if len(self.dlq_samples) < 20:
                self.dlq_samples.append(payload[:500].decode(errors="replace"))

    def backlog(self, site: str) -> int | None:
        """The outbox backlog (records) of ``site`` from its latest heartbeat."""
        beat = self.heartbeats.get(site)
        if beat is None:
            return None
        return int(_reported(beat, "outbox", "records"))

    def counter(self, site: str, *path: str) -> float:
        """A number from the latest heartbeat of ``site`` (0 if absent)."""
        beat = self.heartbeats.get(site)
        return 0.0 if beat is None else _reported(beat, *path)

    async def watch(
        self, site: str, host: str, port: int, hub: bool, stop: asyncio.Event, login: Login | None = None
    ) -> None:
        """Subscribe on one broker until ``stop`` is set, reconnecting with a persistent session.

        ``login`` gives the credentials and CA of a secured broker.
        """
        import aiomqtt

        options = {} if login is None else login.aiomqtt_options()

        filters = self.filters(hub)
        if not filters:
            return
        while not stop.is_set():
            try:
                async with aiomqtt.Client(
                    host,
                    port,
                    identifier=f"sim-watch-{site}",
                    clean_session=False,
                    keepalive=10,
                    timeout=10,
                    **options,
                ) as client:
                    for flt in filters:
                        await client.subscribe(flt, qos=1)
                    self.subscribed.add(site)
                    reader = asyncio.ensure_future(self._read(site, client))
                    waiter = asyncio.ensure_future(stop.wait())
                    try:
                        await asyncio.wait({reader, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        for task in (reader, waiter):
                            task.cancel()
                            with contextlib.suppress(BaseException):
                                await task
                    if not stop.is_set():
                        msg = "connection lost"
                        raise aiomqtt.MqttError(msg)
            except aiomqtt.MqttError as exc:
                if stop.is_set():
                    return
                self.reconnects += 1
                log.info("watching %s: %s; reconnecting", site, exc)
                await asyncio.sleep(0.5)

    async def _read(self, site: str, client: Any) -> None:
        async for message in client.messages:
            payload = message.payload
            if isinstance(payload, str):
                payload = payload.encode()
            self.on_message(site, str(message.topic), bytes(payload or b""))


def _reported(data: Any, *path: str) -> float:
    for part in path:
        if not isinstance(data, dict):
            return 0.0
        data = data.get(part)
    if isinstance(data, dict):  # per-operator counters: their sum
        return sum(_reported(v) for v in data.values())
    return number(data) or 0.0


def _dlq_records(payload: bytes) -> int:
    """Records in one dead-letter message: a batch with ``records``, a list, or one record."""
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return 1
    if isinstance(data, dict) and isinstance(data.get("records"), list):
        return max(1, len(data["records"]))
    if isinstance(data, list):
        return max(1, len(data))
    return 1
