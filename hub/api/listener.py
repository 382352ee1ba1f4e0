"""The REST API's listening socket, bound before anything else of the hub starts.

The hub binds it first and hands it to uvicorn (``Server.run(sockets=...)``),
so a port in use fails within a second, before Spark starts, and nothing can
take the port in between.
"""

from __future__ import annotations

import errno
import socket

from spanedge.errors import SpanEdgeError

#: The listen backlog, uvicorn's default.
BACKLOG = 2048


class PortInUse(SpanEdgeError):
    """The REST API's address cannot be bound."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (``port`` 0: a free port).

    Raises:
        PortInUse: the address is taken or cannot be bound; the message says what to do.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            hint = (
                f"another process listens there (ss -ltnp 'sport = :{port}' names it); stop it, or start the hub "
                "with another --port"
            )
        else:
            hint = "pass an address of this machine as --host (127.0.0.1, 0.0.0.0) and a free --port"
        msg = f"the hub cannot listen on {host}:{port} for its REST API: {exc.strerror or exc}; {hint}"
        raise PortInUse(msg) from None
    sock.set_inheritable(False)
    return sock
