"""The leader lease and its fence on a fake clock: acquire, renew, lapse, takeover, a paused leader."""

from __future__ import annotations

import pytest

from hub.ha.errors import StaleEpoch
from hub.ha.keeper import LeaseKeeper
from hub.ha.lease import Lease
from hub.ha.memory import MemoryLeaseStore


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryLeaseStore:
    return MemoryLeaseStore(clock)


def lease(store: MemoryLeaseStore, clock: Clock, holder: str) -> Lease:
    return Lease(store, holder, ttl_s=10.0, margin_s=2.0, clock=clock)


def test_the_first_contender_leads_under_epoch_1_and_the_second_waits(store: MemoryLeaseStore, clock: Clock) -> None:
    a, b = lease(store, clock, "hub-a"), lease(store, clock, "hub-b")
    assert a.try_acquire()
    assert not b.try_acquire()
    assert (a.epoch, a.held(), b.held()) == (1, True, False)
    current = store.current()
    assert current is not None
    assert (current.holder, current.epoch, current.live) == ("hub-a", 1, True)


def test_renewals_keep_the_lease_past_its_ttl(store: MemoryLeaseStore, clock: Clock) -> None:
    a, b = lease(store, clock, "hub-a"), lease(store, clock, "hub-b")
    assert a.try_acquire()
    for _ in range(10):
        clock.now += a.renew_every_s
        assert a.renew()
        assert not b.try_acquire()
    assert a.epoch == 1
    a.check()


def test_a_lapsed_lease_is_taken_over_under_the_next_epoch(store: MemoryLeaseStore, clock: Clock) -> None:
    a, b = lease(store, clock, "hub-a"), lease(store, clock, "hub-b")
    assert a.try_acquire()
    clock.now += 10.001
    assert b.try_acquire()
    assert b.epoch == 2
    assert not a.renew()  # lost: it may not come back under epoch 1
    assert not a.held()
    with pytest.raises(StaleEpoch, match="epoch 1 is over"):
        a.check("append to the ingest log")


def test_a_renewal_of_an_old_epoch_is_refused_by_the_store(store: MemoryLeaseStore, clock: Clock) -> None:
    assert store.acquire("hub-a", 10.0) is not None
    clock.now += 11
    assert store.acquire("hub-b", 10.0) is not None
    assert not store.renew("hub-a", 1, 10.0)
    assert store.renew("hub-b", 2, 10.0)


def test_a_paused_leader_stops_before_its_lease_can_be_taken(store: MemoryLeaseStore, clock: Clock) -> None:
    a, b = lease(store, clock, "hub-a"), lease(store, clock, "hub-b")
    assert a.try_acquire()
    renewed_at = clock.now
    clock.now = renewed_at + a.ttl_s - a.margin_s  # the last moment it counts as held
    assert a.held()
    assert not b.try_acquire()
    clock.now += 0.001  # past renewed_at + ttl - margin: the leader stops...
    assert not a.held()
    with pytest.raises(StaleEpoch):
        a.check()
    assert not b.try_acquire()  # ...while nobody can take the lease yet
    clock.now = renewed_at + a.ttl_s + 0.001
    assert b.try_acquire()


def test_the_store_clock_is_read_after_the_hub_notes_its_own(store: MemoryLeaseStore, clock: Clock) -> None:
    """A slow request: the hub counts from before it, the store from when it arrives, so the hub stops first."""
    a = lease(store, clock, "hub-a")

    def slow_acquire(holder: str, ttl_s: float) -> object:
        clock.now += 3  # the request takes 3 s to reach the store
        return MemoryLeaseStore.acquire(store, holder, ttl_s)

    store.acquire = slow_acquire  # type: ignore[method-assign,assignment]
    asked = clock.now
    assert a.try_acquire()
    assert a.valid_until() == asked + 8
    current = store.current()
    assert current is not None
    assert clock.now + current.remaining_s == asked + 3 + 10


def test_a_released_lease_is_taken_at_once(store: MemoryLeaseStore, clock: Clock) -> None:
    a, b = lease(store, clock, "hub-a"), lease(store, clock, "hub-b")
    assert a.try_acquire()
    a.release()
    assert b.try_acquire()
    assert b.epoch == 2


def test_a_margin_not_shorter_than_the_ttl_is_refused(store: MemoryLeaseStore) -> None:
    with pytest.raises(ValueError, match="shorter than its TTL"):
        Lease(store, "hub-a", ttl_s=5, margin_s=5)


def test_the_keeper_renews_when_due_and_reports_a_lapse_once(store: MemoryLeaseStore, clock: Clock) -> None:
    a = lease(store, clock, "hub-a")
    assert a.try_acquire()
    lost: list[str] = []
    keeper = LeaseKeeper(a, lost.append)
    due = clock.now + a.renew_every_s
    clock.now += 1
    assert keeper.step(due) == due  # not due yet
    clock.now = due
    due2 = keeper.step(due)
    assert due2 == clock.now + a.renew_every_s
    assert a.renewed_at == due
    clock.now += 30  # paused across the expiry
    assert keeper.step(due2) is None
    assert len(lost) == 1
    assert "ran out" in lost[0]
    assert keeper.step(due2) is None
    assert len(lost) == 1


def test_the_keeper_retries_a_failing_store_until_the_lease_runs_out(store: MemoryLeaseStore, clock: Clock) -> None:
    a = lease(store, clock, "hub-a")
    assert a.try_acquire()
    lost: list[str] = []
    keeper = LeaseKeeper(a, lost.append)

    def down(holder: str, epoch: int, ttl_s: float) -> bool:
        raise OSError("connection refused")

    store.renew = down  # type: ignore[method-assign]
    due = clock.now + a.renew_every_s
    clock.now = due
    nxt = keeper.step(due)
    assert nxt is not None
    assert not lost
    clock.now += 8
    assert keeper.step(nxt) is None
    assert lost
