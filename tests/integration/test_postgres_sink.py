"""The PostgreSQL sink against a real server: batches once by id, upserts by key, misfits, a server that goes away."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

pytest.importorskip("psycopg", reason="pip install 'spanedge[postgres]'")

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from hub.engine.connectors.pgsql import TableProblem
from hub.engine.connectors.postgres import PostgresWriter, Result
from simulate.wan import LinkProxy, WanLink
from tests.polling import wait_for

WINDOWS = """
CREATE TABLE windows (
    unit text NOT NULL,
    window_start timestamptz NOT NULL,
    n integer NOT NULL,
    max_c double precision,
    site text,
    PRIMARY KEY (unit, window_start)
);
CREATE TABLE log (unit text, window_start timestamptz, n integer, site text)
"""
LOG = "SELECT unit, extract(epoch FROM window_start), n, site FROM log ORDER BY 1, 2"


def result(unit: str, start: float, n: Any, site: str = "truck-7", **more: Any) -> Result:
    value = {"unit": unit, "window_start": start, "window_end": start + 10, "n": n, **more}
    record = {"site": site, "stream": "unit_stats", "seq": 1, "event_time": start + 10, "key": unit, "value": value}
    return Result(record, orjson.dumps(value).decode())


def writer(dsn: str, table: str = "windows", run: str = "run-1", **options: Any) -> PostgresWriter:
    key = options.pop("key", None)
    return PostgresWriter(
        dsn, table, key, "cold-chain", "to_db-abc", "to_db", "'to_db' (app.py:9)", lambda: run, **options
    )


def rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return [tuple(float(v) if isinstance(v, Decimal) else v for v in row) for row in conn.execute(query)]


class Letters:
    """Collects what the sink files before each commit."""

    def __init__(self) -> None:
        self.filed: list[list[dict[str, Any]]] = []

    def __call__(self, letters: list[bytes]) -> None:
        self.filed.append([orjson.loads(line) for line in letters])


@pytest.fixture
def windows(postgres_dsn: str) -> str:
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(WINDOWS)
    return postgres_dsn


def test_a_batch_is_written_once_per_run_and_its_replay_writes_nothing(windows: str) -> None:
    """The table has no key, so a batch written twice would show twice."""
    sink = writer(windows, "log")
    batch = [result("u1", 0.0, 3), result("u2", 0.0, 5)]
    assert not sink.write(batch, 0, Letters()).skipped
    replay = writer(windows, "log")  # the hub restarted between the commit and Spark's own
    assert replay.write(batch, 0, Letters()).skipped
    assert writer(windows, "log").write([result("u9", 0.0, 1)], 0, Letters()).skipped  # at or below the mark
    assert not replay.write([result("u1", 10.0, 2)], 1, Letters()).skipped
    assert rows(windows, LOG) == [("u1", 0.0, 3, "truck-7"), ("u1", 10.0, 2, "truck-7"), ("u2", 0.0, 5, "truck-7")]
    assert replay.status()["sink_replays_skipped"] == 1
    marks = rows(windows, "SELECT app, query, run, batch_id, sink_table FROM spanedge_sink_batches")
    assert marks == [("cold-chain", "to_db-abc", "run-1", 1, "log")]
    # A checkpoint started afresh under the same query name counts from batch 0 again.
    assert not writer(windows, "log", run="run-2").write([result("u3", 0.0, 7)], 0, Letters()).skipped
    assert ("u3", 0.0, 7, "truck-7") in rows(windows, LOG)


def test_two_writers_of_one_batch_write_it_once(windows: str) -> None:
    """A second hub (or a query restarted while the first still runs) waits on the mark's lock, then skips."""
    first, second = writer(windows, "log"), writer(windows, "log")
    entered, release = threading.Event(), threading.Event()

    def slow_letters(letters: list[bytes]) -> None:
        entered.set()
        assert release.wait(60)

    outcomes: list[Any] = []
    holding = threading.Thread(target=lambda: outcomes.append(first.write([result("u1", 0.0, 1)], 0, slow_letters)))
    holding.start()
    assert entered.wait(60)  # the first holds the mark's row lock, before its commit
    waiting = threading.Thread(target=lambda: outcomes.append(second.write([result("u1", 0.0, 1)], 0, Letters())))
    waiting.start()
    release.set()
    holding.join(60)
    waiting.join(60)
    assert sorted(o.skipped for o in outcomes) == [False, True]
    assert rows(windows, "SELECT unit FROM log") == [("u1",)]


def test_window_results_are_upserted_on_the_primary_key_the_last_one_winning(windows: str) -> None:
    sink = writer(windows)
    sink.write([result("u1", 0.0, 3, max_c=4.5), result("u2", 0.0, 1)], 0, Letters())
    sink.write([result("u1", 0.0, 4, max_c=9.0, site="truck-9")], 1, Letters())
    got = rows(windows, "SELECT unit, n, max_c, site FROM windows ORDER BY unit")
    assert got == [("u1", 4, 9.0, "truck-9"), ("u2", 1, None, "truck-7")]


def test_results_that_do_not_fit_go_to_the_dead_letters_with_their_origin_and_the_rest_is_written(windows: str) -> None:
    letters = Letters()
    batch = [
        result("u1", 0.0, 3),
        result("u2", 0.0, "many"),  # not an integer
        result("u3", 0.0, None),  # NOT NULL
        result("u4", 0.0, {"a": 1}),  # an object for an integer column
        result("u5", 0.0, 2**40),  # out of range
        result("u6", 0.0, 6),
    ]
    done = writer(windows).write(batch, 0, letters)
    assert (done.skipped, done.rows) == (False, 2)
    assert rows(windows, "SELECT unit, n FROM windows ORDER BY unit") == [("u1", 3), ("u6", 6)]
    (filed,) = letters.filed
    assert [(f["key"], f["column"], f["error"]) for f in filed] == [
        ("u4", "n", "Misfit"),
        ("u2", "n", "InvalidTextRepresentation"),
        ("u3", "n", "NotNullViolation"),
        ("u5", None, "NumericValueOutOfRange"),
    ]
    first = filed[1]
    assert first["reason"] == "sink 'to_db' (app.py:9): table windows: invalid input syntax for type integer: \"many\""
    assert (first["operator"], first["site"], first["source_site"], first["stream"]) == (
        "to_db",
        "hub",
        "truck-7",
        "unit_stats",
    )
    assert (first["event_time"], first["table"], orjson.loads(first["payload"])["n"]) == (10.0, "windows", "many")
    assert filed[0]["reason"].endswith("an object does not fit column 'n' (integer)")


def test_a_table_the_sink_cannot_use_fails_the_batch_with_what_to_do(postgres_dsn: str) -> None:
    with pytest.raises(TableProblem, match=r"sink 'to_db' \(app.py:9\): table missing does not exist in the database"):
        writer(postgres_dsn, "missing").write([result("u1", 0.0, 1)], 0, Letters())
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE SCHEMA plant")
        conn.execute("CREATE TABLE plant.w (unit text, n integer)")
    with pytest.raises(
        TableProblem, match=r"no primary key or unique index on \(unit\).*CREATE UNIQUE INDEX ON plant.w"
    ):
        writer(postgres_dsn, "plant.w", key=("unit",)).write([result("u1", 0.0, 1)], 0, Letters())
    writer(postgres_dsn, "plant.w").write([result("u1", 0.0, 1)], 0, Letters())
    assert rows(postgres_dsn, "SELECT unit, n FROM plant.w") == [("u1", 1)]
    assert rows(postgres_dsn, "SELECT query, batch_id FROM plant.spanedge_sink_batches") == [("to_db-abc", 0)]


class Relay:
    """A TCP relay to the database on its own event loop: cut, it drops its connections and refuses new ones."""

    def __init__(self, host: str, port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.link = WanLink("hub", "db", delay_ms=0)
        self.proxy = LinkProxy(self.link, "hub", "db", port, host)
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(30)

    def cut(self) -> None:
        self.loop.call_soon_threadsafe(self.link.partition)

    def heal(self) -> None:
        self.loop.call_soon_threadsafe(self.link.heal)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture
def relay(windows: str) -> Iterator[tuple[Relay, str]]:
    params = conninfo_to_dict(windows)
    target = urlsplit(f"//{params.get('host', '127.0.0.1')}:{params.get('port', 5432)}")
    relay = Relay(target.hostname or "127.0.0.1", target.port or 5432)
    params.update(host="127.0.0.1", port=str(relay.proxy.port))
    try:
        yield relay, make_conninfo(**params)
    finally:
        relay.close()


def test_a_database_that_goes_away_is_retried_with_backoff_and_loses_nothing(
    relay: tuple[Relay, str], windows: str
) -> None:
    proxy, dsn = relay
    sink = writer(dsn, delays=(0.05, 0.1, 0.2))
    sink.write([result("u1", 0.0, 1)], 0, Letters())
    assert sink.status()["sink_up"] is True
    proxy.cut()
    done: list[Any] = []
    writing = threading.Thread(target=lambda: done.append(sink.write([result("u2", 0.0, 2)], 1, Letters())))
    writing.start()
    wait_for(lambda: sink.status()["sink_connect_failures"] >= 3, 60, "the sink to fail to reach the database")
    status = sink.status()
    assert status["sink_up"] is False
    assert status["sink_error"]
    assert not done
    proxy.heal()
    writing.join(60)
    assert not writing.is_alive()
    assert not done[0].skipped
    assert sink.status()["sink_up"] is True
    assert sink.status()["sink_error"] is None
    assert rows(windows, "SELECT unit, n FROM windows ORDER BY unit") == [("u1", 1), ("u2", 2)]
    sink.close()
