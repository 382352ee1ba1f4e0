"""When a standby tries the lease again: at its poll, or just after the lease expires if that is sooner."""

from __future__ import annotations

import pytest

from hub.ha.node import EXPIRY_SLACK_S, next_try_s


@pytest.mark.parametrize(
    ("remaining", "expected"),
    [
        (None, 1.0),  # the lease is unknown (never held, or the database out of reach): the poll
        (7.5, 1.0),  # a live lease that outlasts the poll
        (0.3, 0.3 + EXPIRY_SLACK_S),  # expires before the next poll: just after it expires
        (-2.0, EXPIRY_SLACK_S),  # already expired (another standby may hold it by now): at once
    ],
)
def test_a_standby_tries_the_lease_just_after_it_expires(remaining: float | None, expected: float) -> None:
    assert next_try_s(remaining, 1.0) == pytest.approx(expected)
