"""The latency matrix: declared links, measured rows (CSV and JSON), shortest-path fill."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from placement import LatencyMatrix, plan_app, solve
from placement.latency import LinkInfo, read_rows
from spanedge import App, sinks
from spanedge.errors import InvalidSites
from spanedge.sites import Sites
from tests.conftest import EXAMPLES


def sites() -> Sites:
    return Sites.of(
        {
            "sites": {
                "cloud": {"tier": "hub", "broker": "mqtt://localhost:1883"},
                "a": {"tier": "spoke", "broker": "mqtt://localhost:1883"},
                "b": {"tier": "spoke", "broker": "mqtt://localhost:1883"},
                "c": {"tier": "spoke", "broker": "mqtt://localhost:1883"},
            },
            "default_link": {"latency_ms": 500, "bandwidth_mbps": 1, "cost": 9},
            "links": [
                {"between": ["a", "cloud"], "latency_ms": 40, "bandwidth_mbps": 10},
                {"between": ["b", "cloud"], "latency_ms": 30, "bandwidth_mbps": 20, "cost": 2},
            ],
        }
    )


def test_declared_links_are_symmetric_and_paths_fill_the_gaps() -> None:
    m = LatencyMatrix.from_sites(sites())
    assert m.latency("a", "a") == 0
    assert m.cost("a", "a") == 0
    assert m.latency("a", "cloud") == m.latency("cloud", "a") == 40
    # a and b have no declared link: the shortest path a -> cloud -> b.
    assert m.latency("a", "b") == 70
    assert m.bandwidth("a", "b") == 10
    assert m.cost("a", "b") == 3
    assert m.info("a", "b").origin == "path"
    # c has no link at all: the default link.
    assert m.latency("c", "a") == 500
    assert m.info("c", "a").origin == "default"


MEASURED = [
    {
        "src": "a",
        "dst": "cloud",
        "latency_p50_ms": 12.5,
        "latency_p95_ms": 30,
        "bandwidth_mbps": 8,
        "cost": "",
        "measured_at": "2026-11-22T10:00:00Z",
    },
    {
        "src": "a",
        "dst": "b",
        "latency_p50_ms": 5,
        "latency_p95_ms": "",
        "bandwidth_mbps": "",
        "cost": "",
        "measured_at": "",
    },
]


def check_measured(m: LatencyMatrix) -> None:
    assert m.latency("a", "cloud") == 12.5  # measured overrides declared 40
    assert m.info("a", "cloud").latency_p95_ms == 30
    assert m.info("a", "cloud").measured_at == "2026-11-22T10:00:00Z"
    assert m.cost("a", "cloud") == 1.0  # blank cost keeps the declared value
    assert m.latency("cloud", "a") == 40  # rows are directed: the reverse keeps the declared value
    assert m.latency("a", "b") == 5
    assert m.bandwidth("a", "b") == 1  # no declared pair: the default link's bandwidth
    # b -> a was not measured: shortest path b -> cloud -> a over what is known.
    assert m.latency("b", "a") == 70
    # c -> b still has no path: the default.
    assert m.latency("c", "b") == 500


def test_measured_rows_from_csv(tmp_path: Path) -> None:
    path = tmp_path / "latency.csv"
    header = "src,dst,latency_p50_ms,latency_p95_ms,bandwidth_mbps,cost,measured_at"
    lines = [header] + [",".join(str(row[k]) for k in header.split(",")) for row in MEASURED]
    path.write_text("\n".join(lines) + "\n")
    check_measured(LatencyMatrix.load(path, sites()))
    check_measured(LatencyMatrix.from_sites(sites()).with_measurements(path))
    assert len(read_rows(path)) == 2


@pytest.mark.parametrize("wrapped", [False, True])
def test_measured_rows_from_json(tmp_path: Path, wrapped: bool) -> None:
    path = tmp_path / "latency.json"
    path.write_text(json.dumps({"rows": MEASURED} if wrapped else MEASURED))
    check_measured(LatencyMatrix.load(path, sites()))


def test_measurements_without_sites_fill_by_shortest_path() -> None:
    m = LatencyMatrix((), {}).with_measurements(
        [
            {"src": "x", "dst": "y", "latency_p50_ms": 10},
            {"src": "y", "dst": "z", "latency_p50_ms": 15, "bandwidth_mbps": 3},
        ]
    )
    assert m.latency("x", "z") == 25
    assert m.bandwidth("x", "z") == 3
    assert math.isinf(m.latency("z", "x"))
    assert {row["origin"] for row in m.rows()} == {"measured", "path", "unreachable"}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"src": "a", "dst": "zz", "latency_p50_ms": 1}, "unknown site 'zz'"),
        ({"src": "a", "dst": "b"}, "missing latency_p50_ms"),
        ({"src": "a", "dst": "b", "latency_p50_ms": "fast"}, "latency_p50_ms must be a number, got 'fast'"),
        ({"src": "a", "dst": "b", "latency_p50_ms": -3}, "must be >= 0"),
        ({"dst": "b", "latency_p50_ms": 3}, "needs src and dst"),
    ],
)
def test_bad_rows_are_named(row: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSites, match="row 1: .*" + message.replace("(", r"\(")):
        LatencyMatrix.from_sites(sites()).with_measurements([row])


def test_bad_files(tmp_path: Path) -> None:
    csv_path = tmp_path / "l.csv"
    csv_path.write_text("from,to,ms\na,b,3\n")
    with pytest.raises(InvalidSites, match="CSV header lacks src, dst, latency_p50_ms"):
        read_rows(csv_path)
    json_path = tmp_path / "l.json"
    json_path.write_text("{not json")
    with pytest.raises(InvalidSites, match="not valid JSON"):
        read_rows(json_path)
    with pytest.raises(InvalidSites, match="cannot read latency file"):
        read_rows(tmp_path / "missing.csv")


def test_measured_latency_changes_the_plan(tmp_path: Path) -> None:
    app, sites_file = EXAMPLES / "cold_chain" / "app.py", EXAMPLES / "cold_chain" / "sites.yaml"
    declared = plan_app(app, sites_file)
    path = tmp_path / "latency.csv"
    path.write_text("src,dst,latency_p50_ms\ntruck-7,cloud,300\n")
    measured = plan_app(app, sites_file, latency_file=path)
    assert declared.site_of("to_celsius@truck-7") == "truck-7"
    # truck-7 -> cloud is now slow: its local group moves to warehouse-north (40 ms, then 20 ms to the cloud).
    assert measured.site_of("to_celsius@truck-7") == "warehouse-north"
    assert measured.site_of("unit_stats@truck-7") == "warehouse-north"
    assert "offloaded from truck-7 to warehouse-north (40 ms)" in measured.assignment("to_celsius@truck-7").reason
    assert measured.totals.worst_latency_ms == 70
    traffic_only = plan_app(app, sites_file, latency_file=path, latency_weight=0.0)
    assert traffic_only.site_of("to_celsius@truck-7") == "truck-7"
    assert traffic_only.totals.worst_latency_ms == 300


def test_a_matrix_without_the_sites_is_refused() -> None:
    app = App("t")
    app.source("r").sink(sinks.memory("o"), name="out")
    with_r = Sites.of(
        {
            "sites": {
                "cloud": {"tier": "hub", "broker": "mqtt://localhost:1883"},
                "a": {"tier": "spoke", "broker": "mqtt://localhost:1883", "streams": {"r": {"topic": "t", "rate": 1}}},
            }
        }
    )
    measured_only = LatencyMatrix((), {}).with_measurements([{"src": "a", "dst": "x", "latency_p50_ms": 3}])
    with pytest.raises(InvalidSites, match="knows nothing about site\\(s\\) cloud"):
        solve(app, with_r, latency=measured_only)


def reference_overlay(base: LatencyMatrix, rows: list[dict[str, object]]) -> dict[tuple[str, str], LinkInfo]:
    """The direct entries ``with_measurements`` gave when it built a row's entry in three steps."""
    direct = dict(base._direct)
    for row in rows:
        p95, bandwidth, cost = (row.get(k) for k in ("latency_p95_ms", "bandwidth_mbps", "cost"))
        number = {k: math.nan if v in (None, "") else float(str(v)) for k, v in {"b": bandwidth, "c": cost}.items()}
        info = LinkInfo(
            float(str(row["latency_p50_ms"])),
            number["b"],
            number["c"],
            None if p95 in (None, "") else float(str(p95)),
            str(row["measured_at"]) if row.get("measured_at") not in (None, "") else None,
            "measured",
        )
        src, dst = str(row["src"]), str(row["dst"])
        known = direct.get((src, dst)) or base._default
        if known is not None:
            info = dataclasses.replace(
                info,
                bandwidth_mbps=known.bandwidth_mbps if math.isnan(info.bandwidth_mbps) else info.bandwidth_mbps,
                cost=known.cost if math.isnan(info.cost) else info.cost,
            )
        direct[src, dst] = dataclasses.replace(
            info,
            bandwidth_mbps=100.0 if math.isnan(info.bandwidth_mbps) else info.bandwidth_mbps,
            cost=1.0 if math.isnan(info.cost) else info.cost,
        )
    return direct


OVERLAID = [
    {"src": "a", "dst": "cloud", "latency_p50_ms": 12.5, "latency_p95_ms": 30.0, "measured_at": "2026-12-07T10:00:00"},
    {"src": "cloud", "dst": "b", "latency_p50_ms": 7, "bandwidth_mbps": "", "cost": 3},  # over a declared link
    {"src": "c", "dst": "a", "latency_p50_ms": "4.5", "bandwidth_mbps": "2", "cost": None},  # over the default
    {"src": "a", "dst": "b", "latency_p50_ms": 0.0, "latency_p95_ms": math.inf, "measured_at": ""},
    {"src": "a", "dst": "cloud", "latency_p50_ms": 13.0, "bandwidth_mbps": 0.5},  # a second row of a pair
]


@pytest.mark.parametrize("declared", [True, False])
def test_measured_rows_overlay_the_entries_they_always_did(declared: bool) -> None:
    base = LatencyMatrix.from_sites(sites()) if declared else LatencyMatrix((), {})
    overlaid = base.with_measurements(OVERLAID)
    assert overlaid._direct == reference_overlay(base, OVERLAID)
    assert overlaid.info("cloud", "b").bandwidth_mbps == (20 if declared else 100.0)
