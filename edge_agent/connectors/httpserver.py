"""A small HTTP/1.1 request reader and response writer on asyncio streams, for the push endpoint.

Only what the endpoint needs: a request line, headers, a body of ``Content-Length`` bytes
(chunked bodies are refused with 411), keep-alive. Every read has a size and a time limit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson

#: The largest request line plus headers, in bytes.
MAX_HEAD_BYTES = 16 * 1024

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class HttpProblem(Exception):
    """A request that is answered with an error status (and the connection closed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    """One request: method, path (query left out), lower-cased headers, body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


async def read_request(reader: asyncio.StreamReader, max_body: int, timeout: float) -> Request | None:
    """The next request on a connection, ``None`` once the client closed it between requests.

    Raises:
        HttpProblem: the request is malformed, too large or too slow (its status says which).
    """
    try:
        async with asyncio.timeout(timeout):
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial.strip():
                    return None
                raise HttpProblem(400, "the request ended inside its headers") from None
            except asyncio.LimitOverrunError:
                raise HttpProblem(431, f"the request's headers are over {MAX_HEAD_BYTES} bytes") from None
            request_line, *lines = head.decode("latin-1").split("\r\n")
            parts = request_line.split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                raise HttpProblem(400, f"{request_line[:100]!r} is not an HTTP/1.x request line")
            headers = {}
            for line in lines:
                if line:
                    name, sep, value = line.partition(":")
                    if not sep:
                        raise HttpProblem(400, f"header line {line[:100]!r} has no ':'")
                    headers[name.strip().lower()] = value.strip()
            body = await _body(reader, headers, max_body)
    except TimeoutError:
        raise HttpProblem(408, f"the request did not arrive whole within {timeout:g} s") from None
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" and (parts[2] == "HTTP/1.1" or connection == "keep-alive")
    return Request(parts[0], parts[1].partition("?")[0], headers, body, keep_alive)


async def _body(reader: asyncio.StreamReader, headers: dict[str, str], max_body: int) -> bytes:
    if "transfer-encoding" in headers:
        raise HttpProblem(411, "send the body with a Content-Length header, not chunked")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise HttpProblem(400, f"Content-Length {length_text[:40]!r} is not a number")
    length = int(length_text)
    if length > max_body:
        raise HttpProblem(413, f"the body of {length} bytes is over the endpoint's max_body_bytes of {max_body}")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise HttpProblem(400, f"the body ended before its {length} bytes") from None


async def respond(writer: asyncio.StreamWriter, status: int, body: dict[str, object], keep_alive: bool) -> None:
    """Send a JSON response."""
    data = orjson.dumps(body)
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n"
    )
    if status == 401:
        head += 'WWW-Authenticate: Bearer realm="spanedge"\r\n'
    writer.write(head.encode() + b"\r\n" + data)
    await writer.drain()
