"""``spanedge preview``: the bundled examples over small files of records, checked against values worked out by hand."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from spanedge.cli import cli
from tests.conftest import EXAMPLES, ROOT

COLD_CHAIN = EXAMPLES / "cold_chain" / "app.py"
SMART_FARM = EXAMPLES / "smart_farm" / "app.py"


def run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["preview", *map(str, args)])
    return result.exit_code, result.output


def preview_json(app: Path, lines: list[dict[str, Any]], tmp: Path, *args: str | Path) -> dict[str, Any]:
    records = tmp / "records.jsonl"
    records.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out = run(app, "--input", records, "--json", *args)
    assert code == 0, out
    doc: dict[str, Any] = json.loads(out)
    return doc


def by_name(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return {item["name"]: item for item in doc[key]}


def values(doc: dict[str, Any], sink: str) -> list[Any]:
    return [r["value"] for r in by_name(doc, "sinks")[sink]["results"]]


def reading(unit: str, ts: float, temp_f: float | None = None) -> dict[str, Any]:
    return {"unit": unit, "ts": ts} if temp_f is None else {"unit": unit, "ts": ts, "temp_f": temp_f}


#: u1: 41, 50 and 59 °F (5, 10 and 15 °C) in the 10 s window from 0, 32 °F (0 °C) in the next; u2: 35.6 °F (2 °C).
#: One reading has no temperature (a dead letter of to_celsius), one is 500 °F (dropped by plausible).
COLD_READINGS = [
    reading("u1", 0.0, 41.0),
    reading("u1", 3.0, 50.0),
    reading("u2", 4.0, 35.6),
    reading("u1", 7.0, 59.0),
    reading("u1", 8.0),
    reading("u2", 9.0, 500.0),
    reading("u1", 12.0, 32.0),
]


def test_the_cold_chain_counts_and_means_per_10s_window_and_alerts_at_the_hub(tmp_path: Path) -> None:
    doc = preview_json(COLD_CHAIN, COLD_READINGS, tmp_path)
    assert doc["records"] == 7
    assert doc["sites"] == ["edge"]
    assert values(doc, "local_stats") == [
        {"unit": "u1", "window_start": 0.0, "window_end": 10.0, "n": 3, "mean_c": 10.0, "max_c": 15.0},
        {"unit": "u2", "window_start": 0.0, "window_end": 10.0, "n": 1, "mean_c": 2.0, "max_c": 2.0},
        {"unit": "u1", "window_start": 10.0, "window_end": 20.0, "n": 1, "mean_c": 0.0, "max_c": 0.0},
    ]
    # a mean of 10 °C is outside 0..8 °C: the only alert, computed at the hub
    assert values(doc, "fleet_alerts") == [values(doc, "local_stats")[0]]
    ops = by_name(doc, "operators")
    counts = {name: (op["part"], op["in"], op["out"], op["dead_letters"]) for name, op in ops.items()}
    assert counts == {
        "readings": ("edge", 7, 7, 0),
        "to_celsius": ("edge", 7, 6, 1),
        "plausible": ("edge", 6, 5, 0),
        "unit_stats": ("edge", 5, 3, 0),
        "local_stats": ("edge", 3, 3, 0),
        "anomaly": ("hub", 3, 1, 0),
        "fleet_alerts": ("hub", 1, 1, 0),
    }
    (dead,) = doc["dead_letters"]
    assert dead["operator"] == "to_celsius"
    assert dead["at"] == "edge"
    assert "raised KeyError: 'temp_f'" in dead["reason"]
    assert json.loads(dead["record"]) == reading("u1", 8.0)
    assert doc["late"] == []


def test_the_text_report_shows_the_operators_and_each_sinks_table(tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in COLD_READINGS))
    code, out = run(COLD_CHAIN, "--input", records, "--site", "truck-7")
    assert code == 0, out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert lines[0] == f"app cold-chain ({COLD_CHAIN}): 7 records from {records} at 1 site (truck-7)"
    assert "to_celsius map edge 7 6 1 0" in lines
    assert "anomaly filter hub 3 1 0 -" in lines
    assert "sink local_stats (edge): 3 results" in lines
    assert "unit window_start window_end n mean_c max_c" in lines
    assert "u1 0.0 10.0 3 10.0 15.0" in lines
    assert "sink fleet_alerts (hub): 1 result" in lines
    assert "dead letters: 1" in lines


def test_a_record_behind_a_closed_window_is_late_as_at_a_site(tmp_path: Path) -> None:
    # the watermark reaches 12 - 1 s when the reading at 12 arrives: the window [0, 10) has fired
    readings = [reading("u1", 1.0, 41.0), reading("u1", 12.0, 41.0), reading("u1", 2.0, 41.0)]
    doc = preview_json(COLD_CHAIN, readings, tmp_path)
    (late,) = doc["late"]
    assert late["operator"] == "unit_stats"
    assert late["reason"].startswith("late: event time 2.0 is behind the watermark 11.0")
    assert by_name(doc, "operators")["unit_stats"]["late"] == 1
    assert [v["n"] for v in values(doc, "local_stats")] == [1, 1]
    # with a wider bound the same order is in time
    doc = preview_json(COLD_CHAIN, readings, tmp_path, "--out-of-orderness", "15")
    assert doc["late"] == []
    assert [v["n"] for v in values(doc, "local_stats")] == [2, 1]


def probe(site: str, probe_id: str, ts: float, moisture: float) -> dict[str, Any]:
    zone = probe_id.split("/")[0]
    value = {"probe": probe_id, "zone": zone, "ts": ts, "moisture": moisture, "temp_c": 20.0}
    return {"stream": "probes", "site": site, "value": value}


def test_the_smart_farms_global_window_merges_the_sites_at_the_hub(tmp_path: Path) -> None:
    lines = [
        probe("field-east", "z1/a", 5.0, 10.0),
        probe("field-east", "z1/a", 8.0, 30.0),
        probe("field-west", "z1/b", 20.0, 12.0),
        probe("field-west", "z2/c", 21.0, 14.0),
    ]
    doc = preview_json(SMART_FARM, lines, tmp_path)
    assert doc["sites"] == ["field-east", "field-west"]
    # dry_spots: the readings under 15 % per zone and 30 s, over both sites
    assert values(doc, "farm_dashboard") == [
        {"zone": "z1", "window_start": 0.0, "window_end": 30.0, "readings": 2, "driest": 10.0},
        {"zone": "z2", "window_start": 0.0, "window_end": 30.0, "readings": 1, "driest": 14.0},
    ]
    # probe_means is local: one mean per probe and site; valves opens under 25 %
    valves = [
        (r["site"], r["value"]["probe"], r["value"]["open"]) for r in by_name(doc, "sinks")["valve_bus"]["results"]
    ]
    assert valves == [("field-east", "z1/a", True), ("field-west", "z1/b", True), ("field-west", "z2/c", True)]
    ops = by_name(doc, "operators")
    assert ops["probe_means"]["part"] == "edge"
    assert (ops["probe_means"]["in"], ops["probe_means"]["out"]) == (4, 3)
    assert ops["dry_spots"]["part"] == "hub"
    assert (ops["dry_spots"]["in"], ops["dry_spots"]["out"]) == (3, 2)


SCOPES = """
from spanedge import App, agg, sinks

app = App("scopes")
readings = app.source("readings", time_field="ts")
readings.window(name="per_site", key="unit", size="10s", aggs={"n": agg.count()}, scope="local").sink(
    sinks.memory("a"), name="local_counts"
)
readings.window(name="merged", key="unit", size="10s", aggs={"n": agg.count()}).sink(
    sinks.memory("b"), name="merged_counts"
)
"""


def test_an_unscoped_window_runs_once_over_every_sites_records(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(SCOPES)
    lines = [{"site": site, "value": {"unit": "u1", "ts": ts}} for site, ts in [("a", 1.0), ("b", 2.0), ("a", 3.0)]]
    doc = preview_json(app, lines, tmp_path)
    local = [(r["site"], r["value"]["n"]) for r in by_name(doc, "sinks")["local_counts"]["results"]]
    assert local == [("a", 2), ("b", 1)]
    assert [v["n"] for v in values(doc, "merged_counts")] == [3]
    assert by_name(doc, "operators")["merged"]["part"] == "hub"


def test_compare_shows_the_alert_the_new_version_no_longer_raises(tmp_path: Path) -> None:
    v2 = tmp_path / "app_v2.py"
    v2.write_text(COLD_CHAIN.read_text().replace('stats["mean_c"] <= 8.0', 'stats["mean_c"] <= 12.0'))
    doc = preview_json(v2, COLD_READINGS, tmp_path, "--compare", COLD_CHAIN)
    assert by_name(doc["baseline"], "operators")["anomaly"]["out"] == 1
    assert by_name(doc["candidate"], "operators")["anomaly"]["out"] == 0
    (diff,) = doc["differences"]
    assert diff["sink"] == "fleet_alerts"
    assert [r["value"]["mean_c"] for r in diff["only_in_baseline"]] == [10.0]
    assert diff["only_in_candidate"] == []

    records = tmp_path / "records.jsonl"
    code, out = run(v2, "--input", records, "--compare", COLD_CHAIN)
    assert code == 0, out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "operator part out app.py out app_v2.py dead letters app.py dead letters app_v2.py" in lines
    assert "anomaly hub 1 0 0 0" in lines
    assert "sink fleet_alerts (hub): 1 result differs (1 only in app.py, 0 only in app_v2.py)" in lines
    assert "app.py u1 0.0 10.0 3 10.0 15.0" in lines
    assert "same results: local_stats (3 results)" in lines


def test_two_files_of_the_same_name_are_told_apart_by_their_paths(tmp_path: Path) -> None:
    (tmp_path / "v2").mkdir()
    v2 = tmp_path / "v2" / "app.py"
    v2.write_text(COLD_CHAIN.read_text().replace('"mean_c": agg.mean("temp_c")', '"mean_c": agg.max("temp_c")'))
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in COLD_READINGS))
    code, out = run(v2, "--input", records, "--compare", COLD_CHAIN)
    assert code == 0, out
    assert f"out {COLD_CHAIN}" in out
    assert f"out {v2}" in out
    # the mean became a max: u1's first window differs at the edge sink and at the hub's
    assert "sink local_stats (edge): 2 results differ (1 only in" in out
    assert "sink fleet_alerts (hub): 2 results differ (1 only in" in out


def test_limit_cuts_the_tables_not_the_totals(tmp_path: Path) -> None:
    readings = [reading(f"u{i}", float(i), 40.0) for i in range(5)]
    doc = preview_json(COLD_CHAIN, readings, tmp_path, "--limit", "2")
    stats = by_name(doc, "sinks")["local_stats"]
    assert stats["total"] == 5
    assert len(stats["results"]) == 2
    code, out = run(COLD_CHAIN, "--input", tmp_path / "records.jsonl", "--limit", "2")
    assert code == 0
    assert "sink local_stats (edge): 5 results, the first 2 shown" in out
    doc = preview_json(COLD_CHAIN, readings, tmp_path, "--limit", "0")
    assert len(by_name(doc, "sinks")["local_stats"]["results"]) == 5


HUB_FAILS = """
from spanedge import App, agg, global_, sinks


@global_
def ratio(stats: dict) -> dict:
    return {**stats, "ratio": stats["total"] / stats["n"] / stats["zero"]}


app = App("hub-fails")
readings = app.source("readings", time_field="ts")
(
    readings.window(name="per_unit", key="unit", size="10s", scope="local",
            aggs={"n": agg.count(), "total": agg.sum("v"), "zero": agg.min("v")})
    .map(ratio)
    .sink(sinks.memory("out"), name="ratios")
)
readings.transform(lambda df: df, name="spark_only").sink(sinks.memory("after"), name="after_spark")
"""


def test_a_hub_operator_that_fails_makes_a_dead_letter_and_a_transform_is_not_run(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(HUB_FAILS)
    lines = [{"unit": "a", "ts": 1.0, "v": 0.0}, {"unit": "b", "ts": 2.0, "v": 2.0}, {"unit": "b", "ts": 3.0, "v": 4.0}]
    doc = preview_json(app, lines, tmp_path)
    (dead,) = doc["dead_letters"]
    assert dead["operator"] == "ratio"
    assert dead["at"] == "hub"
    assert "raised ZeroDivisionError" in dead["reason"]
    assert json.loads(dead["record"])["unit"] == "a"
    assert values(doc, "ratios") == [
        {"unit": "b", "window_start": 0.0, "window_end": 10.0, "n": 2, "total": 6.0, "zero": 2.0, "ratio": 1.5}
    ]
    ops = by_name(doc, "operators")
    assert (ops["ratio"]["in"], ops["ratio"]["out"], ops["ratio"]["dead_letters"]) == (2, 1, 1)
    assert (ops["spark_only"]["in"], ops["spark_only"]["out"]) == (None, None)
    after = by_name(doc, "sinks")["after_spark"]
    assert after["results"] == []
    assert "spark_only" in after["not_evaluated"]


MULTI = """
from spanedge import App, sinks

app = App("multi")
temps = app.source("temps", time_field="ts")
doors = app.source("doors", time_field="ts")
temps.union(doors, scope="local").sink(sinks.memory("all"), name="everything")
"""


LOCAL_AFTER_MERGE = """
from spanedge import App, agg, local, sinks


@local
def tag(stats: dict) -> dict:
    return stats


app = App("local-after-merge")
merged = app.source("readings", time_field="ts").window(name="merged", key="unit", size="10s", aggs={"n": agg.count()})
merged.map(tag).sink(sinks.memory("x"), name="out")
"""


def write(tmp: Path, name: str, text: str | bytes) -> Path:
    path = tmp / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def bad_input_cases(tmp: Path) -> list[tuple[list[str | Path], str]]:
    """``(arguments, the error's start after 'error: ')`` for each kind of bad input."""
    good = json.dumps(reading("u1", 1.0, 40.0))
    multi = write(tmp, "multi.py", MULTI)
    broken = write(tmp, "broken.py", "from spanedge import App\napp = App('x')\nundefined_name\n")
    many = write(tmp, "many.jsonl", (good + "\n") * 4)
    return [
        ([COLD_CHAIN, "-i", write(tmp, "a.jsonl", f'{good}\n{{"unit": "u1",\n')], "{}:2: not valid JSON"),
        ([COLD_CHAIN, "-i", write(tmp, "b.jsonl", f"{good}\n\n[1, 2]\n")], "{}:3: the line holds a list, not a JSON"),
        ([COLD_CHAIN, "-i", write(tmp, "c.jsonl", '{"stream": "readings", "value": 7}\n')], '{}:1: "value" holds a'),
        (
            [COLD_CHAIN, "-i", write(tmp, "d.jsonl", '{"stream": "doors", "value": {"a": 1}}\n')],
            "{}:1: stream 'doors' is not a source stream of app cold-chain",
        ),
        (
            [COLD_CHAIN, "-i", write(tmp, "e.jsonl", '{"site": "Truck 7", "value": {"a": 1}}\n')],
            "{}:1: site name 'Truck 7' has uppercase letters",
        ),
        ([multi, "-i", write(tmp, "f.jsonl", good + "\n")], "{}:1: the line names no stream, and app multi"),
        ([COLD_CHAIN, "-i", many, "--max-lines", "3"], "{}:4: more than 3 records (--max-lines)"),
        ([COLD_CHAIN, "-i", write(tmp, "g.jsonl", b" " * 1_000_001), "--max-mb", "1"], "{} holds more than 1 MB"),
        ([COLD_CHAIN, "-i", tmp / "missing.jsonl"], "cannot read input {}: No such file"),
        ([COLD_CHAIN, "-i", tmp], "input {} is a directory"),
        ([broken, "-i", many], f"{broken}:3: the app raised NameError while loading"),
        ([COLD_CHAIN, "-i", many, "--compare", broken], f"{broken}:3: the app raised NameError"),
        ([tmp / "nope.py", "-i", many], f"app file {tmp / 'nope.py'} does not exist"),
        (
            [write(tmp, "local.py", LOCAL_AFTER_MERGE), "-i", many],
            "operator 'tag' (local.py:5) is @local but reads from 'merged' (local.py:11), which runs once",
        ),
        ([COLD_CHAIN, "-i", many, "--stream", "doors"], "--stream 'doors' is not a source stream of app cold-chain"),
        ([COLD_CHAIN, "-i", many, "--site", "Bad"], "--site: site name 'Bad' has uppercase letters"),
        ([COLD_CHAIN, "-i", many, "--timeout", "soon"], "--timeout: expected a duration"),
    ]


def test_each_bad_input_is_one_line_naming_the_file_and_line(tmp_path: Path) -> None:
    for args, expected in bad_input_cases(tmp_path):
        code, out = run(*args)
        where = str(args[2]) if len(args) > 2 else ""
        assert code == 2, (args, out)
        assert "Traceback" not in out, out
        assert out.count("\n") == 1, out
        assert out.startswith("error: " + expected.format(where)), (expected, out)


def test_a_preview_past_its_timeout_stops_with_what_it_was_doing(tmp_path: Path) -> None:
    app = write(
        tmp_path,
        "app.py",
        COLD_CHAIN.read_text().replace("    return -60.0", "    while True:\n        pass\n    return -60.0"),
    )
    records = write(tmp_path, "r.jsonl", json.dumps(reading("u1", 1.0, 40.0)) + "\n")
    code, out = run(app, "--input", records, "--timeout", "300ms")
    assert code == 2
    assert out == (
        f"error: the preview did not finish within --timeout 300ms (running {app} over {records}); "
        "pass a longer --timeout or fewer records\n"
    )


def test_a_timer_set_before_the_preview_runs_on_after_it(tmp_path: Path) -> None:
    import signal

    ours = signal.getitimer(signal.ITIMER_REAL)[0] == 0  # else pytest-timeout's
    if ours:
        signal.setitimer(signal.ITIMER_REAL, 120.0)
    try:
        before = signal.getitimer(signal.ITIMER_REAL)[0]
        preview_json(COLD_CHAIN, COLD_READINGS, tmp_path)
        after = signal.getitimer(signal.ITIMER_REAL)[0]
        assert before - 30 < after <= before
    finally:
        if ours:
            signal.setitimer(signal.ITIMER_REAL, 0)


def test_a_record_without_its_event_time_is_a_dead_letter_not_an_error(tmp_path: Path) -> None:
    doc = preview_json(
        COLD_CHAIN, [{"unit": "u1", "temp_f": 40.0}, {"unit": "u1", "ts": "noon", "temp_f": 40.0}], tmp_path
    )
    assert [d["operator"] for d in doc["dead_letters"]] == ["readings", "readings"]
    assert "event-time field 'ts' is missing" in doc["dead_letters"][0]["reason"]
    assert values(doc, "local_stats") == []


def test_records_on_stdin(tmp_path: Path) -> None:
    text = "".join(json.dumps(r) + "\n" for r in COLD_READINGS)
    result = CliRunner().invoke(cli, ["preview", str(COLD_CHAIN), "--input", "-", "--json"], input=text)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["records"] == 7


def test_the_command_list_shows_preview_and_loads_no_simulator() -> None:
    code = "import sys; from spanedge.cli import cli; print(any(m.split('.')[0] == 'simulate' for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "False"
    result = CliRunner().invoke(cli, ["--help"])
    assert "preview" in result.output


# -- properties: the windows over any readings in time order are the plain-Python grouping of them --------------

UNITS = st.sampled_from(["u1", "u2", "u3"])
TEMPS_F = st.integers(min_value=-40, max_value=140).map(float)


@st.composite
def in_order(draw: st.DrawFn) -> list[dict[str, Any]]:
    stamps = sorted(draw(st.lists(st.integers(min_value=0, max_value=119), min_size=1, max_size=30)))
    return [reading(draw(UNITS), t / 2, draw(TEMPS_F)) for t in stamps]


@given(readings=in_order())
def test_cold_chain_windows_are_the_grouping_by_unit_and_10s(readings: list[dict[str, Any]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        doc = preview_json(COLD_CHAIN, readings, Path(tmp))
    groups: dict[tuple[str, float], list[float]] = defaultdict(list)
    for r in readings:
        groups[(r["unit"], math.floor(r["ts"] / 10) * 10.0)].append(round((r["temp_f"] - 32.0) * 5.0 / 9.0, 3))
    got = {(v["unit"], v["window_start"]): v for v in values(doc, "local_stats")}
    assert set(got) == set(groups)
    for key, temps in groups.items():
        assert got[key]["n"] == len(temps)
        assert got[key]["mean_c"] == pytest.approx(sum(temps) / len(temps))
        assert got[key]["max_c"] == max(temps)
    alerts = {(v["unit"], v["window_start"]) for v in values(doc, "fleet_alerts")}
    assert alerts == {k for k, temps in groups.items() if not 0.0 <= sum(temps) / len(temps) <= 8.0}


@st.composite
def farm_lines(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(min_value=1, max_value=25))
    sites = st.sampled_from(["field-east", "field-west", "barn"])
    probes = st.sampled_from(["z1/a", "z1/b", "z2/a"])
    return [
        probe(draw(sites), draw(probes), float(draw(st.integers(0, 89))), float(draw(st.integers(1, 40))))
        for _ in range(n)
    ]


@given(lines=farm_lines())
def test_the_hub_window_takes_every_sites_dry_readings_in_any_order(lines: list[dict[str, Any]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        doc = preview_json(SMART_FARM, lines, Path(tmp))
    groups: dict[tuple[str, float], list[float]] = defaultdict(list)
    for line in lines:
        v = line["value"]
        if v["moisture"] < 15.0:
            groups[(v["zone"], math.floor(v["ts"] / 30) * 30.0)].append(v["moisture"])
    got = {(v["zone"], v["window_start"]): (v["readings"], v["driest"]) for v in values(doc, "farm_dashboard")}
    assert got == {key: (len(m), min(m)) for key, m in groups.items()}
    ops = by_name(doc, "operators")
    assert ops["probes"]["in"] == len(lines)
    assert ops["dry_spots"]["in"] == sum(len(m) for m in groups.values())
