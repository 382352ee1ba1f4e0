"""The settings of the hub's SparkSession: the hub's own, those given with ``spanedge hub --conf``, RocksDB's file system."""

from __future__ import annotations

import statistics

import pytest

from hub.engine.session import (
    CHECKSUMMED_LOCAL_FS,
    DEFAULT_STATELESS_TRIGGER,
    DEFAULT_TRIGGER,
    DEFAULTS,
    STATE_STORE_PROVIDER,
    batch_intervals,
    session_settings,
    stateless_trigger_of,
    trigger_seconds,
)

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
FILE_SYSTEM = "spark.hadoop.fs.file.impl"


def test_without_settings_the_hub_uses_its_own() -> None:
    assert session_settings() == DEFAULTS
    assert session_settings({}) == DEFAULTS


def test_given_settings_go_over_the_hubs_own() -> None:
    settings = session_settings({"spark.sql.shuffle.partitions": "8", "spark.executor.memory": "2g"})
    assert settings["spark.sql.shuffle.partitions"] == "8"
    assert settings["spark.executor.memory"] == "2g"
    assert settings[FILE_SYSTEM] == DEFAULTS[FILE_SYSTEM]  # checkpoints still skip Hadoop's checksum files


def test_the_rocksdb_state_store_gets_the_checksummed_file_system_it_casts_to() -> None:
    settings = session_settings({STATE_STORE_PROVIDER: ROCKSDB})
    assert settings[STATE_STORE_PROVIDER] == ROCKSDB
    assert CHECKSUMMED_LOCAL_FS.items() <= settings.items()
    assert DEFAULTS[FILE_SYSTEM] != settings[FILE_SYSTEM]


def test_a_file_system_given_with_rocksdb_is_kept() -> None:
    settings = session_settings({STATE_STORE_PROVIDER: ROCKSDB, FILE_SYSTEM: "org.example.SharedFileSystem"})
    assert settings[FILE_SYSTEM] == "org.example.SharedFileSystem"


def test_a_setting_is_key_equals_value_with_a_spark_key() -> None:
    from hub.engine.session import parse_setting

    assert parse_setting("spark.executor.memory = 2g") == ("spark.executor.memory", "2g")
    assert parse_setting("spark.executor.extraJavaOptions=-Da=b") == ("spark.executor.extraJavaOptions", "-Da=b")
    for wrong in ("spark.executor memory=2g", "memory=2g", "spark.executor.memory", "spark.master=local"):
        with pytest.raises(ValueError, match="spark"):
            parse_setting(wrong)


def waits_after_window_ends(interval_ms: int, size_ms: int, windows: int = 2000) -> list[int]:
    """Milliseconds from each window's end to the next micro-batch start after it, as Spark schedules them.

    Spark starts a micro-batch at every multiple of the interval since the
    epoch; one that starts right at a window's end comes before the record
    that closes the window, so that window waits for the next.
    """
    return [(-end) % interval_ms or interval_ms for end in range(size_ms, size_ms * windows, size_ms)]


@pytest.mark.parametrize("size_s", [1, 2, 5, 10, 15, 30, 60, 300, 3600])
def test_the_default_trigger_starts_micro_batches_at_every_phase_of_a_window_end(size_s: int) -> None:
    interval_ms = int(DEFAULT_TRIGGER.split()[0])
    assert DEFAULT_TRIGGER.endswith(" milliseconds")
    waits = waits_after_window_ends(interval_ms, size_s * 1000)
    assert len(set(waits)) == interval_ms // 10  # every 10 ms of the interval
    assert statistics.fmean(waits) < 0.6 * interval_ms
    # an interval that divides the second: a micro-batch at every window's end, each window waits all of it
    assert set(waits_after_window_ends(500, size_s * 1000)) == {500}


@pytest.mark.parametrize(
    ("trigger", "seconds"),
    [
        (DEFAULT_TRIGGER, 0.47),
        ("1 second", 1.0),
        ("2 Seconds", 2.0),
        ("interval 250 milliseconds", 0.25),
        ("1 minute", 60.0),
        ("availableNow", None),  # not a processing-time trigger: no schedule to seal for
        ("0 seconds", None),
        ("470 fortnights", None),
    ],
)
def test_the_trigger_interval_is_read_from_sparks_spelling(trigger: str, seconds: float | None) -> None:
    assert trigger_seconds(trigger) == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize(
    ("trigger", "stateless", "expected"),
    [
        (DEFAULT_TRIGGER, None, DEFAULT_STATELESS_TRIGGER),  # the hub's defaults: two intervals
        ("2 seconds", None, DEFAULT_STATELESS_TRIGGER),
        ("100 milliseconds", None, "100 milliseconds"),  # never slower than the windows
        ("230 milliseconds", None, "230 milliseconds"),
        ("availableNow", None, "availableNow"),  # not an interval: every query's
        ("0 seconds", None, "0 seconds"),
        (DEFAULT_TRIGGER, DEFAULT_TRIGGER, DEFAULT_TRIGGER),  # given: one interval for every query
        ("100 milliseconds", "1 second", "1 second"),
    ],
)
def test_queries_without_a_window_run_at_230_ms_unless_told_or_the_trigger_is_shorter(
    trigger: str, stateless: str | None, expected: str
) -> None:
    assert stateless_trigger_of(trigger, stateless) == expected


def test_the_ingest_seals_for_each_distinct_interval_of_the_triggers_given() -> None:
    # the hub's defaults: the windows' 470 ms and 230 ms for the queries without a window
    assert batch_intervals(DEFAULT_TRIGGER) == [pytest.approx(0.23), pytest.approx(0.47)]
    assert batch_intervals(DEFAULT_TRIGGER, DEFAULT_TRIGGER) == [pytest.approx(0.47)]
    assert batch_intervals("1 second", "230 milliseconds") == [pytest.approx(0.23), 1.0]
    assert batch_intervals("100 milliseconds") == [pytest.approx(0.1)]
    assert batch_intervals("availableNow", "0 seconds") == []
