"""Failover under load: the cold-chain example with two hubs on ``--ha`` (real PostgreSQL, Mosquitto, Spark).

The leader is SIGKILLed mid-stream (its process group, Spark included) and
comes back as a standby; later the new leader is paused (SIGSTOP) across its
lease's expiry and resumed. Every result, global ones included, must arrive
exactly once with the reference's values, and the paused leader must exit
without writing anything once another hub took over.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import COLD_CHAIN, _require_parts, write_sites

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

KILL = "kill-hub:3s@15s"
PAUSE = "pause-hub:20s@45s"


@pytest.fixture(scope="module")
def failover(tmp_path_factory: pytest.TempPathFactory, postgres_server: Any) -> Iterator[Any]:
    from simulate.runner import Options, run

    _require_parts()
    directory = tmp_path_factory.mktemp("ha-failover")
    with postgres_server.database() as dsn:
        opts = Options(
            sites=write_sites(directory, {}),
            app=COLD_CHAIN / "app.py",
            duration=80,
            faults=[KILL, PAUSE],
            mode="managed",
            run_dir=directory / "run",
            ha=dsn,
        )
        yield asyncio.run(run(opts))


def test_every_result_arrives_once_and_exact_across_a_kill_and_a_pause(failover: Any) -> None:
    for check in failover.report.sinks:
        assert check.unchecked is None, check
        assert check.checked > 0, f"{check.sink}: nothing to check; see {failover.run_dir}"
        exact = (check.missing, check.lost_records, check.duplicates, check.wrong, check.unexpected)
        assert exact == (0, 0, 0, 0, 0), (check.sink, check.examples, failover.run_dir)
    assert failover.report.lost == 0
    assert failover.report.duplicates == 0
    assert not failover.report.problems, failover.report.problems
    assert next(c for c in failover.report.sinks if c.sink == "fleet_alerts").checked > 0


def test_the_standby_took_over_each_time_and_the_paused_leader_wrote_nothing_after(failover: Any) -> None:
    """Whichever hub won the first election is killed; the other leads, is paused and steps down."""
    events = "\n".join(failover.events)
    killed = re.search(r"killed (hub(?:-b)?) \(SIGKILL of its process group, Spark included\)", events)
    assert killed, events
    first = killed[1]
    second = "hub-b" if first == "hub" else "hub"
    assert f"paused {second} (SIGSTOP of its process group)" in events, events
    assert "it had lost its lease, exited with status 75" in events, events
    logs = failover.run_dir / "logs"
    paused_log = (logs / f"{second}.log").read_text(errors="replace")
    killed_log = (logs / f"{first}.log").read_text(errors="replace")
    assert f"hub {second} leads under epoch 2" in paused_log
    assert f"hub {first} leads under epoch 3" in killed_log
    paused = paused_log[paused_log.index("leads under epoch 2") :]
    lost = paused.index("this hub stops leading now")
    # after the lease's loss nothing but the exit: no plan message, no batch written
    assert not re.search(r"plan message \d+ for site", paused[lost:]), paused[lost:]
