"""The waits before a failed hub query restarts."""

from __future__ import annotations

from hub.engine import RESTART_DELAYS_S, _Restarts


def test_waits_grow_with_consecutive_failures_and_stay_at_the_last() -> None:
    waits = []
    for consecutive in range(len(RESTART_DELAYS_S) + 2):
        r = _Restarts(consecutive=consecutive, failed_at=100.0)
        wait = next(d for d in (0.5 * i for i in range(400)) if r.due(100.0 + d))
        waits.append(wait)
    assert waits == [*RESTART_DELAYS_S, RESTART_DELAYS_S[-1], RESTART_DELAYS_S[-1]]


def test_a_running_query_is_never_due() -> None:
    assert not _Restarts(total=3, consecutive=2).due(1e9)
