"""MQTT ingest: edge batches into the durable per-app log, effectively once.

A paho-mqtt client subscribes (QoS 1, persistent session, manual
acknowledgement) to every data topic. Messages go to a writer thread that
drops records already seen (per app, site and stream, by ``seq`` against a
persisted high-water mark), appends the rest to the app's log, fsyncs, and
only then acknowledges the messages to the broker. A crash before the ack
makes the broker redeliver; the high-water mark turns the redelivery into
counted duplicates. Several messages share one fsync (group commit). The
writer seals each app's active segment at most every
:data:`hub.ingest.log.SEAL_INTERVAL_S` while records arrive, just before each of
the engine's micro-batches (``batch_every``), and at once after a record that
can close one of the app's hub windows (:meth:`Ingest.close_at`), which makes
them readable by the engine (:mod:`hub.ingest.log`).

A batch comes on the data topic of the site that published it. Its envelope
names the site whose records it carries: the same site, or the source site of
a replica placement runs elsewhere. The injected ``may_publish`` policy
(:mod:`hub.ingest.publishers`) decides whether the publishing site may carry that
site's stream; a refused batch is dead-lettered and counted as
``site_mismatch``. Dedupe is by the envelope's site, stream and epoch.
A batch's ``complete`` (the publisher's frontier) goes to ``on_complete``
once the batch's records are in the log (:mod:`hub.handover.frontiers`).
Records a source site recomputed for a spoke gone for good, and those the
spoke sent for other sites, pass :class:`hub.handover.recovered.Recovered`, which
keeps one of each twin. A message over ``max_message_bytes`` (the hub site's in
``sites.yaml``, 1 MiB by default; the agents send no larger batch) is
dead-lettered with its size and topic, unread, and counted as ``oversize``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import paho.mqtt.client as mqtt

from hub.handover.recovered import Recovered
from hub.ingest.log import SEAL_INTERVAL_S, AppLog, Hold, encode_records
from hub.ingest.publishers import PublishPolicy, SiteMismatch, check_batch, own_sites_only
from hub.ingest.seal_points import Closings
from hub.ingest.stats import Event, IngestCounters
from spanedge import topics
from spanedge.errors import InvalidName
from spanedge.logsafe import escaped
from spanedge.mqtt import HUB_INGEST, connect, make_client
from spanedge.names import check_app_name, check_site_name
from spanedge.runtime.outputs import excerpt
from spanedge.sites import MAX_MESSAGE_BYTES, Broker
from spanedge.wire.batch import Record

log = logging.getLogger(__name__)

SUBSCRIPTION = f"{topics.PREFIX}/+/+/+"
_MAX_GROUP = 1000


class Ingest:
    """Subscribe to the hub broker and append every new record to its app's log.

    ``log_dir`` holds one sub-directory per app (see :mod:`hub.ingest.log`).
    ``may_publish(app, topic_site, envelope_site, stream)`` says whether the
    site of a data topic may publish a batch of another site's stream (the
    default: never; :func:`hub.ingest.publishers.from_plans` allows what plans assign).
    ``on_complete(app, site, complete)`` hears each batch's frontier, after
    its records are durable in the log. ``seal_interval`` and ``batch_every``
    (the engine's trigger intervals, where known) are each log's (:class:`hub.ingest.log.AppLog`).
    ``recovered`` drops the twins of recomputed records (:mod:`hub.handover.recovered`).
    A message larger than ``max_message_bytes`` is dead-lettered unread.
    """

    def __init__(
        self,
        broker: Broker,
        log_dir: Path,
        client_id: str = "spanedge-hub-ingest",
        *,
        may_publish: PublishPolicy = own_sites_only,
        on_complete: Callable[[str, str, float], None] | None = None,
        seal_interval: float = SEAL_INTERVAL_S,
        batch_every: Sequence[float] = (),
        recovered: Recovered | None = None,
        revoked: Callable[[str], bool] | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        """Prepare the client; nothing connects until :meth:`start`; messages of a site ``revoked`` names are refused."""
        self.revoked = revoked if revoked is not None else (lambda site: False)
        self.max_message_bytes = max_message_bytes
        self.recovered = recovered if recovered is not None else Recovered()
        self.seal_interval = seal_interval
        self.batch_every = tuple(batch_every)
        self.broker = broker
        self.may_publish = may_publish
        self.on_complete = on_complete
        self.log_dir = Path(log_dir)
        self.client_id = client_id
        self._queue: queue.Queue[mqtt.MQTTMessage | None] = queue.Queue()
        self._logs: dict[str, AppLog] = {}
        self._holds: dict[str, Hold | None] = {}
        self._closings: dict[str, Closings | None] = {}
        self._counters = IngestCounters()
        self._thread: threading.Thread | None = None
        self._client: mqtt.Client | None = None
        self._connected = threading.Event()
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Connect (retrying with backoff in the background) and start the writer thread."""
        if self._thread is not None:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        client = make_client(self.broker, self.client_id, HUB_INGEST)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        self._client = client
        self._thread = threading.Thread(target=self._write_loop, name="spanedge-ingest-writer", daemon=True)
        self._thread.start()
        connect(client, self.broker, HUB_INGEST)

    def wait_connected(self, timeout: float = 10.0) -> bool:
        """Block until subscribed to the broker (or ``timeout``); return whether it is."""
        return self._connected.wait(timeout)

    def stop(self) -> None:
        """Write and acknowledge what was received, disconnect, and close the logs.

        The writer drains first, so the acknowledgements reach the broker
        before the disconnect and nothing already logged is redelivered.
        """
        self._stopping = True
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
        for app_log in self._logs.values():
            app_log.seal()
            app_log.close()
        self._logs.clear()

    # -- MQTT callbacks (network thread) -------------------------------------

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if reason.is_failure:
            log.warning("ingest: connection to %s refused: %s", self.broker.url, reason)
            return
        self._counters.add("connects")
        log.info("ingest: connected to %s (session present: %s)", self.broker.url, flags.session_present)
        client.subscribe(SUBSCRIPTION, qos=1)

    def _on_subscribe(self, client: mqtt.Client, userdata: Any, mid: int, reasons: Any, props: Any) -> None:
        if any(getattr(r, "is_failure", False) for r in reasons):
            log.warning("ingest: the broker %s refused the subscription %s: %s", self.broker.url, SUBSCRIPTION, reasons)
            return
        self._connected.set()

    def _on_disconnect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self._connected.clear()
        if not self._stopping:
            log.warning("ingest: disconnected from %s (%s); reconnecting with backoff", self.broker.url, reason)

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        self._queue.put(message)

    # -- writer thread -------------------------------------------------------

    def _app_log(self, app: str) -> AppLog:
        app_log = self._logs.get(app)
        if app_log is None:
            app_log = AppLog(
                self.log_dir / app,
                seal_interval=self.seal_interval,
                batch_every=self.batch_every,
                hold=self._holds.get(app),
                closings=self._closings.get(app),
            )
            self._logs[app] = app_log
        return app_log

    # -- holds (any thread) ----------------------------------------------------

    def hold(self, app: str, hold: Hold | None) -> None:
        """Hold ``app``'s sealed segments back from some readers, or lift the hold (see :class:`hub.ingest.log.Hold`)."""
        self._holds[app] = hold
        app_log = self._logs.get(app)
        if app_log is not None:
            try:
                app_log.set_hold(hold)
            except OSError:
                log.exception("ingest: handing %s's held segments to its readers failed; trying again", app)

    def close_at(self, app: str, closings: Closings | None) -> None:
        """Seal ``app``'s log at once after a record that can close one of its hub windows (:mod:`hub.ingest.seal_points`)."""
        if self._closings.get(app) == closings:
            return
        self._closings[app] = closings
        app_log = self._logs.get(app)
        if app_log is not None:
            app_log.set_closings(closings)

    def mark(self, app: str, site: str, stream: str, epoch: int) -> int | None:
        """The last ``seq`` of ``site``'s ``stream`` in ``epoch`` that ``app``'s log holds (None: none yet)."""
        app_log = self._logs.get(app)
        return None if app_log is None else app_log.hwm.marks.get((site, stream, epoch))

    def _next_seal(self) -> float | None:
        """Seconds until the next app log is due to be sealed (None: nothing to seal)."""
        due = [d for d in (app_log.seal_due_at() for app_log in self._logs.values()) if d is not None]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _seal_due(self) -> None:
        now = time.monotonic()
        for app_log in self._logs.values():
            try:
                app_log.seal_if_due(now)
            except OSError:
                log.exception("ingest: sealing the log of %s failed; trying again", app_log.dir.name)

    def _write_loop(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=self._next_seal())
            except queue.Empty:
                self._seal_due()
                continue
            if first is None:
                return
            group = [first]
            stop = False
            while len(group) < _MAX_GROUP:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                group.append(nxt)
            try:
                self._write_group(group)
            except Exception:
                log.exception("ingest: writing %d messages failed; they stay unacknowledged", len(group))
                continue
            self._seal_due()
            if stop:
                return

    def _write_group(self, group: list[mqtt.MQTTMessage]) -> None:
        touched: set[str] = set()
        completes: dict[tuple[str, str], float] = {}
        now = time.time()
        for message in group:
            parsed = topics.parse_data(message.topic)
            if parsed is None:
                continue
            self._accept(message, parsed, now, touched, completes)
        for app in touched:
            self._logs[app].flush()
        self._announce(completes)
        self._counters.add("commits")
        client = self._client
        if client is None:
            return
        for message in group:
            if message.qos > 0:
                client.ack(message.mid, message.qos)

    def _announce(self, completes: dict[tuple[str, str], float]) -> None:
        """Pass the frontiers of the batches just written to ``on_complete``."""
        if self.on_complete is None:
            return
        for (app, site), complete in completes.items():
            try:
                self.on_complete(app, site, complete)
            except Exception:
                log.exception("ingest: taking the frontier of %s for app %s failed", site, app)

    def _accept(
        self,
        message: mqtt.MQTTMessage,
        parsed: tuple[str, str, str],
        now: float,
        touched: set[str],
        completes: dict[tuple[str, str], float],
    ) -> None:
        topic_app, _, topic_site = parsed
        try:
            check_app_name(topic_app, f"topic {message.topic}")
            check_site_name(topic_site, f"topic {message.topic}")
        except InvalidName as exc:  # never a file name or a DLQ topic: count and log only
            log.warning("ingest: dropping a message on %s: %s", escaped(message.topic), escaped(exc))
            self._counters.add("malformed")
            return
        if self.revoked(topic_site):
            log.warning(
                "ingest: refusing a message on %s: site '%s' was revoked", escaped(message.topic), escaped(topic_site)
            )
            self._counters.add("site_mismatch")
            return
        if (size := len(message.payload)) > (limit := self.max_message_bytes):
            reason = f"message of {size} bytes is over the hub's limit of {limit} bytes (max_message_bytes of the hub)"
            self._dead_letter(topic_app, topic_site, message, reason, unread=True)
            return
        try:
            app, records, complete = check_batch(message.topic, parsed, bytes(message.payload), self.may_publish)
        except ValueError as exc:
            if isinstance(exc, SiteMismatch):
                self._counters.add("site_mismatch")
            self._dead_letter(topic_app, topic_site, message, str(exc))
            return
        app_log = self._app_log(app)
        fresh: list[Record] = self.recovered.keep(app, topic_site, [r for r in records if app_log.hwm.accept(r)])
        times = [r.event_time for r in fresh]
        app_log.append(encode_records(fresh), max(times, default=None), min(times, default=None))
        if fresh:
            touched.add(app)
        if complete is not None:
            completes[(app, topic_site)] = max(complete, completes.get((app, topic_site), complete))
        self._counters.count(app, records, fresh, now)

    def _dead_letter(
        self, app: str, site: str, message: mqtt.MQTTMessage, reason: str, *, unread: bool = False
    ) -> None:
        kind: Event = "oversize" if unread else "malformed"
        log.warning("ingest: dropping %s message on %s: %s", kind, escaped(message.topic), escaped(reason))
        self._counters.add(kind)
        if self._client is not None:
            self._client.publish(topics.dlq(app, site), dead_letter(message, reason, unread=unread), qos=1)

    # -- introspection -------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while subscribed to the broker."""
        return self._connected.is_set()

    def stats(self) -> dict[str, Any]:
        """Counters overall and per app, site and stream.

        Returns:
            ``{"connected", "messages", "records", "duplicates", "malformed", "oversize",
            "site_mismatch", "commits", "connects", "queued", "apps": {app: {site: {stream:
            {"records", "duplicates", "last_seq", "last_event_time",
            "lag_s"}}}}}``, per the envelope's site; ``lag_s`` is arrival time minus event time of the
            last accepted record; ``site_mismatch`` counts refused batches whose records name another
            site than their topic's, which no plan lets that site publish; ``oversize`` counts messages
            over ``max_message_bytes``.
        """
        return self._counters.to_dict(connected=self.connected, queued=self._queue.qsize())


def dead_letter(message: mqtt.MQTTMessage, reason: str, *, unread: bool = False) -> bytes:
    """The DLQ body for ``message``: its topic, the reason and a bounded excerpt with size and hash (only its size if ``unread``)."""
    if unread:
        cut = {"excerpt": "", "size": len(message.payload), "sha256": "", "truncated": True}
    else:
        cut = excerpt(bytes(message.payload))  # a bounded excerpt of a large payload, with its size and hash
    return orjson.dumps(
        {
            "topic": message.topic,
            "reason": reason,
            "payload": cut["excerpt"],
            "size": cut["size"],
            "sha256": cut["sha256"],
            "truncated": cut["truncated"],
        }
    )
