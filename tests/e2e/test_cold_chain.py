"""The cold-chain example across 3 simulated spokes and a hub: results, faults and bad input."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def _sink(outcome: Any, name: str) -> Any:
    return next(c for c in outcome.report.sinks if c.sink == name)


def _assert_exact(outcome: Any, may_skip: frozenset[str] = frozenset()) -> None:
    """Every checked window arrived once, with the reference's values; the sinks in ``may_skip`` may go unchecked."""
    for check in outcome.report.sinks:
        if check.sink in may_skip and check.unchecked is not None:
            continue
        assert check.unchecked is None, check
        assert check.checked > 0, f"{check.sink}: nothing to check; see {outcome.run_dir}"
        assert check.missing == 0, (check.sink, check.examples, outcome.run_dir)
        assert check.lost_records == 0, (check.sink, check.examples, outcome.run_dir)
        assert check.duplicates == 0, (check.sink, check.examples, outcome.run_dir)
        assert check.wrong == 0, (check.sink, check.examples, outcome.run_dir)
        assert check.unexpected == 0, (check.sink, check.examples, outcome.run_dir)
        assert check.extra_records == 0, (check.sink, check.examples, outcome.run_dir)
    assert outcome.report.lost == 0
    assert outcome.report.duplicates == 0
    assert not outcome.report.problems, outcome.report.problems


def test_results_match_the_reference(fault_run: Any) -> None:
    _assert_exact(fault_run)
    units = {r.value["unit"].rsplit("-u", 1)[0] for r in fault_run.collector.results if r.sink == "local_stats"}
    assert units == {"truck-7", "truck-9", "warehouse-north"}
    assert _sink(fault_run, "fleet_alerts").checked > 0  # the hub's global results were checked too
    assert fault_run.report.local_latency.count > 0
    assert fault_run.report.global_latency.count > 0
    assert fault_run.report.wan_total > 0


def _html_report(outcome: Any) -> str:
    """The run's report.html: one inline chart per measure, nothing to fetch."""
    path = outcome.run_dir / "report.html"
    assert outcome.html == path
    html = path.read_text()
    assert html.count("<svg") == 4, outcome.run_dir
    assert not re.search(r"https?://", html)
    assert "<script" not in html
    assert f"{outcome.report.lost} lost, {outcome.report.duplicates} duplicated" in html
    assert (outcome.run_dir / "report.json").exists()
    return html


def test_the_app_is_deployed_over_the_hubs_https_api(fault_run: Any) -> None:
    from tests.e2e.conftest import MODE

    if MODE != "managed":
        pytest.skip("a standalone hub serves no REST API (SPANEDGE_E2E_MODE=standalone)")
    ca = fault_run.run_dir / "hub" / "ca" / "ca.pem"
    (up,) = [e for e in fault_run.events if "hub up: REST API" in e]
    assert re.search(rf"REST API over HTTPS at 127\.0\.0\.1:\d+ \(its CA certificate: {re.escape(str(ca))}\)", up), up
    assert ca.exists()
    assert (fault_run.run_dir / "deploy.json").exists()  # the answer of POST /apps, over a verified connection


def test_the_run_writes_an_html_report_with_its_charts(fault_run: Any) -> None:
    html = _html_report(fault_run)
    timeline = fault_run.timeline
    assert timeline.latency_ms["local"]
    assert timeline.latency_ms["global"]
    assert timeline.wan_times[-1] >= 50  # sampled through the sensor run and the drain
    assert max(series[-1] for series in timeline.wan.values()) > 0
    assert set(timeline.backlog) == {"truck-7", "truck-9", "warehouse-north"}
    assert "cloud&lt;-&gt;truck-7" in html  # a WAN link in the chart's legend


def test_malformed_messages_are_all_dead_lettered(fault_run: Any) -> None:
    sites = {s.site: s for s in fault_run.report.sites}
    bad = {s.site: s.malformed for s in fault_run.report.streams}
    assert bad["warehouse-north"] > 0
    assert bad["truck-7"] == bad["truck-9"] == 0
    assert sites["warehouse-north"].expected_dead == bad["warehouse-north"]
    assert sites["warehouse-north"].dead_lettered == bad["warehouse-north"]
    assert sites["truck-7"].dead_lettered == sites["truck-9"].dead_lettered == 0
    _assert_exact(fault_run)  # everything else unaffected


def test_partition_loses_and_duplicates_nothing_and_drains(fault_run: Any) -> None:
    assert any("healed truck-9" in e for e in fault_run.events)
    _assert_exact(fault_run)
    assert all(s.backlog == 0 for s in fault_run.report.sites), fault_run.report.sites
    truck9 = [
        r for r in fault_run.collector.results if r.sink == "fleet_alerts" and r.value["unit"].startswith("truck-9")
    ]
    assert truck9, "no global result of the partitioned spoke arrived"
    healed = fault_run.started_at + 8 + 20
    held_back = [r for r in truck9 if r.value["window_end"] < healed - 5 and r.received_at > healed]
    assert held_back, "no global result of truck-9 was held back by the partition and delivered after the heal"


def test_the_faults_are_marked_in_the_html_report(fault_run: Any) -> None:
    html = _html_report(fault_run)
    marks = {m.label: m for m in fault_run.timeline.marks if m.kind == "fault"}
    partition = marks["partition:truck-9:20s@8s"]
    assert partition.until is not None
    assert 7.5 < partition.t < 9.5
    assert 19 < partition.until - partition.t < 22
    assert "kill-agent:truck-7@12s" in marks
    wan, backlog = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)[2:]
    for chart in (wan, backlog):
        assert "partition:truck-9:20s@8s" in chart
        assert "kill-agent:truck-7@12s" in chart


def test_agent_sigkill_and_restart_lose_and_duplicate_nothing(fault_run: Any) -> None:
    assert any("killed agent truck-7" in e for e in fault_run.events)
    assert any("restarted agent truck-7" in e for e in fault_run.events)
    _assert_exact(fault_run)
    truck7 = [
        r for r in fault_run.collector.results if r.sink == "local_stats" and r.value["unit"].startswith("truck-7")
    ]
    assert truck7
