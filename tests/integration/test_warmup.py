"""The standby's throwaway warm-up query runs one batch on real Spark and marks the session warm."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from hub.engine.engine import Engine
from hub.engine.warmup import WARMED_KEY, keep_warm, warm_up, warmed
from spanedge.sites import parse_sites
from tests.polling import wait_for

pytestmark = pytest.mark.spark

SITES = 'sites:\n  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883"}\n'


def test_the_warm_up_runs_its_batch_leaves_nothing_behind_and_an_engine_then_starts_queries_together(
    spark: Any, tmp_path: Path
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    try:
        assert not warmed(spark)
        took = warm_up(spark, scratch=scratch)
        assert took > 0
        assert warmed(spark)
        assert not any(q.name == "spanedge:warm-up" for q in spark.streams.active)
        assert list(scratch.iterdir()) == []
        engine = Engine(tmp_path / "state", parse_sites(SITES), spark=spark)
        try:
            assert engine._queries.starter._driver_warm()
        finally:
            engine.stop()
    finally:
        spark.conf.unset(WARMED_KEY)


def test_keeping_warm_runs_one_python_job_that_succeeds(spark: Any) -> None:
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup())
    keep_warm(spark)
    new = set(tracker.getJobIdsForGroup()) - before
    assert new

    # the tracker hears of a job's end from Spark's listener bus, a little after count() returned
    def ended() -> set[str] | None:
        statuses = {tracker.getJobInfo(job).status for job in new}
        return None if "RUNNING" in statuses else statuses

    assert wait_for(ended, 60, "the warm-keeping job to end") == {"SUCCEEDED"}


def test_a_warm_up_the_hub_cancels_on_taking_the_lease_stops_and_leaves_nothing(spark: Any, tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()  # the lease was taken before the throwaway batch could end
    assert warm_up(spark, scratch=tmp_path, cancel=cancel) is None
    assert not warmed(spark)
    assert not any(q.name == "spanedge:warm-up" for q in spark.streams.active)
    assert list(tmp_path.iterdir()) == []
