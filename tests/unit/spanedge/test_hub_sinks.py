"""The hub's sinks in an app: ``sinks.postgres`` and ``sinks.parquet`` are checked when built and run at the hub."""

from __future__ import annotations

import pytest

from placement import solve
from spanedge import App, agg, sinks
from spanedge.errors import InfeasiblePlacement, InvalidDataflow
from spanedge.operators import PostgresSinkSpec
from spanedge.scope import Scope
from spanedge.sites import Sites

SITES = Sites.of(
    {
        "sites": {
            "cloud": {"tier": "hub", "cpu": 8.0, "broker": "mqtt://localhost:1883"},
            "a": {"tier": "spoke", "broker": "mqtt://localhost:1884", "streams": {"r": {"topic": "t/#", "rate": 10}}},
        },
        "default_link": {"latency_ms": 50, "bandwidth_mbps": 100},
    }
)


def test_the_postgres_sink_holds_its_table_key_and_the_name_of_its_connection_string() -> None:
    spec = sinks.postgres("analytics.windows", key=["unit", "window_start"], dsn_env="PLANT_DB")
    assert spec == PostgresSinkSpec("postgres", "analytics.windows", dsn_env="PLANT_DB", key=("unit", "window_start"))
    assert sinks.postgres("w", key="unit").key == ("unit",)
    assert sinks.postgres("w") == PostgresSinkSpec("postgres", "w", dsn_env="SPANEDGE_PG_DSN", key=None)
    assert sinks.parquet("s3a://lake/results") == sinks.parquet("s3a://lake/results")
    assert sinks.postgres("w").hub_only
    assert sinks.parquet("/data").hub_only
    assert not sinks.file("/data").hub_only


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: sinks.postgres("a.b.c"), r"the table must be 'name' or 'schema.name'"),
        (lambda: sinks.postgres("drop table;"), r"the table must be 'name' or 'schema.name'"),
        (lambda: sinks.postgres("w", key=[]), r"key=\[\]\): the key must be one or more column names"),
        (lambda: sinks.postgres("w", key=["a b"]), r"the key must be one or more column names"),
        (lambda: sinks.postgres("w", dsn_env="postgresql://u:secret@h/db"), r"dsn_env is the name of an environment"),
        (lambda: sinks.parquet(""), r"the path is empty"),
    ],
)
def test_bad_arguments_are_refused_when_the_app_is_built(make: object, message: str) -> None:
    with pytest.raises(InvalidDataflow, match=message):
        make()  # type: ignore[operator]


def test_hub_sinks_run_at_the_hub_and_refuse_local_scope() -> None:
    app = App("db")
    stream = app.source("r").map(lambda r: r, name="m")
    stream.sink(sinks.postgres("w"), name="to_db")
    stream.sink(sinks.parquet("/data/lake"), name="to_lake")
    assert app.operators["to_db"].scope is Scope.GLOBAL
    assert app.operators["to_lake"].scope is Scope.GLOBAL
    with pytest.raises(InvalidDataflow, match=r"a postgres sink is written by the hub; drop scope='local'"):
        stream.sink(sinks.postgres("w"), scope="local")
    plan = solve(app, SITES)
    assert plan.site_of("to_db") == "cloud"
    assert plan.site_of("to_lake") == "cloud"
    assert plan.site_of("m@a") == "cloud"  # a sink runs where its input runs


def test_a_hub_sink_after_a_local_window_says_to_feed_it_from_the_hub() -> None:
    app = App("db")
    app.source("r", time_field="ts").window(key="u", size="10s", aggs={"n": agg.count()}, scope="local", name="w").sink(
        sinks.postgres("w"), name="to_db"
    )
    with pytest.raises(
        InfeasiblePlacement,
        match=r"sink 'to_db' .* is a postgres sink, which the hub writes, .*can only run at a; .*\(a @global_ map",
    ):
        solve(app, SITES)
