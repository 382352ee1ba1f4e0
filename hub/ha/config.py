"""What ``spanedge hub --ha`` sets."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from hub.ha.lease import DEFAULT_TTL_S

#: How often a standby tries to take the lease.
DEFAULT_POLL_S = 1.0


@dataclass(frozen=True)
class HaConfig:
    """A hub of a high-availability group: the shared database, this hub's name in it, and the lease's timing."""

    dsn: str
    #: this hub's name in the lease (the standbys' ``/healthz`` shows the leader's)
    name: str = socket.gethostname()
    ttl_s: float = DEFAULT_TTL_S
    poll_s: float = DEFAULT_POLL_S
    #: start Spark while standing by, so a takeover does not wait for it
    warm_spark: bool = True
    #: the REST URL the other hubs send clients to while this one leads (``--ha-url``; None: :func:`served_url`)
    url: str | None = None


def served_url(host: str, port: int, plain_http: bool = False) -> str:
    """The URL of the REST API the hub serves on ``host:port``; a wildcard address is named by the host name."""
    name = socket.gethostname() if host in ("", "0.0.0.0", "::") else host
    if ":" in name:  # an IPv6 address
        name = f"[{name}]"
    return f"{'http' if plain_http else 'https'}://{name}:{port}"


def checked_url(url: str) -> str:
    """``url`` without a trailing slash if it is an ``http(s)://HOST[:PORT][/PATH]`` URL.

    Raises:
        ValueError: it is not; the message says what a valid one looks like.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        msg = f"--ha-url {url!r} is not a URL ({exc}); give the URL clients reach this hub by, https://HOST:PORT"
        raise ValueError(msg) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        msg = (
            f"--ha-url {url!r} must be http(s)://HOST[:PORT] with no query or fragment: the URL clients reach "
            "this hub by, such as https://hub-a.example.com:8000"
        )
        raise ValueError(msg)
    return url.rstrip("/")
