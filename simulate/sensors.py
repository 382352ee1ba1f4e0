"""Sensor generators: seeded devices that publish to their site broker and record what they sent.

Every device draws its rate, phase, values and malformed messages from its
own generator seeded by ``(seed, site, stream, index)``, so two runs with the
same seed send the same data at the same offsets from their start. Event
times are the scheduled send time (relative to the run start), minus a random
disorder, plus the stream's clock skew.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from simulate.broker import Login
from simulate.config import FieldSpec, SensorSpec
from simulate.drift import Drift, shifted

log = logging.getLogger(__name__)

MALFORMED_KINDS = ("not-json", "no-event-time")


@dataclass(frozen=True, slots=True)
class Message:
    """One generated message, before it is sent."""

    site: str
    stream: str
    device: int
    seq: int
    key: str
    topic: str
    offset: float
    event_time: float | None
    value: dict[str, Any] | None
    payload: bytes
    malformed: str | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    """A message the site broker accepted, with the wall-clock time it was sent."""

    message: Message
    sent_at: float


def device_topic(topic_filter: str, key: str) -> str:
    """The topic a device publishes on: the stream's filter with ``+``/``#`` replaced by its key."""
    parts = [key if p in ("+", "#") else p for p in topic_filter.split("/")]
    return "/".join(parts)


class Device:
    """One simulated device: a seeded schedule of messages."""

    def __init__(
        self, site: str, stream: str, index: int, spec: SensorSpec, topic_filter: str, seed: int, start: float
    ) -> None:
        """Draw the device's rate, phase and initial state from its own generator."""
        self.site, self.stream, self.index, self.spec = site, stream, index, spec
        self.rng = random.Random(f"{seed}:{site}:{stream}:{index}")
        low, high = spec.rate if isinstance(spec.rate, tuple) else (spec.rate, spec.rate)
        self.rate = self.rng.uniform(low, high)
        self.phase = self.rng.uniform(0.0, 1.0 / self.rate)
        self.key = spec.device_key(site, stream, index)
        self.topic = device_topic(topic_filter, self.key)
        self.start = start
        self.seq = 0
        self.walks: dict[str, float] = {}
        for name, fs in spec.value.items():
            if isinstance(fs, FieldSpec) and fs.walk is not None:
                s = fs.walk.start
                self.walks[name] = self.rng.uniform(*s) if isinstance(s, tuple) else float(s)
        self.time_field = spec.time_field()
        self.drifts: list[Drift] = []  # the drift faults of its site (simulate.drift), in time order

    def offset(self, seq: int) -> float:
        """Seconds after the start at which message ``seq`` is due."""
        return self.phase + seq / self.rate

    def skip_to(self, begin: float) -> None:
        """Skip the messages due before ``begin`` seconds after the start: they are never made."""
        self.seq = max(self.seq, math.ceil((begin - self.phase) * self.rate))

    def _field(self, name: str, fs: FieldSpec | str | bool | int | float, event_time: float) -> Any:
        if not isinstance(fs, FieldSpec):
            return (
                {
                    "$key": self.key,
                    "$event_time": event_time,
                    "$seq": self.seq,
                    "$site": self.site,
                }.get(fs, fs)
                if isinstance(fs, str)
                else fs
            )
        value: Any
        if fs.const is not None:
            value = fs.const
        elif fs.uniform is not None:
            value = self.rng.uniform(*fs.uniform)
        elif fs.normal is not None:
            value = self.rng.gauss(*fs.normal)
        elif fs.walk is not None:
            walk = fs.walk
            v = self.walks[name] + self.rng.uniform(-walk.step, walk.step)
            v = max(walk.min, v) if walk.min is not None else v
            v = min(walk.max, v) if walk.max is not None else v
            self.walks[name] = v
            value = v
        elif fs.bernoulli is not None:
            value = self.rng.random() < fs.bernoulli
        elif fs.format is not None:
            value = fs.format.format(key=self.key, site=self.site, stream=self.stream, device=self.index, seq=self.seq)
        else:
            value = self.rng.choice(fs.choice or [None])
        if fs.round is not None and isinstance(value, float):
            value = round(value, fs.round)
        return value

    def next(self) -> Message:
        """Generate the next message (values and malformedness are drawn in a fixed order)."""
        seq = self.seq
        offset = self.offset(seq)
        disorder = self.rng.uniform(0.0, self.spec.disorder) if self.spec.disorder > 0 else 0.0
        event_time = round(self.start + offset - disorder + self.spec.clock_skew, 6)
        value = {name: self._field(name, fs, event_time) for name, fs in self.spec.value.items()}
        if self.drifts:
            shifted(value, self.drifts, offset)
        malformed: str | None = None
        if self.spec.malformed > 0 and self.rng.random() < self.spec.malformed:
            kinds = MALFORMED_KINDS if self.time_field else MALFORMED_KINDS[:1]
            malformed = self.rng.choice(kinds)
        self.seq += 1
        if malformed == "not-json":
            return self._message(seq, offset, None, None, b'{"' + self.key.encode() + b'": broken', malformed)
        if malformed == "no-event-time" and self.time_field:
            value.pop(self.time_field, None)
            return self._message(seq, offset, None, None, orjson.dumps(value), malformed)
        return self._message(seq, offset, event_time, value, orjson.dumps(value), None)

    def _message(
        self,
        seq: int,
        offset: float,
        event_time: float | None,
        value: dict[str, Any] | None,
        payload: bytes,
        malformed: str | None,
    ) -> Message:
        return Message(
            self.site, self.stream, self.index, seq, self.key, self.topic, offset, event_time, value, payload, malformed
        )


def devices_of(site: str, stream: str, spec: SensorSpec, topic_filter: str, seed: int, start: float) -> list[Device]:
    """The devices of one stream at one site."""
    return [Device(site, stream, i, spec, topic_filter, seed, start) for i in range(spec.count)]


def schedule(devices: list[Device], until: float) -> list[Message]:
    """Every message the devices send in the first ``until`` seconds, in send order (for tests and references)."""
    out: list[Message] = []
    heap = [(d.offset(0), i) for i, d in enumerate(devices)]
    heapq.heapify(heap)
    while heap:
        due, i = heapq.heappop(heap)
        if due >= until:
            continue
        out.append(devices[i].next())
        heapq.heappush(heap, (devices[i].offset(devices[i].seq), i))
    return out


@dataclass
class SiteSensors:
    """All devices of one site, publishing to the site broker in time order."""

    site: str
    host: str
    port: int
    devices: list[Device]
    qos: dict[str, int]
    sent: list[Sent] = field(default_factory=list)
    failures: int = 0
    pending: int = 0
    done: bool = False
    login: Login | None = None
    stopped: bool = False  # set by stop(): the site's devices are gone, nothing more is sent
    held: bool = False  # nothing is sent until release() (a site that joins mid-run)
    begin: float = 0.0  # seconds after the start before which nothing is sent
    _released: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def stop(self) -> None:
        """Stop sending: the messages not yet accepted by the broker are never sent."""
        self.stopped = True
        self._released.set()

    def release(self, begin: float) -> None:
        """Let held sensors send what falls due from ``begin`` seconds after the start (and not before now) on."""
        self.begin = begin
        self._released.set()

    async def run(self, start_monotonic: float, duration: float, on_sent: Callable[[Sent], None] | None = None) -> None:
        """Send every message due before ``duration``, reconnecting (and retrying) while the broker is down."""
        import aiomqtt

        loop = asyncio.get_running_loop()
        options = {} if self.login is None else self.login.aiomqtt_options()
        if self.held:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), max(0.0, start_monotonic + duration - loop.time()))
            if not self._released.is_set():
                self.done = True
                return
            begin = max(self.begin, loop.time() - start_monotonic)  # nothing overdue comes in a burst
            for device in self.devices:
                device.skip_to(begin)
        heap = [(d.offset(d.seq), i) for i, d in enumerate(self.devices)]
        heapq.heapify(heap)
        backlog: list[Message] = []
        while (heap or backlog) and not self.stopped:
            try:
                async with aiomqtt.Client(
                    self.host, self.port, identifier=f"sim-sensors-{self.site}", timeout=10, keepalive=10, **options
                ) as client:
                    while (heap or backlog) and not self.stopped:
                        if not backlog:
                            due, i = heapq.heappop(heap)
                            if due >= duration:
                                continue
                            wait = start_monotonic + due - loop.time()
                            if wait > 0:
                                await asyncio.sleep(wait)
                            if self.stopped:
                                break
                            device = self.devices[i]
                            backlog.append(device.next())
                            heapq.heappush(heap, (device.offset(device.seq), i))
                        self.pending = len(backlog)
                        message = backlog[0]
                        await client.publish(message.topic, message.payload, qos=self.qos[message.stream], timeout=10)
                        backlog.pop(0)
                        record = Sent(message, time.time())
                        self.sent.append(record)
                        if on_sent is not None:
                            on_sent(record)
            except (aiomqtt.MqttError, OSError) as exc:
                self.failures += 1
                log.info("sensors of %s: broker unreachable (%s); retrying", self.site, exc)
                # keep the schedule: messages falling due meanwhile queue up like a device's buffer
                with contextlib.suppress(Exception):
                    while heap and start_monotonic + heap[0][0] <= loop.time():
                        due, i = heapq.heappop(heap)
                        if due < duration:
                            device = self.devices[i]
                            backlog.append(device.next())
                            heapq.heappush(heap, (device.offset(device.seq), i))
                self.pending = len(backlog)
                await asyncio.sleep(0.5)
        self.pending = 0
        self.done = True
