"""The HTTP push and file tail sources against real HTTP requests and real files."""

from __future__ import annotations

import asyncio
import http.client
import os
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from edge_agent.connectors.http import PushSource
from edge_agent.connectors.runner import SourceRunner
from edge_agent.connectors.tail import TailSource
from edge_agent.connectors.testing import collect
from edge_agent.mqtt.transport import Inbox
from simulate.ports import free_port
from spanedge.sites import StreamBinding

TOKEN_ENV = "SPANEDGE_TEST_PUSH_TOKEN"


def binding(url: str, **options: Any) -> StreamBinding:
    return msgspec.convert({"url": url, "rate": 10, "options": options, "max_message_bytes": 1000}, StreamBinding)


def post(port: int, body: bytes, token: str = "s3cret", path: str = "/in", method: str = "POST") -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, body, {"Authorization": f"Bearer {token}"})
        answer = connection.getresponse()
        return answer.status, orjson.loads(answer.read())
    finally:
        connection.close()


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    return "s3cret"


async def test_a_push_is_answered_only_after_its_records_are_acknowledged(token: str) -> None:
    port = free_port()
    source = PushSource(binding(f"http://127.0.0.1:{port}/in", token_env=TOKEN_ENV), "weather")
    inbox = Inbox()
    inbox.bind(asyncio.get_running_loop())
    runner = SourceRunner(source, "site", "weather", inbox)
    runner.start()
    try:
        await asyncio.to_thread(runner.subscribed.wait, 30)
        answer = asyncio.create_task(asyncio.to_thread(post, port, b'[{"t": 1}, {"t": 2}]'))
        taken: list[Any] = []
        while len(taken) < 2:
            await inbox.wait(0.1)
            taken.extend(inbox.drain(10))
        assert [orjson.loads(m.payload) for m in taken] == [{"t": 1}, {"t": 2}]
        taken[0].source.ack(taken[0].mid, 1)
        await asyncio.sleep(0)
        assert not answer.done()  # one record of two is committed: no answer yet
        taken[1].source.ack(taken[1].mid, 1)
        assert await asyncio.wait_for(answer, 30) == (200, {"accepted": 2})
    finally:
        runner.stop()
        await runner.wait_stopped()


async def test_a_push_endpoint_refuses_what_it_must(token: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/in"
    source = PushSource(binding(url, token_env=TOKEN_ENV, max_body_bytes=200, max_records=3), "weather")
    inbox = Inbox()
    inbox.bind(asyncio.get_running_loop())
    runner = SourceRunner(source, "site", "weather", inbox)
    runner.start()
    try:
        await asyncio.to_thread(runner.subscribed.wait, 30)
        status, body = await asyncio.to_thread(post, port, b'{"t": 1}', "wrong")
        assert status == 401
        assert "Bearer" in body["error"]
        assert (await asyncio.to_thread(post, port, b"{}", token, "/other"))[0] == 404
        assert (await asyncio.to_thread(post, port, b"", token, "/in", "GET"))[0] == 405
        status, body = await asyncio.to_thread(post, port, b"[" + b'{"t": 1},' * 40 + b"{}]")
        assert status == 413
        assert "max_body_bytes of 200" in body["error"]
        status, body = await asyncio.to_thread(post, port, b"{}\n{}\n{}\n{}\n")
        assert status == 413
        assert "max_records of 3" in body["error"]
        status, body = await asyncio.to_thread(post, port, b'[{"t": 1}')
        assert status == 400
        assert "not a JSON array" in body["error"]
        assert inbox.drain(10) == []  # nothing refused got in
    finally:
        runner.stop()
        await runner.wait_stopped()


async def test_a_push_takes_json_lines_and_the_empty_body(token: str) -> None:
    port = free_port()
    tap = Tap(PushSource(binding(f"http://127.0.0.1:{port}/in", token_env=TOKEN_ENV), "weather"))
    try:
        await tap.ready()
        assert await asyncio.to_thread(post, port, b"") == (200, {"accepted": 0})
        answer = asyncio.create_task(asyncio.to_thread(post, port, b'{"t": 1}\n\n{"t": 2}\r\nnot json\n'))
        assert await tap.take(3) == [{"t": 1}, {"t": 2}, "not json"]
        assert await asyncio.wait_for(answer, 30) == (200, {"accepted": 3})
    finally:
        await tap.stop()


async def test_a_push_endpoint_without_its_token_in_the_environment_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    source = PushSource(binding(f"http://127.0.0.1:{free_port()}/in", token_env=TOKEN_ENV), "weather")
    with pytest.raises(Exception, match=f"environment variable {TOKEN_ENV} is not set"):
        async for _ in source.session():
            pass


class Tap:
    """A source run into an inbox, as the agent runs it; :meth:`take` acknowledges what it took."""

    def __init__(self, source: Any) -> None:
        self.inbox = Inbox()
        self.inbox.bind(asyncio.get_running_loop())
        self.runner = SourceRunner(source, "site", "stream", self.inbox)
        self.runner.start()

    async def ready(self) -> None:
        await asyncio.to_thread(self.runner.subscribed.wait, 30)

    async def take(self, count: int) -> list[Any]:
        out: list[Any] = []
        async with asyncio.timeout(30):
            while len(out) < count:
                await self.inbox.wait(0.1)
                for m in self.inbox.drain(count - len(out)):
                    out.append(m.problem or _parsed(m.payload))
                    m.source.ack(m.mid, 1)
        return out

    async def stop(self) -> None:
        self.runner.stop()
        await self.runner.wait_stopped()


async def test_a_tailed_file_is_followed_through_rotation_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "scale.jsonl"
    log.write_bytes(b'{"kg": 1}\n{"kg": 2}\n{"kg": ')
    tap = Tap(TailSource(binding(f"file://{log}", poll_s=0.02), "weights"))
    try:
        assert await tap.take(2) == [{"kg": 1}, {"kg": 2}]
        with log.open("ab") as f:
            f.write(b'3}\n{"kg": 4}')  # the last line is unfinished when the file is rotated
        assert await tap.take(1) == [{"kg": 3}]
        log.rename(tmp_path / "scale.jsonl.1")
        log.write_bytes(b'{"kg": 5}\n' + b"x" * 1500 + b'\n{"kg": 6}\n')
        got = await tap.take(4)
        assert got[:2] == [{"kg": 4}, {"kg": 5}]
        assert got[3] == {"kg": 6}
        assert got[2] == f"file://{log} byte 10: the line is over the stream's max_message_bytes of 1000"
        log.write_bytes(b'{"kg": 7}\n')  # truncated in place, and shorter
        assert await tap.take(1) == [{"kg": 7}]
    finally:
        await tap.stop()
    saved = orjson.loads((tmp_path / "scale.jsonl.offset").read_bytes())
    assert (saved["ino"], saved["offset"]) == (log.stat().st_ino, 10)


async def test_a_tailed_file_resumes_from_its_saved_offset_also_when_rotated_meanwhile(tmp_path: Path) -> None:
    log = tmp_path / "scale.jsonl"
    offsets = tmp_path / "state" / "scale.offset"
    offsets.parent.mkdir()
    log.write_bytes(b'{"kg": 1}\n{"kg": 2}\n')
    stream = binding(f"file://{log}", poll_s=0.02, offset_file=str(offsets))
    assert await collect(TailSource(stream, "weights"), 2) == [{"kg": 1}, {"kg": 2}]
    with log.open("ab") as f:
        f.write(b'{"kg": 3}\n')
    assert await collect(TailSource(stream, "weights"), 1) == [{"kg": 3}]  # a restart: on from the offset
    with log.open("ab") as f:
        f.write(b'{"kg": 4}\n')
    os.rename(log, tmp_path / "scale.jsonl.1")  # rotated while no agent ran
    log.write_bytes(b'{"kg": 5}\n')
    assert await collect(TailSource(stream, "weights"), 2) == [{"kg": 4}, {"kg": 5}]


async def test_a_tailed_file_without_an_offset_can_start_at_its_end(tmp_path: Path) -> None:
    log = tmp_path / "other.jsonl"
    log.write_bytes(b'{"old": 1}\n')
    tap = Tap(TailSource(binding(f"file://{log}", start="end", poll_s=0.02), "other"))
    try:
        await tap.ready()
        with log.open("ab") as f:
            f.write(b'{"new": 1}\n')
        assert await tap.take(1) == [{"new": 1}]
    finally:
        await tap.stop()


def _parsed(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload.decode()


async def test_a_slow_client_gets_408_and_a_stopped_stream_closes_its_port(token: str) -> None:
    port = free_port()
    tap = Tap(PushSource(binding(f"http://127.0.0.1:{port}/in", token_env=TOKEN_ENV, read_timeout_s=0.2), "weather"))
    try:
        await tap.ready()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /in HTTP/1.1\r\nContent-Length: 10\r\n")  # and nothing more
        answer = await asyncio.wait_for(reader.read(), 30)  # the endpoint answers, then closes the connection
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert b"did not arrive whole within 0.2 s" in answer
    finally:
        await tap.stop()
    with pytest.raises((ConnectionRefusedError, ConnectionResetError)):  # nobody listens there any more
        await asyncio.open_connection("127.0.0.1", port)


@pytest.mark.timeout(120)
async def test_a_request_waiting_for_its_commit_is_let_go_when_the_stream_stops(token: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/in"
    tap = Tap(PushSource(binding(url, token_env=TOKEN_ENV, commit_timeout_s=600), "weather"))
    await tap.ready()
    answer = asyncio.create_task(asyncio.to_thread(_answer_or_hang_up, port))
    async with asyncio.timeout(30):
        while not len(tap.inbox):  # the record is read, never committed
            await asyncio.sleep(0.01)
    await tap.stop()
    assert await answer in ("503", "hung up")  # not 200, and no 600 s wait: the client sends it again


def _answer_or_hang_up(port: int) -> str:
    try:
        return str(post(port, b'{"t": 1}')[0])
    except (http.client.RemoteDisconnected, ConnectionError):
        return "hung up"


async def test_an_https_endpoint_takes_records_over_tls(token: str, tmp_path: Path) -> None:
    import ssl

    from simulate.tls import make_tls

    files = make_tls(tmp_path)
    port = free_port()
    options = {"token_env": TOKEN_ENV, "cert_file": str(files.cert_file), "key_file": str(files.key_file)}
    tap = Tap(PushSource(binding(f"https://127.0.0.1:{port}/in", **options), "weather"))
    try:
        await tap.ready()

        def post_tls() -> tuple[int, Any]:
            context = ssl.create_default_context(cafile=str(files.ca_file))
            connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=60, context=context)
            try:
                connection.request("POST", "/in", b'{"t": 1}', {"Authorization": f"Bearer {token}"})
                answer = connection.getresponse()
                return answer.status, orjson.loads(answer.read())
            finally:
                connection.close()

        answer = asyncio.create_task(asyncio.to_thread(post_tls))
        assert await tap.take(1) == [{"t": 1}]
        assert await asyncio.wait_for(answer, 30) == (200, {"accepted": 1})
    finally:
        await tap.stop()
