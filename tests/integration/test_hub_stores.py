"""Hub windows written by Spark to PostgreSQL and to a Parquet dataset, each window once across a hub restart.

The hub stops after its sink wrote a micro-batch but before the sink's own
file and Spark's commit log say so: Spark replays the batch, and the
database (by the batch's id) or the dataset (by the batch's partition)
keeps it once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from hub.engine.engine import Engine
from hub.ingest.consumer import Ingest
from spanedge import App, agg, sinks
from spanedge.operators import SinkSpec
from spanedge.sites import parse_sites
from spanedge.wire.batch import Record
from tests.integration.hubkit import T0, Publisher, broker_of, make_plan
from tests.integration.test_hub_engine import MIX_SITES, caught_up
from tests.polling import wait_for

pytestmark = pytest.mark.spark

Windows = list[tuple[str, float, int]]


def crash_after_the_sink_wrote(engine: Engine, app: str) -> tuple[Path, int]:
    """Stop the engine and make its last micro-batch look unfinished to Spark and to the sink's own file.

    Returns the query's checkpoint and the id of the batch Spark will replay.
    """
    engine.stop()
    checkpoint = next(engine.checkpoint_root(app).iterdir())
    commits = [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    last = max(commits, key=lambda p: int(p.name))
    last.unlink()
    last.with_name(f".{last.name}.crc").unlink(missing_ok=True)
    (checkpoint / "sink.json").write_text(json.dumps({"batch": int(last.name) - 1}))
    return checkpoint, int(last.name)


def run_twice(
    spark: Any, mosquitto: Any, tmp_path: Path, spec: SinkSpec, windows: Callable[[], Windows]
) -> tuple[Engine, App, int]:
    """Run an app whose hub window writes to ``spec``, crash it after a write, run it again; check every window once.

    Returns the second engine (running), the app and the replayed batch's id.
    """
    sites = parse_sites(MIX_SITES.replace("BROKER", mosquitto.url))
    app = App("stores")
    app.source("a", time_field="t").window(key="id", size="5s", aggs={"n": agg.count()}, name="w").sink(
        spec, name="to_w"
    )
    plan = make_plan(app, sites, at_hub={"w", "to_w"}, singletons={"w", "to_w"})
    ingest = Ingest(broker_of(mosquitto.url), tmp_path / "ingest", client_id=f"hub-test-{spec.kind}")
    ingest.start()
    publisher = Publisher(mosquitto.url, app.name)
    rows = [{"id": f"k{i % 2}", "t": T0 + i} for i in range(40)]
    expected = sorted(
        {
            (v["id"], (v["t"] // 5) * 5, sum(1 for r in rows if r["id"] == v["id"] and r["t"] // 5 == v["t"] // 5))
            for v in rows
        }
    )
    # Spark's append mode writes the windows in the micro-batch after the one that moved the watermark, so
    # the last batch before the stop is one that wrote windows.
    engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds", close_windows=False)
    try:
        engine.deploy(app, plan)
        publisher.send([Record("s1", "a", i, v["t"], v["id"], v) for i, v in enumerate(rows[:20])])
        wait_for(lambda: len(windows()) >= 6, 90, "the first windows")  # [T0, T0+15) closed by the watermark
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        before = windows()
        _, replayed = crash_after_the_sink_wrote(engine, app.name)
        engine = Engine(tmp_path, sites, spark=spark, trigger="250 milliseconds", close_windows=False)
        engine.deploy(app, plan)
        rest = [*rows[20:], {"id": "z", "t": T0 + 100}]
        publisher.send([Record("s1", "a", 20 + i, v["t"], v["id"], v) for i, v in enumerate(rest)])
        wait_for(lambda: len(windows()) >= len(expected), 90, "every window")
        wait_for(lambda: caught_up(engine, app.name), 60, "the engine to process the whole log")
        assert before == [w for w in expected if w in before]
        assert windows() == expected
    except BaseException:
        engine.stop()
        raise
    finally:
        publisher.close()
        ingest.stop()
    return engine, app, replayed


WINDOWS = (
    "CREATE TABLE windows (id text NOT NULL, window_start timestamptz NOT NULL, window_end timestamptz, n integer)"
)


def test_windows_reach_postgresql_once_across_a_restart_between_the_write_and_the_commit(
    spark: Any, mosquitto: Any, tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table has no key: a replayed batch written again would show as duplicate rows."""
    import psycopg

    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(WINDOWS)
    monkeypatch.setenv("SPANEDGE_TEST_STORES_DSN", postgres_dsn)

    def windows() -> Windows:
        with psycopg.connect(postgres_dsn) as conn:
            found = conn.execute("SELECT id, extract(epoch FROM window_start), n FROM windows ORDER BY 1, 2").fetchall()
        return [(key, float(start) if isinstance(start, Decimal) else start, n) for key, start, n in found]

    spec = sinks.postgres("windows", dsn_env="SPANEDGE_TEST_STORES_DSN")
    engine, app, replayed = run_twice(spark, mosquitto, tmp_path, spec, windows)
    try:
        figures = engine.metrics()[app.name]["queries"]["to_w"]
        assert figures["sink_replays_skipped"] == 1, f"batch {replayed} was not found written: {figures}"
        assert figures["sink_up"] is True
        with psycopg.connect(postgres_dsn) as conn:
            ((app_name, batch),) = conn.execute("SELECT app, batch_id FROM spanedge_sink_batches").fetchall()
        assert app_name == app.name
        assert batch > replayed
    finally:
        engine.stop()


def test_windows_reach_a_parquet_dataset_once_in_partitions_of_app_sink_and_date(
    spark: Any, mosquitto: Any, tmp_path: Path
) -> None:
    import orjson
    import pyarrow.dataset as ds

    out = tmp_path / "lake"

    def dataset() -> Any:
        try:
            return ds.dataset(out, format="parquet", partitioning="hive").to_table()
        except (OSError, ValueError):  # nothing yet, or Spark moving a batch's partition in
            return None

    def windows() -> Windows:
        table = dataset()
        if table is None or "value" not in table.column_names:  # nothing written yet
            return []
        found = [orjson.loads(v) for v in table.column("value").to_pylist()]
        return sorted((w["id"], w["window_start"], w["n"]) for w in found)

    engine, app, replayed = run_twice(spark, mosquitto, tmp_path, sinks.parquet(str(out)), windows)
    engine.stop()
    table = dataset()
    assert set(table.column("app").to_pylist()) == {app.name}
    assert set(table.column("sink").to_pylist()) == {"to_w"}
    assert {str(d) for d in table.column("date").to_pylist()} == {"2023-11-14"}
    assert {p.relative_to(out).parts[:3] for p in out.rglob("*.parquet")} == {
        ("app=stores", "sink=to_w", "date=2023-11-14")
    }
    batches = {p.parent.name for p in out.rglob("*.parquet")}
    assert any(b.endswith(f"-{replayed:012d}") for b in batches), (replayed, sorted(batches))
