"""The webhook sink against a real local HTTP server that fails its first requests."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from edge_agent.connectors.actuators import Actuators
from spanedge import sinks
from spanedge.errors import InvalidDataflow
from tests.polling import poll


class Receiver(http.server.ThreadingHTTPServer):
    """Answers the statuses of ``script`` in turn (then 200) and keeps the bodies it answered 2xx."""

    def __init__(self, script: list[int]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script = list(script)
        self.taken: list[Any] = []
        self.seen: list[tuple[int, Any, str]] = []
        self.lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            status = self.server.script.pop(0) if self.server.script else 200
            self.server.seen.append((status, body, self.headers.get("Authorization", "")))
            if 200 <= status < 300:
                self.server.taken.append(body)
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@contextlib.contextmanager
def receiver(script: list[int]) -> Iterator[Receiver]:
    server = Receiver(script)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def flaky() -> Iterator[Receiver]:
    with receiver([503, 503, 500, 429]) as server:
        yield server


async def test_a_webhook_retries_until_the_receiver_takes_each_result_in_order(
    flaky: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "t0k")
    url = f"http://127.0.0.1:{flaky.server_address[1]}/hooks/alerts?src=edge"
    spec = sinks.webhook(url, token_env="HOOK_TOKEN", headers={"X-Site": "yard-1"})
    queue = Actuators(tmp_path / "actuators.db", delays=(0.05, 0.1, 0.2))
    try:
        results = [{"truck": "t7", "alarm": i} for i in range(5)]
        for r in results:
            queue.put("yard/alerts", spec, r)
        await poll(lambda: flaky.taken == results, 60, "every result taken")
        assert queue.pending() == 0
        assert queue.written == 5
        assert queue.refused == 0
        assert [s for s, _, _ in flaky.seen] == [503, 503, 500, 429, 200, 200, 200, 200, 200]
        assert [b for _, b, _ in flaky.seen[:5]] == [results[0]] * 5  # the first result, until it was taken
        assert {a for _, _, a in flaky.seen} == {"Bearer t0k"}
    finally:
        queue.close()


async def test_a_webhook_drops_what_the_receiver_refuses_and_keeps_the_newest_per_key(tmp_path: Path) -> None:
    with receiver([400]) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        queue = Actuators(tmp_path / "actuators.db", delays=(0.05,))
        try:
            queue.put("yard/hook", sinks.webhook(url), {"n": 1})
            queue.put("yard/hook", sinks.webhook(url), {"n": 2})
            await poll(lambda: queue.pending() == 0, 60, "the queue written")
            assert server.taken == [{"n": 2}]
            assert queue.refused == 1
            assert queue.written == 1
        finally:
            queue.close()
    down = Actuators(tmp_path / "down.db", delays=(30.0,))
    try:
        spec = sinks.webhook("http://127.0.0.1:9/hook", key="truck", last_value_wins=True)
        for i in range(3):
            down.put("yard/hook", spec, {"truck": "t7", "n": i})
        down.put("yard/hook", spec, {"truck": "t8", "n": 0})
        assert down.pending() == 2  # only the newest result of each truck waits
    finally:
        down.close()


def test_a_webhook_spec_refuses_what_cannot_work() -> None:
    with pytest.raises(InvalidDataflow, match="must start with http:// or https://"):
        sinks.webhook("modbus://10.0.0.7:502")
    with pytest.raises(InvalidDataflow, match="needs key="):
        sinks.webhook("http://h/x", last_value_wins=True)
    with pytest.raises(InvalidDataflow, match="not the name of an environment variable"):
        sinks.webhook("http://h/x", token_env="a b")
    assert sinks.webhook("https://h/x").scheme == "https"
