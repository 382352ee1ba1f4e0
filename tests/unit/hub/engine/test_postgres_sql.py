"""The PostgreSQL sink's SQL, its table's key, and how a result's fields become a row."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

pytest.importorskip("psycopg", reason="pip install 'spanedge[postgres]'")

from psycopg.types.json import Jsonb

from hub.engine.connectors import pgsql
from hub.engine.connectors.pgsql import Column, Misfit, TableProblem, Target

COLUMNS = [
    ("id", "text", "text", "S"),
    ("window_start", "timestamp with time zone", "timestamptz", "D"),
    ("n", "integer", "int4", "N"),
    ("site", "text", "text", "S"),
    ("value", "jsonb", "jsonb", "U"),
]
PRIMARY = [(True, ["id", "window_start"]), (False, ["n"])]


def target(key: tuple[str, ...] = ("id", "window_start")) -> Target:
    return pgsql.target_of(("results",), COLUMNS, PRIMARY, key)


def test_without_a_key_a_row_is_inserted() -> None:
    statement = pgsql.insert(Target(("results",), {}), ("id", "n"))
    assert statement.as_string() == 'INSERT INTO "results" ("id", "n") VALUES (%s, %s)'


def test_with_a_key_a_row_replaces_the_one_with_the_same_key() -> None:
    statement = pgsql.insert(target(), ("id", "window_start", "n"))
    assert statement.as_string() == (
        'INSERT INTO "results" ("id", "window_start", "n") VALUES (%s, %s, %s)'
        ' ON CONFLICT ("id", "window_start") DO UPDATE SET "n" = EXCLUDED."n"'
    )
    only_key = pgsql.insert(target(), ("id", "window_start"))
    assert only_key.as_string().endswith('ON CONFLICT ("id", "window_start") DO NOTHING')


def test_a_batch_counts_as_new_only_after_the_last_one_of_its_run_or_in_a_new_run() -> None:
    statement = pgsql.mark(("analytics", "results")).as_string()
    assert statement.startswith('INSERT INTO "analytics"."spanedge_sink_batches" AS m')
    assert "ON CONFLICT (app, query) DO UPDATE SET" in statement
    assert statement.endswith("WHERE m.run <> EXCLUDED.run OR m.batch_id < EXCLUDED.batch_id RETURNING m.batch_id")
    created = pgsql.create_marks(("results",)).as_string()
    assert created.startswith('CREATE TABLE IF NOT EXISTS "spanedge_sink_batches" (')
    assert "PRIMARY KEY (app, query)" in created


def test_names_are_quoted_as_written() -> None:
    assert pgsql.quoted(("Analytics", "results")) == '"Analytics"."results"'
    assert pgsql.table_name("analytics.results") == ("analytics", "results")


def test_the_key_is_the_primary_key_unless_named_and_a_named_key_needs_its_unique_index() -> None:
    assert pgsql.target_of(("results",), COLUMNS, PRIMARY, None).key == ("id", "window_start")
    assert pgsql.target_of(("results",), COLUMNS, [], None).key == ()
    assert target(("n",)).key == ("n",)
    with pytest.raises(
        TableProblem, match=r"no primary key or unique index on \(site\).*CREATE UNIQUE INDEX ON results"
    ):
        target(("site",))
    with pytest.raises(TableProblem, match="has no column 'sensor' of the sink's key; its columns: id, window_start"):
        target(("sensor",))


def test_a_row_takes_the_fields_named_like_columns_the_value_s_over_the_envelope_s() -> None:
    record = {
        "site": "truck-7",
        "stream": "w",
        "seq": 4,
        "event_time": 10.0,
        "key": "u1",
        "value": {"id": "u1", "window_start": 0.0, "n": 3, "site": "north", "extra": 1},
    }
    columns, params = pgsql.row_of(target(), record)
    assert columns == ("id", "window_start", "n", "site", "value")
    assert params[:4] == ("u1", datetime(1970, 1, 1, tzinfo=UTC), 3, "north")
    assert isinstance(params[4], Jsonb)
    assert params[4].obj == record["value"]
    envelope_only = pgsql.row_of(pgsql.target_of(("r",), COLUMNS, [], None), {**record, "value": 5})
    assert envelope_only[0] == ("site", "value")
    assert envelope_only[1][0] == "truck-7"


def test_a_result_that_cannot_make_a_row_is_a_misfit_naming_the_column() -> None:
    with pytest.raises(Misfit, match="no value for 'window_start', a column of the key of table results") as err:
        pgsql.row_of(target(), {"value": {"id": "u1", "n": 1}})
    assert err.value.column == "window_start"
    only_other = pgsql.target_of(("r",), [("a", "integer", "int4", "N")], [], None)
    with pytest.raises(Misfit, match=r"none of its fields \(event_time, key, seq, site, stream, value, x\)"):
        pgsql.row_of(only_other, {"value": {"x": 1}})


def column(base: str, category: str, type_: str = "t") -> Column:
    return Column("c", type_, base, category)


def test_values_are_adapted_to_their_column() -> None:
    assert pgsql.adapt({"a": [1]}, column("text", "S")) == '{"a":[1]}'
    assert pgsql.adapt([1, 2], column("_int4", "A")) == [1, 2]
    assert pgsql.adapt(1_700_000_000.5, column("timestamptz", "D")) == datetime(
        2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC
    )
    assert pgsql.adapt(0, column("timestamp", "D")) == datetime(1970, 1, 1)
    assert pgsql.adapt(86_400 * 2, column("date", "D")) == date(1970, 1, 3)
    assert pgsql.adapt("2024-01-01T00:00:00Z", column("timestamptz", "D")) == "2024-01-01T00:00:00Z"
    assert pgsql.adapt("12", column("int4", "N")) == "12"  # PostgreSQL reads it, or refuses it
    assert pgsql.adapt(None, column("int4", "N")) is None


@pytest.mark.parametrize(
    ("value", "base", "category", "reason"),
    [
        ({"a": 1}, "int4", "N", "an object does not fit column 'c' (t)"),
        ([1], "float8", "N", "a list does not fit column 'c' (t)"),
        (float("nan"), "timestamptz", "D", "nan is no time for column 'c' (t)"),
        (True, "timestamptz", "D", "True is no time for column 'c' (t)"),
        (1e20, "timestamptz", "D", "1e+20 s is out of range for column 'c' (t)"),
    ],
)
def test_values_that_cannot_fit_their_column_are_misfits(value: object, base: str, category: str, reason: str) -> None:
    with pytest.raises(Misfit) as err:
        pgsql.adapt(value, column(base, category))
    assert err.value.reason == reason
    assert err.value.column == "c"
