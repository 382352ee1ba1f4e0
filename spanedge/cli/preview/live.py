"""Reading a site's live sensor records for ``spanedge preview --site``: subscribe, never publish, within bounds.

The records come from the MQTT topics ``sites.yaml`` binds to the site's
streams, read with clean-session clients that only subscribe (no will
message, a random ``spanedge-preview-...`` client id), for a bounded time and
up to a bounded number of records and bytes. Each record becomes one line of
the ``--input`` format, wrapped with its stream and the site, so that
``--save`` can write exactly what the preview ran over.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from spanedge.cli.preview.records import Limits, Line
from spanedge.errors import InvalidRecords, InvalidSites, SpanEdgeError

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

    from spanedge.sites import Broker, Sites

#: The longest ``--for``: a live preview holds every record it reads in memory.
MAX_SECONDS = 600.0
#: How long the broker has to accept the connections and subscriptions before the preview gives up.
CONNECT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Tap:
    """One stream of the site, read from the MQTT topic filter ``sites.yaml`` binds to it."""

    stream: str
    topic: str
    qos: int
    max_bytes: int


@dataclass
class Captured:
    """What a live read got: the records as lines of the ``--input`` format, and what it left out and why."""

    lines: list[Line] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    """Each record's line of JSON, as ``--save`` writes it (without the newline)."""
    size: int = 0
    seconds: float = 0.0
    stopped: str | None = None
    """Why the read ended before its time, if it did (a bound reached, or interrupted)."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Messages not taken, by reason (not a JSON object, over the stream's message limit)."""
    lost_connections: int = 0


def check_duration(seconds: float, given: str) -> None:
    """Refuse a ``--for`` over :data:`MAX_SECONDS`.

    Raises:
        InvalidRecords: ``seconds`` is over the bound; the message says the most allowed.
    """
    if seconds > MAX_SECONDS:
        msg = f"--for {given} is over the limit of {MAX_SECONDS / 60:g} minutes; pass --for 10m or less"
        raise InvalidRecords(msg)


def taps(sites: Sites, where: str, site: str, streams: Collection[str], app: str) -> tuple[list[Tap], list[str]]:
    """The MQTT streams of ``site`` that ``app`` reads (of ``streams``), and a note for each it cannot read live.

    Raises:
        InvalidSites: ``site`` is not in ``sites.yaml`` (``where``), or binds none of the app's streams over MQTT.
    """
    if site not in sites.sites:
        msg = f"--site {site!r} is not a site of {where} (its sites: {', '.join(sites.sites)}); pass one of them"
        raise InvalidSites(msg)
    bound = sites.sites[site].streams
    found: list[Tap] = []
    notes: list[str] = []
    for stream in sorted(streams):
        binding = bound.get(stream)
        if binding is None:
            continue
        if binding.connector is not None:
            notes.append(
                f"stream {stream} of site {site} is read by its {binding.connector}:// connector, not over MQTT: "
                "a live preview reads MQTT streams only, so it gets no records of it (capture them to a file "
                "and pass --input)"
            )
            continue
        found.append(Tap(stream, binding.topic, binding.qos, binding.max_message_bytes))
    if not found:
        connected = [s for s in sorted(streams) if s in bound]
        why = (
            f" (its {', '.join(connected)} come from connectors, which a live preview does not read)"
            if connected
            else ""
        )
        msg = (
            f"site {site} in {where} binds none of the streams of app {app} ({', '.join(sorted(streams))}) "
            f"to an MQTT topic{why}; pass a --site that sources them over MQTT, or record them to a file "
            "and pass --input"
        )
        raise InvalidSites(msg)
    return found, notes


class _Reader:
    """The clients reading one site's taps into a :class:`Captured`, until stopped or a bound is reached."""

    def __init__(self, site: str, taps: list[Tap], limits: Limits) -> None:
        self.site = site
        self.limits = limits
        self.by_topic: dict[str, list[Tap]] = {}
        for tap in taps:
            self.by_topic.setdefault(tap.topic, []).append(tap)
        self.captured = Captured()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.subscribed: set[str] = set()
        self.ready = threading.Event()
        self.failure: str | None = None
        self.reading = False

    def client(self, broker: Broker, topic: str) -> mqtt.Client:
        """A subscribe-only client for one topic filter (one per filter: overlapping ones each get one copy)."""
        from spanedge.mqtt import PREVIEW_CAPTURE, make_client

        client = make_client(broker, f"spanedge-preview-{secrets.token_hex(6)}", PREVIEW_CAPTURE)
        qos = max(tap.qos for tap in self.by_topic[topic])
        client.on_connect = lambda c, _u, _f, code, _p: self._connected(c, broker, topic, qos, code)
        client.on_subscribe = lambda _c, _u, _m, codes, _p: self._subscribed(broker, topic, codes)
        client.on_disconnect = lambda *_: self._disconnected()
        client.on_message = lambda _c, _u, message: self._message(topic, message)
        return client

    def _connected(self, client: mqtt.Client, broker: Broker, topic: str, qos: int, code: Any) -> None:
        if code.is_failure:
            self._fail(
                f"broker {broker.url} of site {self.site} refused the connection: {code}; "
                "check username:, password_env: and tls: of the site in sites.yaml"
            )
            return
        client.subscribe(topic, qos)

    def _subscribed(self, broker: Broker, topic: str, codes: list[Any]) -> None:
        if any(code.is_failure for code in codes):
            self._fail(
                f"broker {broker.url} of site {self.site} refused the subscription to {topic!r}; "
                "let the site's user read its sensor topics in the broker's ACL"
            )
            return
        with self.lock:
            self.subscribed.add(topic)
            if self.subscribed == set(self.by_topic):
                self.ready.set()

    def _disconnected(self) -> None:
        with self.lock:
            if self.reading and not self.done.is_set():
                self.captured.lost_connections += 1

    def _fail(self, reason: str) -> None:
        with self.lock:
            self.failure = self.failure or reason
        self.ready.set()
        self.done.set()

    def _message(self, topic: str, message: mqtt.MQTTMessage) -> None:
        payload = bytes(message.payload)
        with self.lock:
            if self.done.is_set() or not self.reading:
                return
            for tap in self.by_topic[topic]:
                self._take(tap, payload)

    def _take(self, tap: Tap, payload: bytes) -> None:
        """Add one message of ``tap`` as a line, or count why not; stop at a bound (the lock held)."""
        got = self.captured
        if len(payload) > tap.max_bytes:
            _count(got.skipped, f"over the stream's max_message_bytes ({tap.max_bytes})")
            return
        try:
            value = orjson.loads(payload)
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            _count(got.skipped, "not a JSON object")
            return
        line = orjson.dumps({"stream": tap.stream, "site": self.site, "value": value})
        if got.size + len(line) + 1 > self.limits.max_bytes:
            got.stopped = f"the records reached --max-mb ({self.limits.max_bytes / 1e6:g} MB)"
            self.done.set()
            return
        got.raw.append(line)
        got.size += len(line) + 1
        got.lines.append(Line(len(got.lines) + 1, tap.stream, self.site, value))
        if len(got.lines) >= self.limits.max_lines:
            got.stopped = f"{len(got.lines)} records were read (--max-lines)"
            self.done.set()


def _count(counts: dict[str, int], reason: str) -> None:
    counts[reason] = counts.get(reason, 0) + 1


def capture(
    broker: Broker, site: str, found: list[Tap], seconds: float, limits: Limits, ready: Callable[[], object]
) -> Captured:
    """Read ``found`` at ``broker`` for ``seconds`` from when every subscription is in (then ``ready`` is called).

    The read ends early at a bound of ``limits`` or on Ctrl-C.

    Raises:
        SpanEdgeError: the broker cannot be reached, refuses the connection or a subscription, or does not answer.
    """
    from spanedge.mqtt import PREVIEW_CAPTURE, connect

    reader = _Reader(site, found, limits)
    try:
        clients = [reader.client(broker, topic) for topic in reader.by_topic]
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        msg = (
            f"cannot use the TLS files of site {site} for broker {broker.url}: {getattr(exc, 'strerror', None) or exc}; "
            "check ca_file, cert_file and key_file under the site's tls: in sites.yaml"
        )
        raise SpanEdgeError(msg) from None
    try:
        for client in clients:
            try:
                connect(client, broker, PREVIEW_CAPTURE, wait=True)
            except (OSError, ValueError) as exc:
                msg = (
                    f"cannot reach broker {broker.url} of site {site}: {getattr(exc, 'strerror', None) or exc}; "
                    "check broker: of the site in sites.yaml, and that this machine reaches it"
                )
                raise SpanEdgeError(msg) from None
        if not reader.ready.wait(CONNECT_TIMEOUT_S):
            msg = (
                f"broker {broker.url} of site {site} did not accept the subscriptions within {CONNECT_TIMEOUT_S:g}s; "
                "check that it runs and that broker: in sites.yaml names it"
            )
            raise SpanEdgeError(msg)
        if reader.failure is not None:
            raise SpanEdgeError(reader.failure)
        ready()
        return _read(reader, seconds)
    finally:
        for client in clients:
            client.disconnect()
            client.loop_stop()


def _read(reader: _Reader, seconds: float) -> Captured:
    """Take messages for ``seconds``, or until a bound is reached or Ctrl-C."""
    started = time.monotonic()
    with reader.lock:
        reader.reading = True
    try:
        reader.done.wait(seconds)
    except KeyboardInterrupt:
        with reader.lock:
            reader.captured.stopped = "interrupted (Ctrl-C)"
    with reader.lock:
        reader.done.set()
        if reader.failure is not None:
            raise SpanEdgeError(reader.failure)
        reader.captured.seconds = time.monotonic() - started
        return reader.captured


def save(path: Path, captured: Captured) -> None:
    """Write the captured records to ``path`` as JSON Lines, in the ``--input`` format.

    Raises:
        InvalidRecords: the file cannot be written; the message says where to write instead.
    """
    try:
        with path.open("wb") as fh:
            for line in captured.raw:
                fh.write(line + b"\n")
    except OSError as exc:
        msg = f"cannot write --save {path}: {exc.strerror or exc}; pass a path in a writable directory"
        raise InvalidRecords(msg) from None


def summary(captured: Captured, site: str, seconds: float) -> list[str]:
    """What to tell the user about the read: why it stopped early, what it skipped, connections lost."""
    notes = []
    if captured.stopped is not None:
        notes.append(f"stopped reading site {site} after {captured.seconds:.1f}s of {seconds:g}s: {captured.stopped}")
    for reason, n in captured.skipped.items():
        notes.append(
            f"skipped {n} message{'s' if n != 1 else ''} of site {site}: {reason} (an agent dead-letters them)"
        )
    if captured.lost_connections:
        notes.append(
            f"lost the connection to the broker of site {site} {captured.lost_connections} time(s); "
            "records sent meanwhile were not read"
        )
    return notes
