"""The hub's row schemas come from the one definition of a log line."""

from __future__ import annotations

from hub.engine import rows, source
from spanedge.wire.log_line import COLUMNS


def test_the_spark_and_arrow_schemas_are_the_log_lines() -> None:
    assert rows.SCHEMA_DDL == "site STRING, stream STRING, seq BIGINT, event_time DOUBLE, key STRING, value STRING"
    assert tuple(rows.ROW_SCHEMA.names) == rows.COLUMNS == tuple(name for name, _ in COLUMNS)
    assert f"app STRING, {rows.SCHEMA_DDL}" == source.SCHEMA_DDL
    assert source.ROW_SCHEMA == rows.ROW_SCHEMA
