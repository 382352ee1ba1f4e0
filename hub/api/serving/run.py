"""Running uvicorn for the hub's REST API under :class:`~hub.api.serving.limits.ClientLimits`."""

from __future__ import annotations

import asyncio
import socket
from functools import partial
from typing import Any

import uvicorn

from hub.api.serving.limits import ClientLimits
from hub.api.serving.protocol import bounded_protocol


class BoundedLoop(asyncio.SelectorEventLoop):
    """An event loop whose TLS servers give each handshake and each close ``tls_s`` at most."""

    def __init__(self, tls_s: float) -> None:
        """A selector loop, as uvicorn's own on Linux."""
        super().__init__()
        self.tls_s = tls_s

    async def create_server(self, *args: Any, **kwargs: Any) -> asyncio.Server:
        """:meth:`asyncio.loop.create_server`, with the TLS timeouts of this loop unless given."""
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", self.tls_s)
            kwargs.setdefault("ssl_shutdown_timeout", self.tls_s)
        return await super().create_server(*args, **kwargs)


class ApiServer(uvicorn.Server):
    """uvicorn serving ``app`` with ``options`` (``uvicorn.Config``'s) under ``limits``; no WebSockets."""

    def __init__(self, app: Any, options: dict[str, Any], limits: ClientLimits) -> None:
        """Prepare the server; nothing listens until :meth:`run`."""
        super().__init__(uvicorn.Config(app, http=bounded_protocol(limits), ws="none", **options))
        self.limits = limits

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve on ``sockets`` (or the configured address) until told to stop, on a :class:`BoundedLoop`."""
        with asyncio.Runner(loop_factory=partial(BoundedLoop, self.limits.header_s)) as runner:
            runner.run(self.serve(sockets=sockets))
