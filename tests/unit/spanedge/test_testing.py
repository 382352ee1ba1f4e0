"""spanedge.testing: the edge part of an app over lists of records."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanedge import App, agg, sinks
from spanedge.loader import load_app
from spanedge.sites import load_sites
from spanedge.testing import local_plan, run_edge

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cold_chain() -> App:
    return load_app(ROOT / "examples" / "cold_chain" / "app.py")


def _readings(n: int, t0: float = 1000.0) -> list[dict]:
    return [{"unit": f"u{i % 2}", "ts": t0 + i, "temp_f": 32.0 + i % 10} for i in range(n)]


def test_cold_chain_edge_part(cold_chain: App) -> None:
    result = run_edge(cold_chain, {"readings": _readings(20)}, site="truck-7")
    stats = result.to_hub["unit_stats"]
    assert [(r.key, r.value["window_start"], r.value["n"]) for r in stats] == [
        ("u0", 1000.0, 5),
        ("u1", 1000.0, 5),
        ("u0", 1010.0, 5),
        ("u1", 1010.0, 5),
    ]
    assert [r.seq for r in stats] == [1, 2, 3, 4]
    assert all(r.site == "truck-7" and r.stream == "unit_stats" for r in stats)
    assert stats[0].value["mean_c"] == pytest.approx(sum((32 + i - 32) * 5 / 9 for i in (0, 2, 4, 6, 8)) / 5, abs=1e-3)
    assert result.sinks["local_stats"] == result.values("unit_stats")


def test_without_flush_open_windows_stay_open(cold_chain: App) -> None:
    result = run_edge(cold_chain, {"readings": _readings(15)}, flush=False)
    assert [r.value["window_start"] for r in result.to_hub["unit_stats"]] == [1000.0, 1000.0]
    assert result.watermark == 1014.0


def test_bad_records_go_to_the_dlq_and_the_rest_flows(cold_chain: App) -> None:
    records = [*_readings(4), "{broken", {"unit": "u0", "temp_f": 40}, {"unit": "u0", "ts": 1001.5}]
    result = run_edge(cold_chain, {"readings": records})
    assert [d.operator for d in result.dlq] == ["readings", "readings", "to_celsius"]
    assert "KeyError" in result.dlq[2].reason
    assert sum(r.value["n"] for r in result.to_hub["unit_stats"]) == 4


def test_late_records_and_far_future_events(cold_chain: App) -> None:
    records = [*_readings(12), {"unit": "u0", "ts": 1001.0, "temp_f": 40}, {"unit": "u0", "ts": 9e9, "temp_f": 40}]
    result = run_edge(cold_chain, {"readings": records}, now=1020.0, flush=False)
    assert len(result.late) == 1
    assert result.late[0].operator == "unit_stats"
    assert "ahead of the agent clock" in result.dlq[0].reason
    assert result.watermark == 1011.0


def test_pairs_interleave_streams_and_arrival_time() -> None:
    app = App("two")
    a = app.source("a")
    b = app.source("b")
    a.union(b, name="both").window(name="w", key="k", size=10, aggs={"n": agg.count()}).sink(
        sinks.memory("m"), name="out"
    )
    result = run_edge(app, [("a", {"k": 1}), ("b", {"k": 1}), ("a", {"k": 2})], now=5.0)
    assert sorted((v["k"], v["n"]) for v in result.sinks["out"]) == [(1, 2), (2, 1)]
    with pytest.raises(KeyError, match="no source stream 'c'"):
        run_edge(app, {"c": [{}]})


def test_runs_what_a_plan_puts_at_a_site(cold_chain: App) -> None:
    plan = local_plan(cold_chain, load_sites(ROOT / "examples" / "cold_chain" / "sites.yaml"))
    result = run_edge(cold_chain, {"readings": _readings(20)}, site="truck-9", plan=plan)
    assert [r.site for r in result.to_hub["unit_stats"]] == ["truck-9"] * 4
    assert set(result.metrics) == {
        f"{op}@truck-9" for op in ("readings", "to_celsius", "plausible", "unit_stats", "local_stats")
    }
