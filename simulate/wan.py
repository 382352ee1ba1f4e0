"""WAN emulation: asyncio TCP proxies that add delay, jitter and a bandwidth cap, and cut links.

A :class:`WanLink` joins two sites and has one :class:`Direction` per way,
shared by every connection over the link: the bandwidth is a serialisation
clock (a byte departs when the link is free, ``n * 8 / bandwidth`` seconds per
chunk), then the chunk propagates for the one-way delay plus jitter. Chunks of
one connection never overtake each other. A :class:`LinkProxy` listens on a
free port for connections from one site to the broker of another; a partition
closes every open connection and refuses new ones until healed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

CHUNK = 16 * 1024
#: Seconds a proxy waits for its target to accept a connection (a target behind a link taken down never answers).
CONNECT_TIMEOUT_S = 10.0


@dataclass
class Direction:
    """One way of a link: its delay, jitter, bandwidth clock and byte count."""

    delay_ms: float
    jitter_ms: float = 0.0
    bandwidth_mbps: float | None = None
    rng: random.Random = field(default_factory=random.Random)
    free_at: float = 0.0
    bytes: int = 0
    chunks: int = 0

    def schedule(self, nbytes: int, now: float) -> tuple[float, float]:
        """Reserve the link for ``nbytes`` read at ``now``; return ``(departure, arrival)`` times.

        The departure is when the last byte has been serialised onto the link
        (later than ``now`` when the link is busy or capped); the arrival adds
        the one-way delay and a jitter drawn uniformly from ``[0, jitter]``.
        """
        start = max(now, self.free_at)
        depart = start + (nbytes * 8 / (self.bandwidth_mbps * 1e6) if self.bandwidth_mbps else 0.0)
        self.free_at = depart
        jitter = self.rng.uniform(0.0, self.jitter_ms) if self.jitter_ms > 0 else 0.0
        return depart, depart + (self.delay_ms + jitter) / 1000.0


class WanLink:
    """The emulated link between sites ``a`` and ``b``: two directions and a cut switch."""

    def __init__(
        self,
        a: str,
        b: str,
        delay_ms: float,
        jitter_ms: float = 0.0,
        bandwidth_mbps: float | None = None,
        seed: int = 0,
    ) -> None:
        """Create the link; each direction draws jitter from its own seeded generator."""
        self.a, self.b = a, b
        self.ways = {
            (a, b): Direction(delay_ms, jitter_ms, bandwidth_mbps, random.Random(f"{seed}:{a}>{b}")),
            (b, a): Direction(delay_ms, jitter_ms, bandwidth_mbps, random.Random(f"{seed}:{b}>{a}")),
        }
        self.cut = False
        self.partitions = 0
        self._connections: set[_Connection] = set()

    @property
    def name(self) -> str:
        """``a<->b``."""
        return f"{self.a}<->{self.b}"

    def way(self, src: str, dst: str) -> Direction:
        """The direction carrying bytes from ``src`` to ``dst``."""
        return self.ways[(src, dst)]

    def set_delay(self, delay_ms: float) -> None:
        """Change the one-way delay of both directions (new chunks only)."""
        for way in self.ways.values():
            way.delay_ms = delay_ms

    def partition(self) -> None:
        """Cut the link: drop every open connection and refuse new ones."""
        self.cut = True
        self.partitions += 1
        for conn in list(self._connections):
            conn.abort()

    def heal(self) -> None:
        """Accept connections again."""
        self.cut = False

    def bytes(self) -> dict[str, int]:
        """Bytes delivered per direction, keyed ``"src>dst"``."""
        return {f"{s}>{d}": way.bytes for (s, d), way in self.ways.items()}

    @property
    def total_bytes(self) -> int:
        """Bytes delivered in both directions."""
        return sum(way.bytes for way in self.ways.values())

    def _track(self, conn: _Connection) -> None:
        self._connections.add(conn)

    def _untrack(self, conn: _Connection) -> None:
        self._connections.discard(conn)


class _Connection:
    """One proxied TCP connection: two pumps, one per direction."""

    def __init__(self, link: WanLink, up: Direction, down: Direction) -> None:
        self.link, self.up, self.down = link, up, down
        self.writers: list[asyncio.StreamWriter] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def run(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.writers = [client[1], server[1]]
        self.link._track(self)
        try:
            self.tasks = [
                asyncio.ensure_future(_pump(client[0], server[1], self.up)),
                asyncio.ensure_future(_pump(server[0], client[1], self.down)),
            ]
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.abort()
            for task in self.tasks:
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                    await task
            self.link._untrack(self)

    def abort(self) -> None:
        for task in self.tasks:
            task.cancel()
        for writer in self.writers:
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: Direction) -> None:
    """Carry bytes one way: read, wait for the link, then deliver after the delay, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            arrival, data = item
            wait = arrival - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
            way.bytes += len(data)
            way.chunks += 1

    sender = asyncio.ensure_future(deliver())
    last = 0.0
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            depart, arrival = way.schedule(len(data), loop.time())
            last = max(last, arrival)
            queue.put_nowait((last, data))
            wait = depart - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)  # the link is busy: stop reading, so TCP pushes back
            if sender.done():
                break
        queue.put_nowait(None)
        await sender
        if writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()
    finally:
        sender.cancel()


class LinkProxy:
    """A TCP proxy for connections from site ``src`` to a server at site ``dst``.

    By default it listens on 127.0.0.1. ``sockets`` makes its sockets elsewhere
    (inside another network namespace, :mod:`simulate.netns`): it listens on
    ``listen_host`` and connects to the target from ``source_host``.
    """

    def __init__(
        self,
        link: WanLink,
        src: str,
        dst: str,
        target_port: int,
        target_host: str = "127.0.0.1",
        *,
        listen_host: str = "127.0.0.1",
        source_host: str | None = None,
        sockets: Callable[[], Awaitable[socket.socket]] | None = None,
    ) -> None:
        """Prepare the proxy; :meth:`start` binds a free port."""
        self.link, self.src, self.dst = link, src, dst
        self.target = (target_host, target_port)
        self.listen_host, self.source_host, self.sockets = listen_host, source_host, sockets
        self.port = 0
        self.refused = 0
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self, port: int = 0) -> LinkProxy:
        """Listen on ``port`` (0: a free one) and return self."""
        if self.sockets is None:
            self._server = await asyncio.start_server(self._accept, self.listen_host, port)
        else:
            sock = await self.sockets()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.listen_host, port))
            self._server = await asyncio.start_server(self._accept, sock=sock)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        self._server = None

    @property
    def url(self) -> str:
        """``mqtt://<listen host>:<port>`` of the proxy."""
        return f"mqtt://{self.listen_host}:{self.port}"

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Open the connection to the target (from ``source_host``, with a socket of ``sockets``)."""
        if self.sockets is None:
            return await asyncio.open_connection(*self.target)
        sock = await self.sockets()
        try:
            if self.source_host is not None:
                sock.bind((self.source_host, 0))
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, self.target), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError):
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            # stop() dropped the connection and awaits this task; ending it normally keeps Python 3.11's
            # stream callback from logging the cancellation as an "Exception in callback" traceback
            return
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.link.cut:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            server = await self._connect()
        except (OSError, TimeoutError):
            self.refused += 1
            writer.transport.abort()
            return
        if self.link.cut:  # cut while connecting
            self.refused += 1
            writer.transport.abort()
            server[1].transport.abort()
            return
        self.accepted += 1
        conn = _Connection(self.link, self.link.way(self.src, self.dst), self.link.way(self.dst, self.src))
        await conn.run((reader, writer), server)
