"""The one-line reason of a re-plan: bounded, whatever the number of changes."""

from __future__ import annotations

from hub.control.replanning import reason_text


def test_a_few_reasons_are_all_named_once() -> None:
    assert reason_text(["site a joined", "latency hub–a 10→30 ms", "site a joined"]) == (
        "site a joined; latency hub–a 10→30 ms"
    )


def test_a_fleet_wide_change_names_the_first_and_counts_the_rest() -> None:
    reasons = [f"latency cloud–site-{i} 40→120 ms (+200%)" for i in range(1000)]
    text = reason_text(reasons, most=3)
    assert text == (
        "latency cloud–site-0 40→120 ms (+200%); latency cloud–site-1 40→120 ms (+200%); "
        "latency cloud–site-2 40→120 ms (+200%); and 997 more"
    )
    assert len(reason_text(reasons)) < 600
