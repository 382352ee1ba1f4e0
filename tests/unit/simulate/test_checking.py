"""Result checking: partial windows are compared value by value, the reference from what was sent, sink tiers."""

from __future__ import annotations

from typing import Any

import pytest

from simulate.checking import Reference, check_sink, check_sinks, site_counts, source_time_field
from simulate.reference import Item, evaluate
from simulate.results import Collector, Result, mqtt_sinks
from simulate.sensors import Message, Sent
from spanedge import App, agg, sinks
from spanedge.aggregations import Aggregator
from spanedge.loader import load_app
from spanedge.runtime.operators import WINDOW_TIME_OFFSET
from tests.conftest import EXAMPLES

APP = load_app(EXAMPLES / "cold_chain" / "app.py")
T0 = 1_700_000_000.0


def _reading(unit: str, t: float, temp_f: float) -> Item:
    return Item("truck-7", t, {"unit": unit, "ts": t, "temp_f": temp_f, "door_open": False})


def _stats() -> tuple[list[Item], Any]:
    items = [_reading("u1", T0 + i, 41.0 + i % 3) for i in range(20)]
    expected = evaluate(APP, {"readings": items})
    return expected.sinks["local_stats"], expected.windowed["local_stats"]


def _check(received: list[dict[str, Any]]) -> Any:
    want, window = _stats()
    results = [Result("local_stats", "truck-7", v, v["window_end"] + 1.0) for v in received]
    check, _ = check_sink("local_stats", "local", results, want, window, cutoff=T0 + 30)
    return check


def test_a_partial_window_with_wrong_values_is_wrong_and_short() -> None:
    want, _ = _stats()
    first, second = (dict(i.value) for i in want)
    first["n"] -= 3  # three records short, and its mean and max are those of the seven it saw
    first["mean_c"] += 0.4
    first["max_c"] -= 1.0
    check = _check([first, second])
    assert (check.checked, check.missing, check.wrong) == (2, 0, 1)
    assert (check.lost_records, check.extra_records) == (3, 0)
    (example,) = check.examples
    assert example.startswith(f"('u1', {T0}): 7 records, want 10; wrong: got {{")


def test_a_window_with_extra_records_and_wrong_values_is_wrong_and_long() -> None:
    want, _ = _stats()
    first, second = (dict(i.value) for i in want)
    second["n"] += 2
    second["mean_c"] -= 1.0
    check = _check([first, second])
    assert (check.wrong, check.lost_records, check.extra_records) == (1, 0, 2)


def test_a_partial_window_is_wrong_even_when_its_other_values_match() -> None:
    want, _ = _stats()
    first, second = (dict(i.value) for i in want)
    first["n"] -= 1
    check = _check([first, second])
    assert (check.checked, check.missing, check.wrong) == (2, 0, 1)
    assert (check.lost_records, check.extra_records) == (1, 0)
    (example,) = check.examples
    assert example.startswith(f"('u1', {T0}): 9 records, want 10; wrong: got {{")


def test_a_window_with_extra_records_alone_is_wrong_and_long() -> None:
    want, _ = _stats()
    first, second = (dict(i.value) for i in want)
    second["n"] += 1
    check = _check([first, second])
    assert (check.wrong, check.lost_records, check.extra_records) == (1, 0, 1)


def test_a_missing_window_is_lost_not_wrong_and_a_right_one_is_neither() -> None:
    want, _ = _stats()
    first, _second = (dict(i.value) for i in want)
    check = _check([first])
    assert (check.checked, check.missing, check.wrong, check.lost_records) == (2, 1, 0, 10)
    check = _check([dict(i.value) for i in want])
    assert (check.missing, check.wrong, check.lost_records, check.extra_records) == (0, 0, 0, 0)
    assert check.examples == []


def test_values_are_compared_in_windows_without_a_count() -> None:
    app = App("no-count")
    app.source("readings", time_field="ts").window(
        name="w", key="unit", size="10s", aggs={"top": agg.max("v")}, scope="local"
    ).sink(sinks.mqtt("out"), name="out")
    items = [Item("a", T0 + i, {"unit": "u", "ts": T0 + i, "v": float(i)}) for i in range(10)]
    expected = evaluate(app, {"readings": items})
    (value,) = (dict(i.value) for i in expected.sinks["out"])
    value["top"] = 3.0
    got = [Result("out", "a", value, T0 + 11)]
    check, _ = check_sink("out", "local", got, expected.sinks["out"], expected.windowed["out"], cutoff=T0 + 20)
    assert (check.wrong, check.lost_records, check.missing) == (1, 0, 0)


def _sent(site: str, t: float, value: dict[str, Any] | None, malformed: str | None = None) -> Sent:
    message = Message(
        site, "readings", 0, 0, "u1", "trucks/7/u1/temp", 0.0, None if malformed else t, value, b"", malformed
    )
    return Sent(message, t)


def test_the_reference_of_what_was_sent_and_its_cutoff() -> None:
    sent = [_sent("truck-7", T0 + i, {"unit": "u1", "ts": T0 + i, "temp_f": 41.0}) for i in range(25)]
    sent.append(_sent("truck-7", T0 + 3, None, malformed="not-json"))
    sent.append(_sent("truck-9", T0 + 12, {"unit": "u9", "ts": T0 + 12, "temp_f": 41.0}))
    reference = Reference.of(APP, sent, settle=2.0, t0=T0)
    assert reference.cutoff == T0 + 12 - 2.0  # the site that got least far decides
    assert {k: (c.sent, c.malformed) for k, c in reference.streams.items()} == {
        ("readings", "truck-7"): (26, 1),
        ("readings", "truck-9"): (1, 0),
    }
    windows = [r for r in reference.expected.sinks["local_stats"] if r.value["window_end"] <= reference.cutoff]
    assert len(windows) == 1  # u1's first window; the others end after the cutoff
    assert reference.missing([]) == 1
    got = [Result("local_stats", "truck-7", windows[0].value, T0 + 11)]
    assert reference.missing(got) == 0


def test_every_sink_is_checked_with_its_tier() -> None:
    sent = [_sent("truck-7", T0 + i, {"unit": "u1", "ts": T0 + i, "temp_f": 41.0}) for i in range(25)]
    reference = Reference.of(APP, sent, settle=0.0, t0=T0)
    checks, latencies = check_sinks(APP, reference, [], latency_from=T0)
    assert [(c.sink, c.tier, c.unchecked) for c in checks] == [
        ("local_stats", "local", None),
        ("fleet_alerts", "global", None),
    ]
    assert checks[0].missing == 2
    assert latencies == {"local_stats": [], "fleet_alerts": []}
    assert source_time_field(APP) == "ts"


def test_site_counts_put_dead_letters_next_to_the_expected_ones() -> None:
    sent = [_sent("truck-7", T0, {"unit": "u1", "ts": T0, "temp_f": "n/a"})]  # to_celsius raises
    sent.append(_sent("truck-7", T0 + 1, None, malformed="not-json"))
    reference = Reference.of(APP, sent, settle=0.0, t0=T0)
    collector = Collector("cold-chain", mqtt_sinks(APP))
    collector.on_message(
        "cloud",
        "spanedge/v1/control/truck-7/heartbeat",
        b'{"apps": ["cold-chain"], "outbox": {"records": 3}, "dlq": 2, "late": 1}',
    )
    (count,) = site_counts(collector, ["truck-7"], reference, {"truck-7": 4})
    assert (count.dead_lettered, count.expected_dead, count.late, count.backlog) == (2, 2, 1, 3)
    assert count.sensor_failures == 4


def test_the_reference_aggregates_like_the_runtime_and_dead_letters_what_it_cannot_read() -> None:
    spread = Aggregator(
        "spread", lambda: [], lambda acc, v: [*acc, v], lambda a, b: a + b, lambda acc: max(acc) - min(acc)
    )
    app = App("custom")
    app.source("readings", time_field="ts").window(
        name="w", key="unit", size="10s", aggs={"n": agg.count(), "spread": agg.custom("v", spread)}, scope="local"
    ).sink(sinks.mqtt("out"), name="out")
    items = [Item("a", T0 + i, {"unit": "u", "ts": T0 + i, "v": float(i * i)}) for i in range(4)]
    items.append(Item("a", T0 + 5, {"unit": "u", "ts": T0 + 5}))  # no 'v': the runtime's window refuses it
    items.append(Item("b", T0 + 6, {"ts": T0 + 6, "v": 1.0}))  # no key
    expected = evaluate(app, {"readings": items})
    assert [i.value for i in expected.sinks["out"]] == [
        {"unit": "u", "window_start": T0, "window_end": T0 + 10, "n": 4, "spread": 9.0}
    ]
    assert expected.errors == {"a": 1, "b": 1}


def test_results_a_map_reshaped_after_their_window_are_checked_as_records() -> None:
    farm = load_app(EXAMPLES / "smart_farm" / "app.py")
    probe = {"probe": "east/e01", "zone": "east", "moisture": 20.0, "temp_c": 14.0}
    items = [Item("field-east", T0 + i, {**probe, "ts": T0 + i}) for i in range(25)]
    expected = evaluate(farm, {"probes": items})
    assert "valve_bus" not in expected.windowed  # valve commands carry no window_start
    assert "valve_bus" in expected.reshaped
    valves = expected.sinks["valve_bus"]
    assert [i.value["open"] for i in valves] == [True, True, True]
    reference = Reference(
        expected, cutoff=T0 + 21, unwatched=frozenset({"valve_coils"})
    )  # third window: after the cutoff
    assert reference.missing([]) == 2
    got = [Result("valve_bus", "barn", i.value, T0 + 40) for i in valves]
    assert reference.missing(got[:2]) == 0
    checks, latencies = check_sinks(farm, reference, got + got[:1], latency_from=T0)
    valve = next(c for c in checks if c.sink == "valve_bus")
    assert (valve.checked, valve.missing, valve.duplicates, valve.open_at_end) == (2, 0, 1, 1)
    assert (valve.received, valve.after_cutoff) == (4, 1)  # every arrival, the one after the cutoff too
    # valve commands carry no reading time: their latency runs from their window's end, once per result
    ends = [i.value["at"] for i in valves[:2]]
    assert sorted(latencies["valve_bus"]) == pytest.approx(sorted(T0 + 40 - end + WINDOW_TIME_OFFSET for end in ends))
    assert valve.latency.p50 is not None


def test_a_value_a_dead_site_published_and_its_recovery_published_again_counts_as_repeated() -> None:
    farm = load_app(EXAMPLES / "smart_farm" / "app.py")
    probe = {"probe": "east/e01", "zone": "east", "moisture": 20.0, "temp_c": 14.0}
    items = [Item("field-east", T0 + i, {**probe, "ts": T0 + i}) for i in range(25)]
    expected = evaluate(farm, {"probes": items})
    valves = expected.sinks["valve_bus"]
    reference = Reference(expected, cutoff=T0 + 21, streams={})
    first, second = (i.value for i in valves[:2])
    # the barn published the first before it died; field-east, recomputing its part, published both
    got = [
        Result("valve_bus", "barn", first, T0 + 30),
        *(Result("valve_bus", "field-east", v, T0 + 60) for v in (first, second)),
    ]
    checks, _ = check_sinks(farm, reference, got, latency_from=T0, repeats={("barn", "field-east")})
    valve = next(c for c in checks if c.sink == "valve_bus")
    assert (valve.checked, valve.missing, valve.duplicates, valve.repeated) == (2, 0, 0, 1)
    # the same value twice from one site stays a duplicate
    checks, _ = check_sinks(farm, reference, [*got, got[2]], latency_from=T0, repeats={("barn", "field-east")})
    valve = next(c for c in checks if c.sink == "valve_bus")
    assert (valve.duplicates, valve.repeated) == (1, 1)
    checks, _ = check_sinks(farm, reference, got, latency_from=T0)
    assert next(c for c in checks if c.sink == "valve_bus").duplicates == 1
