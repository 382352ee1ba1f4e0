"""Gates: their grammar, what each metric measures over a hold window, and the verdict on a stage."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub.control.rollout.gates import GRAMMAR, Gate, GateResult, evaluate, format_gates, parse_gates
from hub.control.rollout.metrics import METRICS, Beat, Context, increase
from spanedge.errors import InvalidRollout
from spanedge.wire.heartbeat import COUNTERS, Heartbeat

CONTEXT = Context("cold-chain", frozenset({"readings"}), {"truck-1": 1.0, "truck-2": 0.5})


def beats(site: str, *rows: dict[str, Any], start: float = 0.0, every: float = 5.0, older: bool = False) -> list[Beat]:
    """Heartbeats of ``site`` every ``every`` s; ``taken`` is the source's ``in`` count.

    ``dlq``, ``late`` and ``errors`` are the app's own counters, as an agent reports them; ``older``: ``dlq``
    and ``late`` are the site's alone, as an agent older than per-app counters reports them.
    """
    out = []
    for i, row in enumerate(rows):
        fields = dict(row)
        taken = fields.pop("taken", None)
        if taken is not None:
            fields["operators"] = {f"readings@{site}": {"in": taken, "out": taken}}
        if not older:
            own = {c: fields.pop(c) for c in COUNTERS if c in fields}
            if own:
                fields["counters"] = {CONTEXT.app: own}
        out.append(Beat(site, start + i * every, Heartbeat(site=site, **fields)))
    return out


def test_the_issue_s_gates_parse() -> None:
    assert parse_gates("dead_letter_rate<0.01, cpu<0.8, watermark_lag<5s") == (
        Gate("dead_letter_rate", 0.01, text="0.01"),
        Gate("cpu", 0.8, text="0.8"),
        Gate("watermark_lag", 5.0, text="5s"),
    )


@pytest.mark.parametrize(
    ("text", "gate"),
    [
        ("dead_letter_rate < 1%", Gate("dead_letter_rate", 0.01, text="1%")),
        ("late_rate<=0.5%", Gate("late_rate", 0.005, inclusive=True, text="0.5%")),
        ("cpu<80%", Gate("cpu", 0.8, text="80%")),
        ("rss<200MB", Gate("rss", 200e6, text="200MB")),
        ("rss<1.5GiB", Gate("rss", 1.5 * 2**30, text="1.5GiB")),
        ("rss<4096", Gate("rss", 4096.0, text="4096")),
        ("outbox_backlog<1000", Gate("outbox_backlog", 1000.0, text="1000")),
        ("watermark_lag<500ms", Gate("watermark_lag", 0.5, text="500ms")),
        ("watermark_lag<2m", Gate("watermark_lag", 120.0, text="2m")),
        ("errors<5", Gate("errors", 5.0, text="5")),
        ("errors<=0.5/min", Gate("errors", 0.5, inclusive=True, text="0.5/min")),
        ("hub_errors<5", Gate("hub_errors", 5.0, text="5")),
        ("hub_errors<=1/min", Gate("hub_errors", 1.0, inclusive=True, text="1/min")),
    ],
)
def test_each_metric_takes_its_limit_in_its_unit(text: str, gate: Gate) -> None:
    assert parse_gates(text) == (gate,)


def test_no_gate_at_all_is_allowed() -> None:
    assert parse_gates("  ") == ()


@pytest.mark.parametrize(
    ("text", "part", "why"),
    [
        ("cpu>0.8", "gate 1 'cpu>0.8'", "a gate is an upper limit, written cpu<LIMIT or cpu<=LIMIT"),
        ("cpu=0.8", "gate 1 'cpu=0.8'", "a gate is an upper limit"),
        ("cpu", "gate 1 'cpu'", "is not METRIC<LIMIT"),
        ("cpu<0.8,", "gate 2 ''", "is empty"),
        ("crashes<3", "gate 1 'crashes<3'", "names no metric"),
        ("errors<lots", "gate 1 'errors<lots'", "a number per minute such as 5 or 5/min"),
        ("cpu<0.8, cpu<0.9", "gate 2 'cpu<0.9'", "repeats metric cpu"),
        ("cpu<fast", "gate 1 'cpu<fast'", "a fraction such as 0.01 or a percentage such as 1%"),
        ("cpu<-1", "gate 1 'cpu<-1'", "a fraction such as 0.01"),
        ("rss<12 parsecs", "gate 1 'rss<12 parsecs'", "a size such as 200MB"),
        ("watermark_lag<soon", "gate 1 'watermark_lag<soon'", "a duration such as '10s'"),
        ("outbox_backlog<many", "gate 1 'outbox_backlog<many'", "a number of records"),
    ],
)
def test_a_malformed_gate_is_named_with_the_grammar(text: str, part: str, why: str) -> None:
    with pytest.raises(InvalidRollout) as info:
        parse_gates(text, where="--gate")
    message = str(info.value)
    assert message.startswith(f"--gate {text!r}: {part}")
    assert why in message
    assert GRAMMAR in message
    assert all(name in GRAMMAR for name in METRICS)


@given(st.lists(st.tuples(st.sampled_from(sorted(METRICS)), st.booleans()), unique_by=lambda g: g[0], max_size=6))
def test_what_format_writes_parse_reads_back(spec: list[tuple[str, bool]]) -> None:
    defaults = {"dead_letter_rate": "1%", "late_rate": "0.02", "cpu": "80%", "rss": "1GiB"}
    defaults |= {"outbox_backlog": "500", "watermark_lag": "5s", "errors": "5/min", "hub_errors": "1"}
    gates = parse_gates(", ".join(f"{m}{'<=' if inc else '<'}{defaults[m]}" for m, inc in spec))
    assert parse_gates(format_gates(gates)) == gates


# -- counters ------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 10**6), min_size=1))
def test_a_counter_that_only_grows_increases_by_last_minus_first(steps: list[int]) -> None:
    values = [float(sum(steps[: i + 1])) for i in range(len(steps))]
    assert increase(values) == values[-1] - values[0]


def test_a_counter_that_restarts_counts_from_zero_again() -> None:
    assert increase([100.0, 130.0, 5.0, 20.0]) == 30 + 5 + 15


# -- the metrics over a window -------------------------------------------------------------


def only(gate: str, sites_beats: list[Beat], sites: tuple[str, ...] = ("truck-1",)) -> GateResult:
    verdict = evaluate(parse_gates(gate), sites_beats, sites, 0.0, 1000.0, CONTEXT)
    return verdict.gates[0]


def test_a_rate_divides_the_increases_over_the_window_not_one_beat_s_totals() -> None:
    # 5000 dead letters before the window (v1's), none in it
    window = beats(
        "truck-1", {"dlq": 5000, "taken": 10_000}, {"dlq": 5000, "taken": 10_500}, {"dlq": 5000, "taken": 11_000}
    )
    result = only("dead_letter_rate<0.01", window)
    assert (result.value, result.passed) == (0.0, True)
    window = beats("truck-1", {"dlq": 0, "taken": 0}, {"dlq": 10, "taken": 500}, {"dlq": 30, "taken": 1000})
    result = only("dead_letter_rate<0.01", window)
    assert (result.value, result.passed, result.site, result.failed) == (0.03, False, "truck-1", ("truck-1",))


def test_a_rate_over_an_agent_restart_counts_both_runs() -> None:
    window = beats("truck-1", {"late": 40, "taken": 1000}, {"late": 50, "taken": 2000}, {"late": 10, "taken": 500})
    assert only("late_rate<0.1", window).value == pytest.approx((10 + 10) / (1000 + 500))


def test_a_rate_needs_two_heartbeats() -> None:
    result = only("dead_letter_rate<0.01", beats("truck-1", {"dlq": 0, "taken": 100}))
    assert (result.value, result.passed) == (None, False)
    assert result.note == "one heartbeat in the window: no counter increase to divide"


def test_a_rate_without_records_taken_in_is_zero_unless_there_were_dead_letters() -> None:
    idle = beats("truck-1", {"dlq": 3, "taken": 100}, {"dlq": 3, "taken": 100})
    result = only("dead_letter_rate<0.01", idle)
    assert (result.value, result.passed, result.note) == (0.0, True, "no record taken in")
    odd = beats("truck-1", {"dlq": 3, "taken": 100}, {"dlq": 9, "taken": 100})
    result = only("dead_letter_rate<0.01", odd)
    assert (result.value, result.passed, result.note) == (None, False, "6 dead letters but no record taken in")


def test_a_site_running_several_apps_counts_this_app_s_sources() -> None:
    ops = [
        {"cold-chain/readings@truck-1": {"in": 0}, "other/readings@truck-1": {"in": 0}},
        {"cold-chain/readings@truck-1": {"in": 100}, "other/readings@truck-1": {"in": 900}},
    ]
    window = [Beat("truck-1", 5.0 * i, Heartbeat(site="truck-1", dlq=i, operators=o)) for i, o in enumerate(ops)]
    assert only("dead_letter_rate<0.5", window).value == pytest.approx(0.01)


def test_the_dead_letter_rate_counts_the_app_s_own_dead_letters_not_the_site_s() -> None:
    other = {"other": {"dlq": 0, "late": 0, "errors": 0}}
    window = []
    for i in range(3):  # the site dead-letters 500 of another app's records per beat, none of this app's
        counters = {CONTEXT.app: {"dlq": 1, "late": 0, "errors": 0}, "other": {"dlq": 500 * i}} | ({} if i else other)
        ops = {"cold-chain/readings@truck-1": {"in": 100 * i}, "other/readings@truck-1": {"in": 500 * i}}
        beat = Heartbeat(site="truck-1", dlq=1 + 500 * i, counters=counters, operators=ops)
        window.append(Beat("truck-1", 5.0 * i, beat))
    result = only("dead_letter_rate<0.01", window)
    assert (result.value, result.passed, result.note) == (0.0, True, "")


def test_an_older_agent_s_site_wide_counters_stand_in_with_a_note() -> None:
    window = beats("truck-1", {"dlq": 0, "taken": 0}, {"dlq": 30, "taken": 1000}, older=True)
    result = only("dead_letter_rate<0.01", window)
    assert (result.value, result.passed) == (0.03, False)
    assert result.note == "every app's at the site: the agent counts none per app"
    assert result.describe() == (
        "dead_letter_rate 3% at truck-1 (limit < 1%, every app's at the site: the agent counts none per app)"
    )
    late = beats("truck-1", {"late": 0, "taken": 0}, {"late": 0, "taken": 0}, older=True)
    assert (
        only("late_rate<0.01", late).note
        == "no record taken in; every app's at the site: the agent counts none per app"
    )


def test_errors_are_the_app_s_operator_errors_per_minute_on_the_hub_s_clock() -> None:
    # 10 more errors every 5 s: 120 a minute, the agent's clock and the other apps left out
    window = beats("truck-1", *({"errors": 10 * i, "ts": 99.0} for i in range(4)))
    result = only("errors<5", window)
    assert (result.value, result.passed, result.site) == (pytest.approx(120.0), False, "truck-1")
    assert result.describe() == "errors 120/min at truck-1 (limit < 5/min)"
    quiet = beats("truck-1", {"errors": 7}, {"errors": 7}, {"errors": 7})
    assert (only("errors<5", quiet).value, only("errors<5", quiet).passed) == (0.0, True)
    assert only("errors<=0", quiet).passed
    restarted = beats("truck-1", {"errors": 40}, {"errors": 41}, {"errors": 1}, every=30.0)  # the agent restarted
    assert only("errors<5", restarted).value == pytest.approx(2 / 1.0)


def test_errors_need_two_heartbeats_that_count_the_app() -> None:
    one = only("errors<5", beats("truck-1", {"errors": 3}))
    assert (one.value, one.passed) == (None, False)
    assert one.note == "one heartbeat in the window: no counter increase per minute"
    older = only("errors<5", beats("truck-1", {"dlq": 3}, {"dlq": 9}, older=True))
    assert (older.value, older.passed) == (None, False)
    assert older.note == (
        "no heartbeat counting app 'cold-chain''s 'errors' in the window: no counter increase per minute"
        " (an agent older than the hub counts none; upgrade it or drop the gate)"
    )


def test_a_version_whose_operator_raises_fails_its_canary_on_errors_alone() -> None:
    canary = beats("truck-1", *({"errors": 20 * i, "dlq": 20 * i, "taken": 20 * i} for i in range(3)))
    steady = beats("truck-2", *({"errors": 3, "dlq": 3, "taken": 20 * i} for i in range(3)))
    verdict = evaluate(parse_gates("errors<1, cpu<0.8"), canary + steady, ("truck-1", "truck-2"), 0, 60, CONTEXT)
    assert not verdict.passed
    errors, cpu = verdict.gates
    assert (errors.site, errors.failed, errors.value) == ("truck-1", ("truck-1",), pytest.approx(240.0))
    assert (cpu.passed, cpu.note) == (True, "not reported")
    assert verdict.reason == "failed: errors 240/min at truck-1 (limit < 1/min)"


def test_cpu_is_the_mean_share_of_the_budget_reported_else_declared() -> None:
    declared = beats("truck-2", {"cpu_percent": 20.0}, {"cpu_percent": 40.0})  # declared 0.5 cores
    assert only("cpu<0.8", declared, ("truck-2",)).value == pytest.approx(0.6)
    reported = beats("truck-2", {"cpu_percent": 20.0, "cpu_budget": 0.25}, {"cpu_percent": 20.0, "cpu_budget": 0.25})
    result = only("cpu<0.8", reported, ("truck-2",))
    assert (result.value, result.passed) == (pytest.approx(0.8), False)
    assert only("cpu<=0.8", reported, ("truck-2",)).passed


def test_gauges_take_the_largest_value_of_the_window() -> None:
    window = beats(
        "truck-1",
        {"rss_bytes": 100_000_000, "outbox": {"records": 10}, "watermark_lag_s": 1.0},
        {"rss_bytes": 300_000_000, "outbox": {"records": 2000}, "watermark_lag_s": 7.5},
        {"rss_bytes": 150_000_000, "outbox": {"records": 0}, "watermark_lag_s": 0.5},
    )
    assert only("rss<200MB", window).value == 300e6
    assert only("outbox_backlog<1000", window).value == 2000
    assert only("watermark_lag<5s", window).value == 7.5


def test_a_gauge_no_heartbeat_reports_passes_with_a_note() -> None:
    result = only("watermark_lag<5s", beats("truck-1", {"dlq": 0}, {"dlq": 0}))
    assert (result.value, result.passed, result.note) == (None, True, "not reported")


# -- the verdict ---------------------------------------------------------------------------


def test_the_verdict_names_the_worst_site_and_every_one_that_failed() -> None:
    window = [
        *beats("truck-1", {"cpu_percent": 90.0}, {"cpu_percent": 90.0}),
        *beats("truck-2", {"cpu_percent": 45.0}, {"cpu_percent": 45.0}),  # 0.9 of its 0.5 cores
        *beats("truck-3", {"cpu_percent": 30.0}, {"cpu_percent": 30.0}),
    ]
    verdict = evaluate(parse_gates("cpu<0.8"), window, ("truck-1", "truck-2", "truck-3"), 0, 60, CONTEXT)
    assert not verdict.passed
    (result,) = verdict.gates
    assert (result.site, result.failed, result.value) == ("truck-1", ("truck-1", "truck-2"), pytest.approx(0.9))
    assert verdict.reason == "failed: cpu 90% of the CPU budget at truck-1 and 1 other site (limit < 80%)"


def test_a_passing_verdict_shows_the_highest_values() -> None:
    window = [*beats("truck-1", {"cpu_percent": 10.0}), *beats("truck-3", {"cpu_percent": 30.0})]
    verdict = evaluate(parse_gates("cpu<0.8"), window, ("truck-1", "truck-3"), 0, 60, CONTEXT)
    assert verdict.passed
    assert verdict.reason == "passed: cpu 30% of the CPU budget at truck-3 (limit < 80%)"


def test_a_site_silent_in_the_window_fails_the_stage_and_is_named() -> None:
    window = [
        *beats("truck-1", {"cpu_percent": 10.0}, {"cpu_percent": 10.0}),
        *beats("truck-2", {"cpu_percent": 10.0}, start=200.0),  # after the window
        *beats("truck-9", {"cpu_percent": 10.0}),  # not a site of the stage
    ]
    verdict = evaluate(parse_gates("cpu<0.8"), window, ("truck-1", "truck-2"), 0, 120, CONTEXT)
    assert not verdict.passed
    assert verdict.silent == ("truck-2",)
    assert verdict.gates[0].passed
    assert verdict.reason == "failed: truck-2 sent no heartbeat in the 120 s window"


def test_without_gates_a_stage_checks_only_that_its_sites_are_heard() -> None:
    verdict = evaluate((), beats("truck-1", {}), ("truck-1",), 0, 60, CONTEXT)
    assert (verdict.passed, verdict.reason) == (True, "passed: every site sent heartbeats (no gate)")
    verdict = evaluate(parse_gates("cpu<0.8"), [], ("truck-1",), 0, 60, CONTEXT)
    assert not verdict.passed
    assert verdict.gates[0] == GateResult("cpu<0.8", None, 0.8, False, note="no site sent a heartbeat")


def test_only_the_window_s_heartbeats_count_in_arrival_order() -> None:
    early = beats("truck-1", {"dlq": 0, "taken": 0}, start=-10.0)
    window = beats("truck-1", {"dlq": 100, "taken": 1000}, {"dlq": 100, "taken": 2000}, start=10.0)
    result = only("dead_letter_rate<0.01", list(reversed(early + window)))
    assert result.value == 0.0


@given(st.floats(0, 1e9, allow_nan=False), st.booleans(), st.text(max_size=20), st.lists(st.text(max_size=5)))
def test_a_gate_result_survives_json(value: float, passed: bool, note: str, failed: list[str]) -> None:
    result = GateResult("cpu<0.8", value, 0.8, passed, "truck-1", tuple(failed), note)
    assert GateResult.from_dict(result.to_dict()) == result
