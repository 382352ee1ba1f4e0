"""Runs a connector source into the agent's inbox: reconnects with backoff, back-pressure, acks after the commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from typing import Any

import orjson

from edge_agent.connectors.api import Reading, Source
from edge_agent.mqtt.transport import Inbox, Message

log = logging.getLogger(__name__)

RETRY_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Waits after consecutive failed sessions; the last one repeats (each with up to 20 % jitter)."""


def record(reading: Reading) -> dict[str, Any]:
    """The record a reading feeds the pipeline: ``{"name": ..., "value": ..., "ts": <event time>}``."""
    return {"name": reading.name, "value": reading.value, "ts": reading.event_time}


class SourceRunner:
    """One connector source of one stream at one site, feeding the inbox like a broker connection.

    Each reading becomes a QoS 1 :class:`~edge_agent.mqtt.transport.Message` whose ``arrival`` is
    the reading's event time, so an app without ``time_field`` also gets the device's timestamp.
    :meth:`ack` is called after the commit and passes the tokens on to the source. When the inbox
    is over half full the runner stops reading until it has room again (the source's own buffer,
    or the device, holds the rest).

    Args:
        source: the connector.
        site: the site whose ``sites.yaml`` binding this is.
        stream: the stream it feeds.
        inbox: the agent's inbox.
        delays: waits between failed sessions.
    """

    def __init__(
        self,
        source: Source,
        site: str,
        stream: str,
        inbox: Inbox,
        delays: tuple[float, ...] = RETRY_DELAYS_S,
    ) -> None:
        self.source = source
        self.site = site
        self.stream = stream
        self.inbox = inbox
        self.delays = delays
        self.name = f"{stream} from {source.name}"
        self.subscribed = threading.Event()
        """Set once a session delivered its first batch."""
        self.connected = False
        self.failures = 0
        self.sessions = 0
        self.error: str | None = None
        self.last_error = ""
        """The last failure, kept after the source recovered."""
        self.read = 0
        self._mid = random.getrandbits(40)  # a restarted runner's ids never match a committed one's
        self._tokens: dict[int, Any] = {}
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start reading (on the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"connector {self.name}")

    def stop(self) -> None:
        """Stop reading; readings not yet committed are not acknowledged."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.connected = False

    def ack(self, mid: int, qos: int) -> None:
        """The reading sent as ``mid`` is committed: pass its token to the source."""
        token = self._tokens.pop(mid, None)
        if token is not None:
            self.source.acknowledge([token])

    async def _run(self) -> None:
        while True:
            try:
                self.sessions += 1
                session = self.source.session()
                try:
                    async for batch in session:
                        if not self.connected:
                            log.info("%s: reading (session %d)", self.name, self.sessions)
                        self.connected, self.failures, self.error = True, 0, None
                        await self._put(batch)
                        self.subscribed.set()
                finally:  # end the session now (its connection, its port), also when the runner is stopped
                    close = getattr(session, "aclose", None)
                    if close is not None:
                        await close()
                msg = "the session ended"
                raise ConnectionError(msg)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure of a connector's session: reconnect
                self.connected = False
                self.failures += 1
                self.error = self.last_error = f"{type(exc).__name__}: {exc}"
                delay = self.delays[min(self.failures, len(self.delays)) - 1] * (1 + 0.2 * random.random())
                if self.failures in (1, 2, 5) or self.failures % 20 == 0:
                    log.warning(
                        "%s: %s (attempt %d); reconnecting in %.1f s", self.name, self.error, self.failures, delay
                    )
                await asyncio.sleep(delay)

    async def _put(self, batch: list[Reading]) -> None:
        await self._room.wait()
        messages = []
        for reading in batch:
            self._mid += 1
            if reading.token is not None:
                self._tokens[self._mid] = reading.token
            payload = reading.payload if reading.payload is not None else orjson.dumps(record(reading), default=str)
            messages.append(
                Message(reading.where, payload, 1, self._mid, self, reading.event_time, problem=reading.problem)
            )
        self.read += len(messages)
        if not self.inbox.put_local(messages):
            self._room.clear()
            self.inbox.on_room(self._room.set)

    async def wait_stopped(self) -> None:
        """Wait for the reading task to end after :meth:`stop`."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
