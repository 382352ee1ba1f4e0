"""The decisions on a deployment: whether it changes anything at the hub, each query's share, and starting queries (no Spark needed)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hub.engine.builder import Starter
from hub.engine.checkpoints import checkpoint_name
from hub.engine.fingerprint import fingerprint
from hub.engine.replicas import Replicas
from hub.engine.share_progress import reported_watermark
from hub.engine.shares import HandoverShares
from hub.engine.wanted import unchanged
from hub.handover import cutoffs
from spanedge.loader import load_app_source
from spanedge.plan import Assignment, Plan, SolverInfo, Totals

SOURCE = """
from spanedge import App, global_, sinks


@global_
def archive_row(reading: dict) -> dict:
    return reading


app = App("fleet")
app.source("readings", time_field="ts").map(archive_row).sink(sinks.file("/tmp/out"), name="archive")
"""


def plan(version: int, objective: float, since: int = 0) -> Plan:
    sources = [Assignment(f"readings@s{i}", "readings", f"s{i}", f"s{i}", f"source {objective}") for i in range(3)]
    return Plan(
        app="fleet",
        version=version,
        hub="cloud",
        assignments=(
            *sources,
            Assignment("archive_row", "archive_row", None, "cloud", "global", since),
            Assignment("archive", "archive", None, "cloud", "sink", since),
        ),
        flows=(),
        totals=Totals(objective, objective, objective, objective),
        solver=SolverInfo("fake", "optimal", objective),
    )


def wanted(source: str, p: Plan) -> dict[str, str]:
    """What a deployment computes: the checkpoint name of each sink's query."""
    app = load_app_source(source, "/srv/apps/fleet.py")  # loaded anew, as the hub does on each POST /apps
    return {"archive": checkpoint_name("archive", fingerprint(Replicas(app, p, app.graph()), "archive"))}


def running(names: dict[str, str], active: bool = True) -> dict[str, Any]:
    return {
        slot: SimpleNamespace(checkpoint=Path("/state/checkpoints/fleet") / n, running=active)
        for slot, n in names.items()
    }


def test_a_redeploy_of_the_same_app_changes_nothing_at_the_hub() -> None:
    queries = running(wanted(SOURCE, plan(1, 1.0)))
    # a new version with other totals and reasons, the app's code loaded again from the same source
    assert unchanged(queries, wanted(SOURCE, plan(2, 7.5)), {}, {})
    assert unchanged(queries, wanted(SOURCE, plan(3, 7.5, since=3)), {}, {})  # the hub replicas' epoch is no change


def test_a_changed_branch_a_failed_query_a_new_share_or_a_restart_rebuilds() -> None:
    queries = running(wanted(SOURCE, plan(1, 1.0)))
    changed = SOURCE.replace("return reading", "return {**reading, 'seen': True}")
    assert not unchanged(queries, wanted(changed, plan(2, 1.0)), {}, {})
    assert not unchanged(running(wanted(SOURCE, plan(1, 1.0)), active=False), wanted(SOURCE, plan(2, 1.0)), {}, {})
    split = {"archive": ("after", 30.0)}
    assert not unchanged(queries, wanted(SOURCE, plan(2, 1.0)), split, {})
    assert unchanged(queries, wanted(SOURCE, plan(2, 1.0)), split, dict(split))
    assert not unchanged(queries, wanted(SOURCE, plan(2, 1.0)), {}, None)  # shares unknown: rewritten once


def test_a_postponed_switch_cuts_the_shares_anew_instead_of_adding_to_them(tmp_path: Path) -> None:
    """Deploying a plan version again with a later switch gives each query its share as of that switch only."""
    app = load_app_source(SOURCE, "/srv/apps/fleet.py")
    graph = app.graph()
    shares = HandoverShares()
    old, new = (
        SimpleNamespace(replica="archive", checkpoint=tmp_path / n, sink=SimpleNamespace(share=None))
        for n in ("old", "new")
    )
    for q in (old, new):
        q.checkpoint.mkdir()
    cutoffs.save(old.checkpoint, ((-math.inf, 10.0),))  # the old placement's query, cut by an earlier handover
    queries: dict[str, Any] = {"archive": new, "archive [old]": old}

    def deploy(version: int, at: float) -> None:
        shares.give(app, version, graph, queries, {"archive": ("after", at), "archive [old]": ("before", at)})

    deploy(2, 30.0)
    deploy(2, 40.0)  # the same plan, its switch moved 10 s later before the sites got it
    assert cutoffs.load(new.checkpoint) == ((40.0, math.inf),)
    assert cutoffs.load(old.checkpoint) == ((-math.inf, 10.0),)
    assert new.sink.share.intervals == ((40.0, math.inf),)
    deploy(3, 60.0)  # a later plan version adds to what the queries own
    assert cutoffs.load(new.checkpoint) == ((40.0, math.inf),)
    assert cutoffs.load(old.checkpoint) == ((-math.inf, 10.0),)


def test_a_watermarked_query_is_not_done_before_a_batch_reports_its_watermark() -> None:
    def handle(progress: dict[str, Any] | None) -> Any:
        return SimpleNamespace(isActive=True, lastProgress=progress)

    no_records = handle({"batchId": 0, "eventTime": {}})  # Spark's first batch of a run, before records
    assert reported_watermark(no_records, watermarked=True) is None
    assert reported_watermark(no_records, watermarked=False) == math.inf  # it writes its records as they come
    reported = handle({"batchId": 3, "eventTime": {"watermark": "2026-11-25T04:00:00.000Z"}})
    assert reported_watermark(reported, watermarked=True) == 1795579200.0
    assert reported_watermark(handle(None), watermarked=False) is None  # no batch yet
    assert reported_watermark(None, watermarked=True) is None


class _FakeQuery:
    """A query whose start is recorded; its handle reports a batch once ``ran`` is set."""

    def __init__(self, name: str, started: list[str], watermarked: bool = False) -> None:
        self.replica = name
        self.checkpoint = Path("/state") / name
        self.reader = name
        self.watermarked = watermarked
        self.handle: Any = None
        self.trigger: str | None = None
        self._started = started

    def start(self, app: str, df: Any, trigger: str) -> Any:
        self._started.append(self.replica)
        self.trigger = trigger
        self.handle = SimpleNamespace(isActive=True, lastProgress=None, name=self.replica)
        return self.handle


def test_queries_start_one_after_another_only_until_the_driver_has_run_a_batch(
    tmp_path: Path, monkeypatch: Any
) -> None:
    import hub.engine.builder as builder_module

    started: list[str] = []
    waited: list[str] = []

    def await_first_batch(handle: Any) -> None:
        waited.append(handle.name)
        handle.lastProgress = {"batchId": 0}  # the query ran its first batch

    monkeypatch.setattr(builder_module, "await_first_batch", await_first_batch)
    monkeypatch.setattr(builder_module.ingest_log, "subscribe", lambda *args: None)
    starter = Starter("1 second")

    def deploy(app: str, names: list[str]) -> None:
        deployed = SimpleNamespace(app=SimpleNamespace(name=app), queries={})
        built = {n: (_FakeQuery(n, started), None) for n in names}
        starter.start(deployed, built, tmp_path)  # type: ignore[arg-type]

    deploy("first", ["a", "b", "c"])  # a fresh driver: b waits for a's first batch; by then the driver is warm
    assert (started, waited) == (["a", "b", "c"], ["a"])
    deploy("second", ["d", "e"])  # a re-plan on a warm driver: no first batch to wait for
    assert (started, waited) == (["a", "b", "c", "d", "e"], ["a"])


def test_on_a_driver_a_warm_up_ran_on_the_queries_start_together(tmp_path: Path, monkeypatch: Any) -> None:
    import hub.engine.builder as builder_module

    started: list[str] = []
    waited: list[str] = []
    monkeypatch.setattr(builder_module, "await_first_batch", lambda handle: waited.append(handle.name))
    monkeypatch.setattr(builder_module.ingest_log, "subscribe", lambda *args: None)
    starter = Starter("1 second")
    starter.driver_warmed()
    deployed = SimpleNamespace(app=SimpleNamespace(name="fleet"), queries={})
    built = {n: (_FakeQuery(n, started), None) for n in ("a", "b", "c")}
    starter.start(deployed, built, tmp_path)  # type: ignore[arg-type]
    assert (started, waited) == (["a", "b", "c"], [])


def test_a_query_without_a_window_at_the_hub_runs_at_the_stateless_trigger(tmp_path: Path, monkeypatch: Any) -> None:
    import hub.engine.builder as builder_module

    monkeypatch.setattr(builder_module, "await_first_batch", lambda handle: None)
    monkeypatch.setattr(builder_module.ingest_log, "subscribe", lambda *args: None)
    queries = {"windows": _FakeQuery("windows", [], watermarked=True), "rows": _FakeQuery("rows", [])}
    deployed = SimpleNamespace(app=SimpleNamespace(name="fleet"), queries={})

    split = Starter("470 milliseconds", stateless_trigger="230 milliseconds")
    split.start(deployed, {n: (q, None) for n, q in queries.items()}, tmp_path)  # type: ignore[arg-type]
    assert {n: q.trigger for n, q in queries.items()} == {"windows": "470 milliseconds", "rows": "230 milliseconds"}

    default = Starter("1 second")
    default.start(deployed, {n: (q, None) for n, q in queries.items()}, tmp_path)  # type: ignore[arg-type]
    assert {n: q.trigger for n, q in queries.items()} == {"windows": "1 second", "rows": "230 milliseconds"}

    one = Starter("1 second", stateless_trigger="1 second")
    one.start(deployed, {n: (q, None) for n, q in queries.items()}, tmp_path)  # type: ignore[arg-type]
    assert {n: q.trigger for n, q in queries.items()} == {"windows": "1 second", "rows": "1 second"}

    faster = Starter("100 milliseconds")
    faster.start(deployed, {n: (q, None) for n, q in queries.items()}, tmp_path)  # type: ignore[arg-type]
    assert {n: q.trigger for n, q in queries.items()} == {"windows": "100 milliseconds", "rows": "100 milliseconds"}
