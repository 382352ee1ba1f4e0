"""The bookkeeping of the REST API's client limits: shares per address and in total, and throttled warnings."""

from __future__ import annotations

import logging

import pytest

from hub.api.serving.limits import Admission, ClientLimits, Notices


def test_an_address_gets_its_share_and_all_together_the_total() -> None:
    admission = Admission(ClientLimits(per_client=2, total=3))
    assert [admission.admit("10.0.0.1") for _ in range(3)] == [None, None, 429]
    assert admission.admit("10.0.0.2") is None
    assert admission.admit("10.0.0.3") == 503  # the total is reached before its own share
    admission.release("10.0.0.1")
    assert admission.admit("10.0.0.3") is None
    assert (admission.total, dict(admission.open)) == (3, {"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 1})
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        admission.release(address)
    assert (admission.total, dict(admission.open)) == (0, {})


@pytest.mark.parametrize("bad", [{"header_s": 0}, {"body_s": -1}, {"per_client": 0}, {"total": 0}])
def test_a_limit_that_would_refuse_everything_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="client limits must be positive"):
        ClientLimits(**bad)  # type: ignore[arg-type]


def test_warnings_of_a_kind_come_at_most_once_a_minute_with_how_many_were_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    notices = Notices(every_s=60, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="hub.api.serving")
    for second in range(0, 130, 10):
        now[0] = float(second)
        notices.warn("headers", "dropped %s", f"client {second}")
    notices.warn("body", "dropped %s", "another kind")
    assert [r.getMessage() for r in caplog.records] == [
        "dropped client 0",
        "dropped client 60 (and 5 more like it in the 60 s before)",
        "dropped client 120 (and 5 more like it in the 60 s before)",
        "dropped another kind",
    ]
