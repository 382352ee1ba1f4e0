"""Which hub queries parse the log's values with each line: those whose every reader of the log is a window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hub.engine.compile import Compiler
from hub.engine.replicas import Replicas
from spanedge import App, agg, sinks
from spanedge.aggregations import Aggregator
from tests.plans import chain_plan

LONGEST = Aggregator("longest", lambda: "", lambda acc, v: max(acc, str(v), key=len), max, lambda acc: acc)


def _app(*aggs: tuple[str, Any]) -> App:
    app = App("fields")
    app.source("readings", time_field="ts").window(name="per_key", key="k", size="1s", aggs=dict(aggs)).sink(
        sinks.memory("out"), name="out"
    )
    return app


def _fields(app: App, at: str) -> dict[str, str] | None:
    plan = chain_plan(app.name, 1, {"s1": [("per_key", at, 0)], "s2": [("per_key", at, 0)]})
    return Compiler(None, Replicas(app, plan, app.graph())).value_fields("out")  # type: ignore[arg-type]


def test_a_hub_window_over_the_records_of_spokes_parses_the_fields_it_uses_with_the_line() -> None:
    app = _app(("n", agg.count()), ("total", agg.sum("v")), ("top", agg.max("v")), ("low", agg.min("w")))
    assert _fields(app, "cloud") == {"k": "STRING", "v": "DOUBLE", "w": "DOUBLE"}


def test_a_query_that_reads_results_or_text_reads_values_as_text() -> None:
    app = _app(("n", agg.count()), ("total", agg.sum("v")))
    assert _fields(app, "s1") is None  # the windows run at the spokes: the sink passes their results on
    assert _fields(_app(("n", agg.count()), ("longest", agg.custom("v", LONGEST))), "cloud") is None


def _closing(app: App, chain: list[tuple[str, str, int]]) -> str | None:
    plan = chain_plan(app.name, 1, {"s1": chain, "s2": chain})
    op = Compiler(None, Replicas(app, plan, app.graph()), close_windows=True).closing_window("out")  # type: ignore[arg-type]
    assert Compiler(None, Replicas(app, plan, app.graph())).closing_window("out") is None  # type: ignore[arg-type]
    return op.name if op is not None else None


def test_a_sink_closes_the_hub_window_it_reads_directly_and_no_other() -> None:
    app = _app(("n", agg.count()), ("total", agg.sum("v")))
    assert _closing(app, [("per_key", "cloud", 0)]) == "per_key"  # per-site replicas merged at the hub
    assert _closing(app, [("per_key", "s1", 0)]) is None  # results of windows at the spokes
    custom = _app(("n", agg.count()), ("longest", agg.custom("v", LONGEST)))
    assert _closing(custom, [("per_key", "cloud", 0)]) is None  # finished in Python after Spark

    def chained(step: str) -> App:
        app = App("chained")
        stream = app.source("readings", time_field="ts").window(
            name="first", key="k", size="1s", aggs={"n": agg.count()}
        )
        if step == "window":
            stream = stream.window(name="second", key="k", size="2s", aggs={"n": agg.sum("n")})
        elif step == "session":
            stream = stream.window(name="second", key="k", gap="2s", aggs={"n": agg.sum("n")})
        else:
            stream = stream.filter(lambda r: r["n"] > 1, name="second")
        stream.sink(sinks.memory("out"), name="out")
        return app

    at_hub = [("first", "cloud", 0), ("second", "cloud", 0)]
    assert _closing(chained("filter"), at_hub) is None  # the sink reads the filter's records
    assert _closing(chained("window"), at_hub) is None  # update mode takes one aggregation per query
    assert _closing(chained("window"), [("first", "s1", 0), ("second", "cloud", 0)]) == "second"
    assert _closing(chained("session"), [("first", "s1", 0), ("second", "cloud", 0)]) is None


def test_a_query_keeps_a_watermark_when_it_runs_a_window_at_the_hub() -> None:
    app = _app(("n", agg.count()))

    def keeps(at: str) -> bool:
        plan = chain_plan(app.name, 1, {"s1": [("per_key", at, 0)], "s2": [("per_key", at, 0)]})
        return Compiler(None, Replicas(app, plan, app.graph())).keeps_watermark("out")  # type: ignore[arg-type]

    assert keeps("cloud")
    assert not keeps("s1")  # the windows' results reach the hub as records


def test_a_query_whose_every_record_passes_a_hub_window_says_so() -> None:
    app = App("filtered")
    app.source("readings", time_field="ts").window(name="per_key", key="k", size="1s", aggs={"n": agg.count()}).filter(
        lambda r: r["n"] > 1, name="busy"
    ).sink(sinks.memory("out"), name="out")

    def everything(window_at: str, filter_at: str) -> bool:
        chain = [("per_key", window_at, 0), ("busy", filter_at, 0)]
        plan = chain_plan(app.name, 1, {"s1": chain, "s2": chain})
        return Compiler(None, Replicas(app, plan, app.graph())).windows_everything("out")  # type: ignore[arg-type]

    assert everything("cloud", "cloud")  # the filter reads the hub window's results
    assert not everything("s1", "cloud")  # the filter reads results from the log: no watermark bounds them
    assert not everything("s1", "s1")


def _compiler(app: App, close_windows: bool) -> Compiler:
    plan = chain_plan(app.name, 1, {"s1": [("per_key", "cloud", 0)], "s2": [("per_key", "cloud", 0)]})
    return Compiler(None, Replicas(app, plan, app.graph()), close_windows=close_windows)  # type: ignore[arg-type]


@pytest.mark.parametrize("default", [True, False], ids=["default_at_watermark", "default_next_batch"])
def test_a_running_query_keeps_the_window_close_mode_its_checkpoint_was_started_in(
    tmp_path: Path, default: bool
) -> None:
    """Switching the mode (or its default) would start the query afresh and lose its open windows' records."""
    from hub.engine.checkpoints import checkpoint_name
    from hub.engine.wanted import keep_checkpoint_modes

    app = _app(("n", agg.count()))
    started = _compiler(app, close_windows=not default).fingerprint("out")
    fresh = _compiler(app, close_windows=default)
    assert fresh.fingerprint("out") != started
    keep_checkpoint_modes(fresh, ["out"], tmp_path)  # no checkpoint yet: the configured mode
    assert fresh.closes("out") is default

    (tmp_path / checkpoint_name("out", started)).mkdir()
    running = _compiler(app, close_windows=default)
    assert keep_checkpoint_modes(running, ["out"], tmp_path) == {"out": started}
    assert running.closes("out") is not default
    assert running.fingerprint("out") == started
    assert (running.closing_window("out") is not None) is not default

    (tmp_path / checkpoint_name("out", fresh.fingerprint("out"))).mkdir()  # both: the configured mode's wins
    both = _compiler(app, close_windows=default)
    keep_checkpoint_modes(both, ["out"], tmp_path)
    assert both.closes("out") is default


def test_a_query_without_a_window_to_close_has_one_fingerprint_in_both_modes(tmp_path: Path) -> None:
    from hub.engine.checkpoints import checkpoint_name
    from hub.engine.wanted import keep_checkpoint_modes

    custom = _app(("n", agg.count()), ("longest", agg.custom("v", LONGEST)))  # finished in Python: not closed
    assert _compiler(custom, True).fingerprint("out") == _compiler(custom, False).fingerprint("out")
    (tmp_path / checkpoint_name("out", _compiler(custom, False).fingerprint("out"))).mkdir()
    compiler = _compiler(custom, True)
    keep_checkpoint_modes(compiler, ["out"], tmp_path)
    assert compiler.modes == {}


def test_a_hub_window_over_another_hub_windows_results_is_refused_with_what_to_do() -> None:
    from spanedge.errors import InvalidDataflow

    app = App("rollup")
    app.source("readings", time_field="ts").window(name="minute", key="k", size="60s", aggs={"n": agg.count()}).window(
        name="hour", key="k", size="3600s", aggs={"n": agg.sum("n")}, scope="global"
    ).sink(sinks.memory("out"), name="out")

    def compiler(minute_at: str) -> Compiler:
        plan = chain_plan(app.name, 1, {"s1": [("minute", minute_at, 0), ("hour", "cloud", 0)]})
        return Compiler(None, Replicas(app, plan, app.graph()))  # type: ignore[arg-type]

    with pytest.raises(InvalidDataflow, match=r"window 'hour' .* on the results of window 'minute'.*scope='local'"):
        compiler("cloud").frame("out", Path("unused"), "reader")
    compiler("s1").check_windows("out")  # the minutes reach the hub as records
