"""A standby's reads sent on to the leader: the request goes there, the leader's answer comes back (stdlib only).

A standby passes the caller's token (``Authorization``), the headers the form
of the answer depends on (:data:`SENT_ON`) and the query string on, verifies an ``https://`` leader against the hub's CA (or the
system's CAs, see :func:`leader_ca`), and gives up on a leader that does not
connect or answer within ``timeout_s``. The leader's status, body and headers
come back, but for the hop-by-hop ones (:data:`HOP_BY_HOP` and those the
leader's ``Connection`` header names). A body larger than ``max_bytes`` is
refused; an event stream (``text/event-stream``) is passed on event by event,
and ends at an event larger than ``max_bytes``.
"""

from __future__ import annotations

import http.client
import logging
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from hub.api.tls import ServerTls
from spanedge.errors import SpanEdgeError

log = logging.getLogger(__name__)

#: Seconds a standby waits for the leader to connect, and then for each read of its answer.
TIMEOUT_S = 10.0
#: The largest body (or event of a stream) a standby passes on from the leader.
MAX_BYTES = 16 * 2**20
#: The headers of one connection, never copied from one to the next (RFC 9110, section 7.6.1).
HOP_BY_HOP = frozenset(
    [
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ]
)
#: The leader's headers a standby does not copy: the hop-by-hop ones, and those its own server writes.
NOT_COPIED = HOP_BY_HOP | {"content-length", "date", "server"}
#: The caller's headers a standby sends on to the leader.
SENT_ON = ("authorization", "accept", "accept-language", "if-none-match", "if-modified-since")
#: The header a standby adds to what it sends on: a standby that gets a request with it does not send it on again.
FORWARDED_HEADER = "X-SpanEdge-Forwarded-By"
#: The content type of an answer passed on as it comes, event by event.
EVENT_STREAM = "text/event-stream"


class LeaderUnreachable(SpanEdgeError):
    """The leader did not connect or answer, its certificate did not verify, or it spoke no HTTP."""


class AnswerTooLarge(SpanEdgeError):
    """The leader's answer is larger than a standby passes on."""


def leader_ca(tls: ServerTls | None, state_dir: Path) -> Path | None:
    """The CA certificate a standby verifies the leader with: the one the hub serves HTTPS with.

    The hub CA's (``<state_dir>/ca/ca.pem``) when the hub issued its own certificate, or when it serves plain
    HTTP and the CA exists; None (the system's CAs) when the operator gave the certificate (``--tls-cert``).
    """
    if tls is not None:
        return tls.ca_file
    hub_ca = state_dir / "ca" / "ca.pem"
    return hub_ca if hub_ca.exists() else None


@dataclass(frozen=True)
class Answer:
    """The leader's answer: status, headers to copy, and the open response to read the body from."""

    status: int
    headers: list[tuple[str, str]]
    content_type: str
    response: http.client.HTTPResponse
    connection: http.client.HTTPConnection

    def close(self) -> None:
        """Close the response and its connection (a standby uses a connection for one request)."""
        self.connection.close()

    @property
    def streams(self) -> bool:
        """True if the body is an event stream, passed on as it comes."""
        return self.content_type.split(";")[0].strip().lower() == EVENT_STREAM


class Forwarder:
    """Sends requests on to a leader's URL, trusting ``ca_file`` (None: the system's CAs)."""

    def __init__(self, ca_file: Path | None = None, timeout_s: float = TIMEOUT_S, max_bytes: int = MAX_BYTES) -> None:
        """Prepare; nothing is read or sent until :meth:`send`."""
        self.ca_file = ca_file
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._context: ssl.SSLContext | None = None

    def context(self) -> ssl.SSLContext:
        """The TLS context an ``https://`` leader is verified with (made at the first call).

        Raises:
            LeaderUnreachable: ``ca_file`` cannot be read as PEM certificates.
        """
        if self._context is None:
            try:
                self._context = ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                msg = f"the hub's CA certificate {self.ca_file} cannot be read ({exc}); check <state-dir>/ca/ca.pem"
                raise LeaderUnreachable(msg) from None
        return self._context

    def send(self, leader_url: str, method: str, target: str, headers: Mapping[str, str]) -> Answer:
        """Send ``method target`` (a path with its query) to ``leader_url`` with the headers of :data:`SENT_ON`.

        Raises:
            LeaderUnreachable: the leader cannot be reached or did not answer in time.
        """
        conn = self._connection(leader_url)
        sent = {name: headers[name] for name in SENT_ON if name in headers}
        sent |= {"Accept-Encoding": "identity", FORWARDED_HEADER: "standby"}
        try:
            conn.request(method, urlsplit(leader_url).path.rstrip("/") + target, headers=sent)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise LeaderUnreachable(_reason(exc)) from None
        named = {token.strip().lower() for token in (response.getheader("Connection") or "").split(",")}
        copied = [(k, v) for k, v in response.getheaders() if k.lower() not in NOT_COPIED | named]
        if method.upper() == "HEAD" and response.getheader("Content-Length"):
            copied.append(("Content-Length", response.getheader("Content-Length", "")))
        content_type = response.getheader("Content-Type") or "application/octet-stream"
        return Answer(response.status, copied, content_type, response, conn)

    def _connection(self, leader_url: str) -> http.client.HTTPConnection:
        """A connection (not opened yet) to the host and port of ``leader_url``.

        Raises:
            LeaderUnreachable: ``leader_url`` is not an http(s) URL.
        """
        scheme: str | None = None
        try:
            parts = urlsplit(leader_url)
            scheme, host, port = parts.scheme, parts.hostname, parts.port
        except ValueError:
            host = port = None
        if scheme not in ("http", "https") or not host:
            msg = f"the leader's URL {leader_url!r} is not an http(s) URL; check the leader's --ha-url"
            raise LeaderUnreachable(msg)
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout_s, context=self.context())
        return http.client.HTTPConnection(host, port, timeout=self.timeout_s)

    def body(self, answer: Answer) -> bytes:
        """The whole body of ``answer`` (the connection is closed after).

        Raises:
            AnswerTooLarge: it is larger than ``max_bytes``.
            LeaderUnreachable: the leader stopped answering before its end.
        """
        response = answer.response
        try:
            declared = response.getheader("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                raise AnswerTooLarge(self._too_large(f"{int(declared)} bytes"))
            data = response.read(self.max_bytes + 1)
            if len(data) > self.max_bytes:
                raise AnswerTooLarge(self._too_large(f"more than {self.max_bytes} bytes"))
            return data
        except (OSError, http.client.HTTPException) as exc:
            raise LeaderUnreachable(_reason(exc)) from None
        finally:
            answer.close()

    def events(self, answer: Answer) -> Iterator[bytes]:
        """The events of the stream ``answer``, each with the blank line that ends it, as they come.

        The stream ends with the leader's, at an event larger than ``max_bytes``, or when the leader stops
        answering; the connection is closed then.
        """
        response = answer.response
        event: list[bytes] = []
        size = 0
        try:
            while line := response.readline(self.max_bytes - size + 1):
                size += len(line)
                if size > self.max_bytes:
                    log.warning("the leader sent an event of more than %d bytes; the stream ends", self.max_bytes)
                    return
                event.append(line)
                if line in (b"\n", b"\r\n", b"\r"):
                    yield b"".join(event)
                    event, size = [], 0
        except (OSError, http.client.HTTPException) as exc:
            log.info("the leader's event stream ended: %s", _reason(exc))
        finally:
            answer.close()

    def _too_large(self, size: str) -> str:
        return f"the leader's answer is {size}, more than the {self.max_bytes} a standby passes on; ask the leader"


def _reason(exc: BaseException) -> str:
    """Why the leader was not reached, in words, with the fix for a certificate that does not verify."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"its certificate does not verify ({exc.verify_message or exc}); the hubs of a group share the "
            "state directory's CA (<state-dir>/ca/ca.pem), which must have issued the leader's certificate"
        )
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
