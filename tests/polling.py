"""Waiting in tests: poll a condition until it holds, or fail saying what was awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(
    condition: Callable[[], Any], timeout: float = 20.0, what: str | Callable[[], str] = "condition", poll: float = 0.05
) -> Any:
    """Poll ``condition`` until it returns something truthy and return that; fail after ``timeout`` seconds.

    ``what`` names what was awaited; a callable is asked at the failure, so that it can show logs as they are then.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(poll)


async def poll(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """:func:`wait_for` for async tests: sleeps on the event loop between checks."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
