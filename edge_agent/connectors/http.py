"""HTTP connectors: a push endpoint on the agent (``http://`` and ``https://`` streams) and a webhook sink.

The endpoint takes ``POST <path>`` with ``Authorization: Bearer <token>`` and a body of JSON
records: one JSON array of them, or JSON lines. It answers ``200 {"accepted": n}`` only once
every record of the request is committed to the pipelines; a request whose records are not
committed within ``commit_timeout_s`` is answered 503, and a client that sends it again gets
them in at least once. The webhook sink POSTs each result as JSON; a 2xx answer acknowledges it,
408, 425, 429, a 5xx or no answer are retried with backoff, any other answer drops the value.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import http.client
import os
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import orjson

from edge_agent.connectors.api import Reading, register_sink, register_source
from edge_agent.connectors.httpserver import MAX_HEAD_BYTES, HttpProblem, Request, read_request, respond
from spanedge.connectors import scheme_of
from spanedge.connectors.streams import PushOptions, stream_options
from spanedge.errors import SpanEdgeError
from spanedge.sinks import ConnectorSinkSpec
from spanedge.sites import StreamBinding

#: Statuses of a webhook answer that mean "try again later".
RETRIED = frozenset({408, 425, 429})
#: The most of a webhook's answer read (for the log line).
MAX_ANSWER_BYTES = 64 * 1024


def _token(env: str, what: str) -> str:
    value = os.environ.get(env)
    if not value:
        msg = f"{what}: environment variable {env} is not set; export it with the bearer token"
        raise SpanEdgeError(msg)
    return value


class _Pending:
    """The records of one request not yet committed."""

    __slots__ = ("done", "failed", "left")

    def __init__(self, count: int) -> None:
        self.left = count
        self.done = asyncio.Event()
        self.failed = False


class PushSource:
    """The records clients POST to an endpoint of the agent (see the module)."""

    def __init__(self, binding: StreamBinding, stream: str) -> None:
        assert binding.url is not None
        scheme = scheme_of(binding.url)
        options = stream_options(scheme, binding.options)
        assert isinstance(options, PushOptions)
        parts = urlsplit(binding.url)
        self.options = options
        self.host = parts.hostname
        self.port = parts.port or (443 if scheme == "https" else 80)
        self.path = parts.path or "/"
        self.tls = scheme == "https"
        self.name = f"{scheme}://{parts.netloc}{self.path}"
        self.stream = stream
        self.accepted = 0
        self._waiting: set[_Pending] = set()

    async def session(self) -> AsyncIterator[list[Reading]]:
        """Serve the endpoint and yield each request's records; the endpoint closes when the session ends."""
        options = self.options
        token = _token(options.token_env, f"stream {self.stream} ({self.name})")
        queue: asyncio.Queue[list[Reading]] = asyncio.Queue(maxsize=options.max_connections)
        slots = asyncio.Semaphore(options.max_connections)
        writers: set[asyncio.StreamWriter] = set()
        context = None
        if self.tls:
            assert options.cert_file
            assert options.key_file
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(options.cert_file, options.key_file)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writers.add(writer)
            try:
                async with slots:
                    await self._serve(reader, writer, queue, token)
            except asyncio.CancelledError:  # the loop is stopping: the client gets no answer and sends again
                pass
            finally:
                writers.discard(writer)
                writer.close()

        server = await asyncio.start_server(serve, self.host, self.port, limit=MAX_HEAD_BYTES, ssl=context)
        try:
            yield []
            while True:
                yield await queue.get()
        finally:
            server.close()
            for pending in self._waiting:  # their records may never be committed now: 503, the client sends again
                if not pending.done.is_set():
                    pending.failed = True
                    pending.done.set()
            for writer in list(writers):
                writer.close()

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        queue: asyncio.Queue[list[Reading]],
        token: str,
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                try:
                    request = await read_request(reader, self.options.max_body_bytes, self.options.read_timeout_s)
                except HttpProblem as problem:
                    await respond(writer, problem.status, {"error": str(problem)}, keep_alive=False)
                    return
                if request is None:
                    return
                try:
                    accepted = await self._take(request, queue, token)
                except HttpProblem as problem:
                    await respond(writer, problem.status, {"error": str(problem)}, request.keep_alive)
                else:
                    await respond(writer, 200, {"accepted": accepted}, request.keep_alive)
                if not request.keep_alive:
                    return

    async def _take(self, request: Request, queue: asyncio.Queue[list[Reading]], token: str) -> int:
        """Queue the request's records and wait for their commit; return how many there were."""
        if request.path != self.path:
            raise HttpProblem(404, f"this endpoint takes POST {self.path}, not {request.path[:200]}")
        if request.method != "POST":
            raise HttpProblem(405, f"this endpoint takes POST {self.path}, not {request.method[:20]}")
        sent = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(sent, f"Bearer {token}".encode()):
            raise HttpProblem(401, "send the stream's token as 'Authorization: Bearer <token>'")
        payloads = self._payloads(request.body)
        if not payloads:
            return 0
        pending = _Pending(len(payloads))
        now = time.time()
        readings = [Reading("", None, now, self.name, token=pending, payload=p) for p in payloads]
        timeout = self.options.commit_timeout_s
        self._waiting.add(pending)
        try:
            async with asyncio.timeout(timeout):
                await queue.put(readings)
                await pending.done.wait()
        except TimeoutError:
            msg = (
                f"the records were not committed within {timeout:g} s (the agent is busy or stopping); send them again"
            )
            raise HttpProblem(503, msg) from None
        finally:
            self._waiting.discard(pending)
        if pending.failed:
            raise HttpProblem(503, "the stream stopped before the records were committed; send them again")
        self.accepted += len(payloads)
        return len(payloads)

    def _payloads(self, body: bytes) -> list[bytes]:
        body = body.strip()
        if body.startswith(b"["):
            try:
                items = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise HttpProblem(400, f"the body is not a JSON array of records: {exc}") from None
            payloads = [orjson.dumps(item) for item in items]
        else:
            payloads = [line for line in body.split(b"\n") if line.strip()]
        if len(payloads) > self.options.max_records:
            msg = (
                f"{len(payloads)} records in one request, over the endpoint's max_records of {self.options.max_records}"
            )
            raise HttpProblem(413, msg)
        return payloads

    def acknowledge(self, tokens: list[Any]) -> None:
        """Records are committed: a request whose records all are gets its answer."""
        for pending in tokens:
            pending.left -= 1
            if pending.left == 0:
                pending.done.set()


class WebhookSink:
    """POSTs each result as JSON to a URL: ``sinks.webhook(url)`` (see the module)."""

    def __init__(self, spec: ConnectorSinkSpec) -> None:
        parts = urlsplit(spec.target)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.tls else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.name = f"{parts.scheme}://{parts.netloc}{parts.path}"
        self.timeout = float(spec.options.get("timeout_s", 10.0))
        self.token_env: str | None = spec.options.get("token_env")
        self.headers = {str(k): str(v) for k, v in dict(spec.options.get("headers") or {}).items()}
        self.headers["Content-Type"] = "application/json"
        self.posted = 0

    async def connect(self) -> None:
        """Read the token (the receiver is reached by each write)."""
        if self.token_env:
            self.headers["Authorization"] = f"Bearer {_token(self.token_env, f'webhook {self.name}')}"

    async def write(self, key: str, value: Any) -> None:
        """POST ``value`` as JSON; raise ``ConnectionError`` for an answer to retry, ``ValueError`` for a refusal."""
        await asyncio.to_thread(self._post, orjson.dumps(value, default=str))
        self.posted += 1

    def _post(self, body: bytes) -> None:
        connection: http.client.HTTPConnection
        if self.tls:
            connection = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout)
        else:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            connection.request("POST", self.target, body, self.headers)
            answer = connection.getresponse()
            text = answer.read(MAX_ANSWER_BYTES).decode("utf-8", "replace")[:200]
        finally:
            connection.close()
        if 200 <= answer.status < 300:
            return
        msg = f"{self.name} answered {answer.status} {answer.reason}: {text!r}"
        if answer.status in RETRIED or answer.status >= 500:
            raise ConnectionError(msg)
        raise ValueError(msg)

    async def close(self) -> None:
        """Nothing to close: each write has its own connection."""


register_source("http", PushSource)
register_source("https", PushSource)
register_sink("http", WebhookSink)
register_sink("https", WebhookSink)
