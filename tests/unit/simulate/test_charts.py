"""Charts and the HTML report from synthetic runs: inline SVG only, nothing fetched, faults and re-plans marked."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from simulate import charts
from simulate.charts import Line, Mark
from simulate.report import Latency, Report, SinkCheck, SiteCount, StreamCount
from simulate.report_html import render_html, write_html
from simulate.timeline import Timeline
from spanedge.errors import MissingExtra

URL = re.compile(r"https?://")
FAULT = Mark(8.0, "fault", "partition:truck-9:20s@8s", until=28.0)
REPLAN = Mark(15.5, "replan", "re-plan: latency cloud–truck-9 40→120 ms")


def _run(label: str, scale: float, marks: list[Mark]) -> tuple[Report, Timeline]:
    times = [float(t) for t in range(11)]
    links = [f"cloud<->site-{i}" for i in range(8)]  # more than TOP_LINKS: the rest are summed
    wan = {link: [int(scale * (i + 1) * 100 * t) for t in range(11)] for i, link in enumerate(links)}
    backlog = {"truck-7": [(0.0, 0), (2.0, 5), (4.0, 0)], "truck-9": [(0.0, 0), (9.0, int(40 * scale))]}
    latency = {"local": [100.0 * scale + i for i in range(50)], "global": [2000.0 + 10 * i for i in range(20)]}
    check = SinkCheck("local_stats", "local", received=50, expected=50, checked=48)
    report = Report(
        label,
        "cold-chain",
        f"{label}, standalone",
        "mosquitto",
        10.0,
        streams=[StreamCount("readings", "truck-7", 500, 2)],
        sinks=[check],
        local_latency=Latency.of([v / 1000 for v in latency["local"]]),
        wan_bytes={link: {"up": series[-1]} for link, series in wan.items()},
        wan_total=sum(series[-1] for series in wan.values()),
        sites=[SiteCount("truck-7", max_backlog=5)],
        faults=["partition:truck-9:20s@8s"],
        events=["t=  8.0s fault partition:truck-9:20s@8s", "t= 28.0s healed truck-9 <at once>"],
    )
    return report, Timeline(times, wan, backlog, marks, latency)


def _svgs(html: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", html, flags=re.S)


def test_a_chart_is_one_inline_svg_with_no_url_and_text_kept_as_text() -> None:
    svg = charts.time_chart("WAN bytes", "kB", [Line("cloud<->truck-7", [0, 1, 2], [0, 1000, 3000])], [FAULT, REPLAN])
    assert svg.startswith("<svg ")
    assert svg.rstrip().endswith("</svg>")
    assert svg.count("<svg") == 1
    assert not URL.search(svg)
    assert "<?xml" not in svg
    assert "<!DOCTYPE" not in svg
    assert "partition:truck-9:20s@8s" in svg  # the marker's label, as text
    assert "re-plan: latency cloud–truck-9" in svg
    assert "cloud&lt;-&gt;truck-7" in svg  # the legend


def test_long_marker_labels_are_shortened_in_the_chart() -> None:
    long = Mark(1.0, "replan", "re-plan: " + "x" * 100)
    svg = charts.time_chart("t", "y", [Line("a", [0, 2], [0, 1])], [long])
    assert "x" * (charts.MARK_CHARS - 10) in svg
    assert "x" * 100 not in svg


def test_latency_cdf_overlays_runs_and_says_when_there_is_nothing() -> None:
    svg = charts.latency_cdf("local results", {"spanedge": [10.0, 20.0, 30.0], "central": [100.0, 250.0]})
    assert "spanedge (3 results)" in svg
    assert "central (2 results)" in svg
    empty = charts.latency_cdf("global results", {"spanedge": [], "central": []})
    assert "no results" in empty
    assert not URL.search(svg + empty)


def test_dollar_signs_are_drawn_literally() -> None:
    svg = charts.time_chart("cost $5 to $6", "y", [Line("$a$", [0, 1], [1, 2])])
    assert "cost $5 to $6" in svg


def test_scale_of_picks_a_unit() -> None:
    assert charts.scale_of(999, "B") == (1.0, "B")
    assert charts.scale_of(12_000, "B") == (1e3, "kB")
    assert charts.scale_of(3e6, "B") == (1e6, "MB")


def test_the_html_report_has_the_totals_a_chart_each_and_no_url(tmp_path: Path) -> None:
    runs = [_run("spanedge", 1.0, [FAULT, REPLAN]), _run("central", 3.0, [FAULT])]
    html = render_html(runs)
    svgs = _svgs(html)
    assert len(svgs) == html.count("<svg") == 4  # local and global latency, WAN, backlog
    assert not URL.search(html)
    assert "<script" not in html
    assert not re.search(r"""(src|href)=["'](?!#)""", html)  # no outside file; only in-document references
    assert "spanedge (spanedge, standalone): 0 lost, 0 duplicated, 0 wrong of 48 results checked" in html
    assert "<th>central (central, standalone)</th>" in html
    assert "WAN vs second run" in html
    wan, backlog = svgs[2], svgs[3]
    for chart in (wan, backlog):
        assert chart.count("partition:truck-9:20s@8s") == 1  # the same fault in both runs: marked once
        assert "[spanedge] re-plan: latency" in chart
        assert "run: central" in chart
    assert "2 other links" in wan
    assert "healed truck-9 &lt;at once&gt;" in html  # the event log, escaped
    path = write_html(tmp_path / "report.html", runs[:1])
    single = path.read_text()
    assert single.count("<svg") == 4
    assert "run: " not in single  # one run: no legend of runs
    assert "re-plan: latency" in single
    assert "[spanedge]" not in single


def test_the_html_report_keeps_problems_apart_from_the_plan_history_and_names_the_warm_up() -> None:
    report, timeline = _run("ilp", 1.0, [])
    report.warmup, report.settle = 20.0, 35.0
    report.plan_history = ["plan v1 at +0.0 s: deployed", "plan v2 at +9.0 s: site truck-9 down"]
    report.problems = ["truck-7 never drained"]
    html = render_html([(report, timeline)])
    problems = html.index("<h2>Problems</h2>")
    history = html.index("<h2>Plan history</h2>")
    assert "[ilp] truck-7 never drained" in html[problems:history]
    assert "[ilp] plan v2 at +9.0 s: site truck-9 down" in html[history:]
    assert "site truck-9 down" not in html[problems:history]
    assert "local results after the 20 s warm-up: latency distribution" in html
    assert "35 s (settle) before the last event time" in html


def test_a_run_without_faults_or_replans_says_so() -> None:
    html = render_html([_run("ilp", 1.0, [])])
    assert "No faults and no re-plans during the sensor run." in html
    assert html.count("<svg") == 4


def test_charts_need_matplotlib_and_say_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtra, match=r"pip install 'spanedge\[sim\]'"):
        charts.require()
    with pytest.raises(MissingExtra):
        charts.latency_cdf("x", {"a": [1.0]})


def test_a_backlog_line_breaks_where_no_heartbeat_came() -> None:
    import math

    from simulate.report_html import with_gaps

    points = [(0.0, 0), (2.0, 1), (4.0, 3), (6.0, 0), (30.0, 60), (32.0, 0)]
    out = with_gaps(points)
    assert out[:4] == points[:4]
    assert out[4][0] == 8.0  # the line stops one usual interval after the last heartbeat
    assert math.isnan(out[4][1])
    assert out[5:] == points[4:]
    assert with_gaps(points[:4]) == points[:4]  # no gap
    assert with_gaps([(0.0, 1), (50.0, 2)]) == [(0.0, 1), (50.0, 2)]  # too few points to tell
