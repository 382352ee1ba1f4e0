"""Waiting for the results after the sensors stop: empty outboxes, every checkable result, then quiet."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from simulate.results import Collector


def settled(collector: Collector, spokes: Sequence[str], sensors_done: float, quiet: float, now: float) -> bool:
    """True when every spoke sent a heartbeat after ``sensors_done`` with an empty outbox and no result came for ``quiet`` s."""
    fresh = all(collector.heartbeat_times.get(s, 0) > sensors_done for s in spokes)
    empty = all((collector.backlog(s) or 0) == 0 for s in spokes)
    last = collector.results[-1].received_at if collector.results else 0.0
    return fresh and empty and now - last > quiet


async def wait_drained(
    collector: Collector,
    spokes: Sequence[str],
    missing: Callable[[], int],
    sensors_done: float,
    timeout: float,
    quiet: float,
    on_phase: Callable[[str], None] = lambda _: None,
) -> bool:
    """Wait until :func:`settled` and ``missing()`` (checkable results yet to come) is 0; False after ``timeout`` s.

    ``missing`` is called at most once a second; ``on_phase`` hears how many results are still to come.
    """
    on_phase("draining")
    deadline = time.monotonic() + timeout
    left = missing()
    checked_at = time.monotonic()
    while time.monotonic() < deadline:
        if left and time.monotonic() - checked_at > 1.0:
            left, checked_at = missing(), time.monotonic()
        if not left and settled(collector, spokes, sensors_done, quiet, time.time()):
            return True
        on_phase(f"draining: {left} results to come")
        await asyncio.sleep(0.5)
    return False


def drain_problems(
    collector: Collector, spokes: Sequence[str], sensors_done: float, timeout: float, began: float
) -> list[str]:
    """Why a run did not drain: agents silent since the sensors stopped, outboxes not empty."""
    problems = []
    for site in spokes:
        if collector.heartbeat_times.get(site, 0) <= sensors_done:
            ago = time.time() - collector.heartbeat_times.get(site, began)
            problems.append(f"agent {site}: no heartbeat for {ago:.0f}s (hung or cut off); see its log")
    for site in spokes:
        backlog = collector.backlog(site) or 0
        if backlog > 0:
            problems.append(f"agent {site}: outbox backlog {backlog} at the end")
    problems.append(
        f"not drained within {timeout:.0f}s (backlog or results still moving): missing results may only be late"
    )
    return problems
