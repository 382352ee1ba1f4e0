"""The process's fence: nothing installed passes; an installed lease refuses once it is over."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hub.ha.errors import StaleEpoch
from hub.ha.lease import Lease
from hub.ha.memory import MemoryLeaseStore
from hub.ingest import fence
from hub.ingest.log import AppLog


@pytest.fixture
def clock() -> Iterator[list[float]]:
    now = [0.0]
    yield now
    fence.install(None)


def test_without_a_fence_every_write_passes() -> None:
    fence.check("anything")


def test_the_ingest_log_refuses_to_append_once_the_lease_is_over(tmp_path: Path, clock: list[float]) -> None:
    lease = Lease(MemoryLeaseStore(lambda: clock[0]), "hub-a", ttl_s=10, margin_s=2, clock=lambda: clock[0])
    assert lease.try_acquire()
    fence.install(lease.check)
    log = AppLog(tmp_path / "app")
    log.append(b'{"a":1}\n', latest=1.0)
    log.flush()
    before = log.position
    clock[0] = 8.5  # paused past renewed_at + ttl - margin
    with pytest.raises(StaleEpoch, match="append to an ingest log"):
        log.append(b'{"a":2}\n', latest=2.0)
    with pytest.raises(StaleEpoch, match="seal"):
        log.seal()
    assert log.position == before
    log.close()
