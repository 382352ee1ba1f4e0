"""The data plane as a process: SIGKILL it while its PostgreSQL sink writes a micro-batch, restart it, every window once."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spanedge.loader import load_app
from spanedge.sites import parse_sites
from spanedge.wire.batch import Record
from tests.integration.dataplanekit import SITES, Dataplane
from tests.integration.hubkit import T0, Publisher, make_plan
from tests.polling import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

WINDOW_APP = """
from spanedge import App, agg, sinks

app = App("killdb")
app.source("readings", time_field="ts").window(
    key="unit", size="5s", aggs={"n": agg.count()}, name="per_unit", scope="global"
).sink(sinks.postgres("windows", dsn_env="SPANEDGE_TEST_KILL_DSN"), name="to_db")
"""
# No key: a window written twice would show twice.
TABLE = "CREATE TABLE windows (unit text, window_start timestamptz, window_end timestamptz, n integer)"


def test_sigkill_while_the_sink_writes_a_batch_loses_no_window_and_repeats_none(
    mosquitto: Any, tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test holds a lock on the table, so the sink's transaction waits mid-batch; then the hub is killed."""
    import psycopg

    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(TABLE)
    monkeypatch.setenv("SPANEDGE_TEST_KILL_DSN", postgres_dsn)
    app_file = tmp_path / "app.py"
    app_file.write_text(WINDOW_APP)
    sites_file = tmp_path / "sites.yaml"
    sites_file.write_text(SITES.replace("BROKER", mosquitto.url))
    app = load_app(app_file)
    plan_file = tmp_path / "plan.json"
    hub_ops = {"per_unit", "to_db"}
    plan_file.write_text(
        make_plan(app, parse_sites(sites_file.read_text()), at_hub=hub_ops, singletons=hub_ops).to_json()
    )
    args = [
        "--sites", str(sites_file), "--state-dir", str(tmp_path / "state"), "--app", str(app_file),
        "--plan", str(plan_file), "--trigger", "5 seconds", "--client-id", "hub-postgres-kill-test",
    ]  # fmt: skip
    log = tmp_path / "dataplane.log"
    dataplane = Dataplane(args, log)
    rows = [{"unit": f"u{i % 3}", "ts": T0 + i * 0.5} for i in range(120)]
    rows.append({"unit": "flush", "ts": T0 + 300})  # moves the watermark past every window
    expected = sorted(
        {
            (
                r["unit"],
                (r["ts"] // 5) * 5,
                sum(1 for o in rows if o["unit"] == r["unit"] and o["ts"] // 5 == r["ts"] // 5),
            )
            for r in rows[:-1]
        }
    )
    records = [Record("s1", "readings", i, r["ts"], r["unit"], r) for i, r in enumerate(rows)]

    def windows() -> list[tuple[str, float, int]]:
        with psycopg.connect(postgres_dsn) as conn:
            found = conn.execute("SELECT unit, extract(epoch FROM window_start), n FROM windows").fetchall()
        return sorted((u, float(s) if isinstance(s, Decimal) else s, n) for u, s, n in found if u != "flush")

    def sink_waits_on_the_lock() -> bool:
        with psycopg.connect(postgres_dsn) as conn:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO \"windows\"%%'"
            ).fetchone()
        return bool(waiting and waiting[0])

    publisher = Publisher(mosquitto.url, app.name)
    lock = psycopg.connect(postgres_dsn)
    try:
        lock.execute("LOCK TABLE windows IN ACCESS EXCLUSIVE MODE")  # held until the transaction ends
        dataplane.start()
        wait_for(dataplane.ready.is_set, 240, "the data plane to start (see dataplane.log)")
        publisher.send(records, batch=len(records))  # one message, one micro-batch
        wait_for(sink_waits_on_the_lock, 240, "the sink's transaction to wait on the table (see dataplane.log)")
        dataplane.kill()
        assert not dataplane.alive()
        lock.rollback()  # the killed hub's transaction gets the lock, finds its client gone and rolls back
        assert windows() == []
        dataplane.start()
        wait_for(dataplane.ready.is_set, 240, "the data plane to restart (see dataplane.log)")
        wait_for(lambda: len(windows()) >= len(expected), 240, "every window after the restart")
    finally:
        lock.close()
        publisher.close()
        dataplane.terminate()
        print(log.read_text()[-5000:])  # shown if the test fails
    assert windows() == expected
