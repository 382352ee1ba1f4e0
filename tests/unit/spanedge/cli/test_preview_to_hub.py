"""The summary ``spanedge preview --site --for`` gives the hub: what it holds, within the hub's bounds."""

from __future__ import annotations

from pathlib import Path

from hub.api.previews.limits import MAX_OPERATORS, MAX_REASON_CHARS
from hub.api.previews.models import PreviewReport
from simulate.broker import free_port
from spanedge.cli.preview.records import Limits, by_site, read_lines
from spanedge.cli.preview.report import Shown, to_json
from spanedge.cli.preview.run import Count, Preview, run
from spanedge.cli.preview.to_hub import LiveRead, post, summary
from spanedge.loader import load_app, source_hash
from tests.conftest import EXAMPLES

APP = EXAMPLES / "cold_chain" / "app.py"
APP_V2 = EXAMPLES / "cold_chain" / "app_v2.py"
RECORDS = EXAMPLES / "cold_chain" / "records.jsonl"
READ = LiveRead("truck-7", 60.0, 1_700_000_000.0, 1_700_000_060.5, None)


def preview(path: Path) -> Preview:
    app = load_app(path)
    lines = read_lines(RECORDS, Limits(10**8, 10**6))
    return run(app, by_site(lines, RECORDS, app.name, app.source_streams(), "truck-7"), 1.0)


def test_the_summary_holds_both_versions_side_by_side_and_the_hub_takes_it() -> None:
    live, candidate = preview(APP), preview(APP_V2)
    body = summary(READ, APP_V2, APP_V2.read_text(), candidate, (live, "hub v3"))
    taken = PreviewReport.model_validate(body)
    assert (taken.candidate_file, taken.candidate_sha256) == ("app_v2.py", source_hash(APP_V2.read_text()))
    assert (taken.site, taken.duration_s, taken.ended_at - taken.started_at) == ("truck-7", 60.0, 60.5)
    assert taken.live is not None
    assert (taken.live.version, taken.candidate.version) == ("hub v3", "app_v2.py")
    assert taken.differing_results == 1  # app.py alerts on one unit that app_v2.py does not
    assert not taken.stopped_early
    for side, run_ in (("live", live), ("candidate", candidate)):
        shown = {
            op["name"]: (op["in"], op["out"], op["dead_letters"])
            for op in to_json(Shown(run_, "x", "y"), 0)["operators"]
        }
        sent = {op.name: getattr(op, side) for op in taken.operators}
        assert {n: (c.records_in, c.records_out, c.dead_letters) for n, c in sent.items() if c} == shown
    assert taken.records == candidate.records > 0


def test_without_a_live_version_nothing_is_compared() -> None:
    body = summary(READ, APP, APP.read_text(), preview(APP), None)
    taken = PreviewReport.model_validate(body)
    assert (taken.live, taken.differing_results) == (None, None)
    assert all(op.live is None and op.candidate is not None for op in taken.operators)


def test_a_large_app_and_a_long_reason_are_cut_to_the_hubs_bounds() -> None:
    many = [Count(f"op{i}", "map", "edge", 1, 1) for i in range(MAX_OPERATORS + 50)]
    big = Preview("big", ["truck-7"], 1, many, [], [], [])
    read = LiveRead("truck-7", 5.0, 10.0, 12.0, "interrupted\n" + "x" * 500)
    taken = PreviewReport.model_validate(summary(read, Path("big.py"), "", big, None))
    assert (len(taken.operators), taken.operators_left_out) == (MAX_OPERATORS, 50)
    assert taken.stopped_early
    assert taken.stop_reason is not None
    assert len(taken.stop_reason) == MAX_REASON_CHARS
    assert taken.stop_reason.startswith("interrupted xxx")


def test_a_hub_that_cannot_be_reached_is_a_warning_line() -> None:
    hub = f"http://127.0.0.1:{free_port()}"
    said = post(hub, "t" * 32, None, "cold-chain", {})
    assert said.startswith(f"warning: the hub {hub} did not keep the preview's summary: cannot reach the hub"), said
