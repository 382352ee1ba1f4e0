"""uvicorn's h11 protocol under the :class:`~hub.api.serving.limits.ClientLimits`: late and extra clients dropped."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any, ClassVar, Literal

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from hub.api.errors import http_error_name
from hub.api.serving.limits import Admission, ClientLimits, Notices
from spanedge.logsafe import escaped

Phase = Literal["headers", "body"]


class BoundedH11(H11Protocol):
    """One HTTP/1.1 connection, given so long to send each request and counted against its address's share.

    Subclassed once per server by :func:`bounded_protocol`, which sets the class attributes.
    """

    limits: ClassVar[ClientLimits]
    admission: ClassVar[Admission]
    notices: ClassVar[Notices]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """A connection not yet made."""
        super().__init__(*args, **kwargs)
        self._address: str | None = None  # set once admitted
        self._waiting: Phase | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Admit the connection, or answer 429 or 503 and drop it; an admitted one has ``header_s`` to send headers."""
        super().connection_made(transport)
        address = self.client[0] if self.client else "an unknown address"
        refused = self.admission.admit(address)
        if refused is None:
            self._address = address
            self._wait("headers")
            return
        limits = self.limits
        if refused == 429:
            self.notices.warn(
                "per-client",
                "REST API: refused a connection from %s, which holds %d already (the most one address may)",
                escaped(address),
                limits.per_client,
            )
            detail = f"this address holds {limits.per_client} connections to the hub already; close or reuse them"
        else:
            self.notices.warn(
                "total",
                "REST API: refused a connection from %s: %d are open, the most the hub serves at once",
                escaped(address),
                limits.total,
            )
            detail = f"the hub serves {limits.total} connections at once and all are taken; try again shortly"
        self._drop(refused, detail)

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the clock and give the address its share back."""
        self._stop_waiting()
        if self._address is not None:
            self.admission.release(self._address)
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Parse ``data``; the first byte of a request on a kept-alive connection starts its clock."""
        if self._address is not None and self._waiting is None and self.conn.their_state is h11.IDLE:
            self._wait("headers")
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        """After a response: a pipelined request already begun has its clock running."""
        super().on_response_complete()
        self._follow()

    def send_400_response(self, msg: str) -> None:
        """Answer a request h11 cannot parse (headers over 16 KiB among them) with the API's JSON 400."""
        body = _error_body(400, f"{msg.rstrip('.')}: not an HTTP/1.1 request, or its headers are over 16 KiB")
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

    def _follow(self) -> None:
        """Run the clock of what the client owes now: the rest of the headers, the body, or nothing."""
        if self._address is None:
            return
        state = self.conn.their_state
        wanted: Phase | None = None
        if state is h11.SEND_BODY:
            wanted = "body"
        elif state is h11.IDLE and (self._waiting == "headers" or self.conn.trailing_data[0]):
            wanted = "headers"
        if wanted != self._waiting:
            self._stop_waiting()
            if wanted is not None:
                self._wait(wanted)

    def _wait(self, phase: Phase) -> None:
        seconds = self.limits.header_s if phase == "headers" else self.limits.body_s
        self._waiting = phase
        self._deadline = self.loop.call_later(seconds, self._late, phase, seconds)

    def _stop_waiting(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        self._waiting = None

    def _late(self, phase: Phase, seconds: float) -> None:
        """The client did not send its request's ``phase`` in time: a 408 (if nothing was answered yet), dropped."""
        self._deadline = None
        self._waiting = None
        if self.transport.is_closing():
            return
        self.notices.warn(
            phase,
            "REST API: dropped the connection of %s, which took over %g s to send its request %s",
            escaped(self._address),
            seconds,
            phase,
        )
        answered = phase == "body" and self.cycle is not None and self.cycle.response_started
        if answered:
            self.transport.abort()
        else:
            self._drop(408, f"the request {phase} took over {seconds:g} s to arrive, the most the hub waits")

    def _drop(self, status: int, detail: str) -> None:
        """Answer ``status`` with the API's JSON error and close the connection at once."""
        body = _error_body(status, detail)
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n"
        )
        if status != 408:
            head += "retry-after: 1\r\n"
        self.transport.write(head.encode() + b"\r\n" + body)
        self.transport.abort()  # what the kernel took is still sent; nothing waits on the client


def _error_body(status: int, detail: str) -> bytes:
    return orjson.dumps({"error": http_error_name(status), "detail": detail})


def bounded_protocol(limits: ClientLimits) -> type[BoundedH11]:
    """A :class:`BoundedH11` for one server: its own count of connections and its own warnings."""
    attributes = {"limits": limits, "admission": Admission(limits), "notices": Notices()}
    return type("BoundedH11", (BoundedH11,), attributes)
