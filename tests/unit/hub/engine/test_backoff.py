"""Reaching an external server again after failures, with growing waits, until it answers or the query stops."""

from __future__ import annotations

import threading

import pytest

from hub.engine.connectors.backoff import Reconnects, SinkStopped


class Flaky:
    """Fails ``failures`` times with ConnectionError, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            msg = f"refused #{self.calls}\ndetail"
            raise ConnectionError(msg)
        return "answer"


def test_retries_until_the_server_answers_counting_failures() -> None:
    waits: list[float] = []
    retry = Reconnects("sink 'db'", delays=(0.5, 1.0, 2.0))
    retry._stop.wait = lambda delay: waits.append(delay) or False  # type: ignore[method-assign]  # no real waits
    assert retry.up is None
    assert retry.call(Flaky(4), (ConnectionError,)) == "answer"
    assert waits == [0.5, 1.0, 2.0, 2.0]  # the last wait repeats
    assert (retry.up, retry.failures, retry.error) == (True, 4, None)


def test_the_state_while_unreachable_says_so() -> None:
    retry = Reconnects("sink 'db'", delays=(0.0,))
    seen: list[tuple[bool | None, int, str | None]] = []
    flaky = Flaky(2)

    def attempt() -> str:
        seen.append((retry.up, retry.failures, retry.error))
        return flaky()

    retry.call(attempt, (ConnectionError,))
    assert seen == [(None, 0, None), (False, 1, "refused #1"), (False, 2, "refused #2")]


def test_other_errors_are_not_retried() -> None:
    retry = Reconnects("sink 'db'", delays=(0.0,))

    def broken() -> None:
        msg = "no such table"
        raise LookupError(msg)

    with pytest.raises(LookupError):
        retry.call(broken, (ConnectionError,))
    assert retry.failures == 0


def test_stop_ends_the_wait_for_a_server_that_never_answers() -> None:
    retry = Reconnects("sink 'db'", delays=(3600.0,))
    failed = threading.Event()

    def never() -> None:
        failed.set()
        msg = "refused"
        raise ConnectionError(msg)

    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            retry.call(never, (ConnectionError,))
        except SinkStopped as exc:
            outcome.append(exc)

    worker = threading.Thread(target=wait)
    worker.start()
    assert failed.wait(30)
    retry.stop()
    worker.join(30)
    assert not worker.is_alive()
    assert "the query stopped before the server answered (refused)" in str(outcome[0])
