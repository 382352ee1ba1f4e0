"""The lease and the shared control state on a real PostgreSQL: one leader, takeover, stale writes refused."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hub.control.state import AppRecord
from hub.ha.db import Database
from hub.ha.errors import HaStoreError, StaleEpoch
from hub.ha.lease import Lease
from hub.ha.pg_lease import PgLeaseStore
from hub.ha.pg_state import PgStateStore, stored_apps
from hub.ha.schema import SCHEMA_VERSION, applied_version, migrate
from tests.plans import chain_plan
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(120)

TTL_S = 2.0


def make_record(name: str) -> AppRecord:
    plan = chain_plan(name, 1, {"truck-7": [("filter", "truck-7", 0)]})
    return AppRecord(name=name, source="", filename="app.py", plan=plan)


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    db = Database(postgres_dsn)
    db.run(migrate)
    db.close()
    return postgres_dsn


def contender(dsn: str, name: str, stores: list[Database]) -> Lease:
    db = Database(dsn)
    stores.append(db)
    return Lease(PgLeaseStore(db), name, ttl_s=TTL_S, margin_s=0.5)


@pytest.fixture
def dbs() -> Iterator[list[Database]]:
    opened: list[Database] = []
    yield opened
    for db in opened:
        db.close()


def test_migrations_are_applied_once_and_a_newer_schema_is_refused(postgres_dsn: str) -> None:
    db = Database(postgres_dsn)
    try:
        assert db.run(migrate) == SCHEMA_VERSION
        assert db.run(migrate) == 0
        assert db.run(applied_version) == SCHEMA_VERSION
        db.run(lambda c: c.execute("INSERT INTO spanedge_schema (version, description) VALUES (999, 'future')"))
        with pytest.raises(HaStoreError, match="schema version 999, newer than"):
            db.run(migrate)
    finally:
        db.close()


def test_of_two_contenders_at_once_exactly_one_leads(dsn: str, dbs: list[Database]) -> None:
    leases = [contender(dsn, f"hub-{i}", dbs) for i in range(4)]
    won: list[bool] = [False] * len(leases)
    start = threading.Barrier(len(leases))

    def race(i: int) -> None:
        start.wait()
        won[i] = leases[i].try_acquire()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(leases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert won.count(True) == 1
    leader = leases[won.index(True)]
    assert leader.epoch == 1
    current = PgLeaseStore(dbs[0]).current()
    assert current is not None
    assert (current.holder, current.epoch, current.live) == (leader.holder, 1, True)


def test_a_lapsed_lease_is_taken_over_and_the_stale_leaders_writes_are_refused(
    dsn: str, dbs: list[Database], tmp_path: Path
) -> None:
    a, b = contender(dsn, "hub-a", dbs), contender(dsn, "hub-b", dbs)
    assert a.try_acquire()
    state_a = PgStateStore(tmp_path / "a", dbs[0], a)
    state_b = PgStateStore(tmp_path / "b", dbs[1], b)
    state_a.save_app(make_record("one"))
    state_a.save_versions({"truck-7": 10})
    assert not b.try_acquire()
    assert b.renew() is False  # it never held it
    # a stops renewing (paused); b takes over once the database's clock is past the expiry
    wait_for(b.try_acquire, timeout=30, what="the standby to take the lapsed lease", poll=0.1)
    assert b.epoch == 2
    assert [r.name for r in state_b.load_apps()] == ["one"]
    assert state_b.load_versions() == {"truck-7": 10}
    # the old leader, resumed, still believes in epoch 1 by its own clock: the database refuses it
    a.renewed_at = a.clock()
    with pytest.raises(StaleEpoch, match="no longer leads under epoch 1"):
        state_a.save_app(make_record("two"))
    with pytest.raises(StaleEpoch):
        state_a.save_versions({"truck-7": 99})
    with pytest.raises(StaleEpoch):
        state_a.delete_app("one")
    assert not a.renew()
    state_b.save_versions({"truck-7": 11})
    assert [r.name for r in state_b.load_apps()] == ["one"]
    assert state_b.load_versions() == {"truck-7": 11}


def test_a_leader_past_its_own_deadline_does_not_even_ask(dsn: str, dbs: list[Database], tmp_path: Path) -> None:
    a = contender(dsn, "hub-a", dbs)
    assert a.try_acquire()
    state = PgStateStore(tmp_path, dbs[0], a)
    wait_for(lambda: not a.held(), timeout=30, what="the leader's own deadline", poll=0.05)
    with pytest.raises(StaleEpoch, match="epoch 1 is over"):
        state.save_document("fleet", {"added": {}})
    assert state.load_document("fleet") is None


def test_a_takeover_waits_for_a_fenced_write_in_flight(dsn: str, dbs: list[Database], tmp_path: Path) -> None:
    """The write holds the lease row: the takeover's update commits only after it, under the next epoch."""
    a, b = contender(dsn, "hub-a", dbs), contender(dsn, "hub-b", dbs)
    assert a.try_acquire()
    state = PgStateStore(tmp_path, dbs[0], a)
    in_write, finish = threading.Event(), threading.Event()

    def slow(conn: object) -> None:
        conn.execute("INSERT INTO spanedge_documents (name, body, epoch) VALUES ('slow', '{}', 1)")  # type: ignore[attr-defined]
        in_write.set()
        finish.wait(30)

    writer = threading.Thread(target=lambda: state._fenced("write slowly", slow))
    writer.start()
    assert in_write.wait(30)
    lease = PgLeaseStore(dbs[1])
    wait_for(lambda: not lease.current().live, timeout=30, what="the lease to expire by the database's clock")  # type: ignore[union-attr]
    taken: list[bool] = []
    taker = threading.Thread(target=lambda: taken.append(b.try_acquire()))
    taker.start()
    taker.join(1.0)
    assert taker.is_alive()  # blocked on the row the write holds
    finish.set()
    writer.join(30)
    taker.join(30)
    assert taken == [True]
    epochs = dbs[1].run(lambda c: c.execute("SELECT epoch FROM spanedge_documents WHERE name = 'slow'").fetchall())
    assert epochs == [(1,)]


def test_documents_round_trip(dsn: str, dbs: list[Database], tmp_path: Path) -> None:
    a = contender(dsn, "hub-a", dbs)
    assert a.try_acquire()
    state = PgStateStore(tmp_path, dbs[0], a)
    state.save_document("join-tokens", {"t": {"site": "truck-7"}})
    assert state.load_document("join-tokens") == {"t": {"site": "truck-7"}}
    records: list[AppRecord] = state.load_apps()
    assert records == []


def test_apps_of_a_hub_that_ran_alone_are_copied_in_once(dsn: str, dbs: list[Database], tmp_path: Path) -> None:
    from hub.control.state import StateStore

    StateStore(tmp_path).save_app(make_record("alone"))
    StateStore(tmp_path).save_versions({"truck-7": 5})
    a = contender(dsn, "hub-a", dbs)
    assert a.try_acquire()
    state = PgStateStore(tmp_path, dbs[0], a)
    assert [r.name for r in state.load_apps()] == ["alone"]
    assert state.load_versions() == {"truck-7": 5}
    (tmp_path / "apps" / "alone.json").unlink()
    assert [r.name for r in state.load_apps()] == ["alone"]  # from the database now


def test_the_fleet_and_join_tokens_live_in_the_database(dsn: str, dbs: list[Database], tmp_path: Path) -> None:
    from hub.control.fleet import Fleet
    from hub.control.join_tokens import JoinTokens
    from spanedge.sites import parse_sites

    sites = parse_sites(
        "sites:\n  cloud: {tier: hub, broker: 'mqtt://localhost:1883'}\n"
        "  edge: {tier: spoke, broker: 'mqtt://localhost:1884'}\n"
    )
    a = contender(dsn, "hub-a", dbs)
    assert a.try_acquire()
    state = PgStateStore(tmp_path / "a", dbs[0], a)
    fleet = Fleet(sites, tmp_path / "a" / "fleet.json", state)
    fleet.add("truck-1", {"tier": "spoke", "broker": "mqtt://localhost:1885"})
    tokens = JoinTokens(tmp_path / "a" / "join-tokens.json", documents=state)
    tokens.issue("truck-1", "00" * 32)
    assert not (tmp_path / "a" / "fleet.json").exists()
    other = PgStateStore(tmp_path / "b", dbs[0], a)  # another host's state directory: what it reads comes from PG
    assert "truck-1" in Fleet(sites, tmp_path / "b" / "fleet.json", other).sites.sites
    assert len(JoinTokens(tmp_path / "b" / "join-tokens.json", documents=other)._tokens) == 1


def test_the_lease_records_its_holders_url_and_a_takeover_replaces_it(
    dsn: str, dbs: list[Database], tmp_path: Path
) -> None:
    dbs += [Database(dsn), Database(dsn)]
    a = Lease(PgLeaseStore(dbs[0], "https://hub-a:8443"), "hub-a", ttl_s=TTL_S, margin_s=0.5)
    b = Lease(PgLeaseStore(dbs[1]), "hub-b", ttl_s=TTL_S, margin_s=0.5)
    assert a.try_acquire()
    current = b.store.current()
    assert current is not None
    assert (current.holder, current.url, current.live) == ("hub-a", "https://hub-a:8443", True)
    state_a = PgStateStore(tmp_path / "a", dbs[0], a)
    state_a.save_app(make_record("two"))
    state_a.save_app(make_record("one"))
    assert [r.name for r in stored_apps(dbs[1])] == ["one", "two"]  # a standby's read: no lease needed
    assert [r.name for r in stored_apps(dbs[1], "two")] == ["two"]
    assert stored_apps(dbs[1], "three") == []
    a.release()
    assert b.try_acquire()
    current = a.store.current()
    assert current is not None
    assert (current.holder, current.epoch, current.url) == ("hub-b", 2, None)


def test_a_rollout_lives_in_the_database_and_the_next_leader_goes_on_with_it(
    dsn: str, dbs: list[Database], tmp_path: Path
) -> None:
    """A rollout in progress is one fenced document: the hub that takes over resumes it, the old one cannot write."""
    from hub.control.coordinator import Coordinator
    from hub.control.distribution import PlanDistributor
    from hub.control.registry import SiteRegistry
    from hub.control.rollout.model import Status
    from spanedge.sites import parse_sites
    from tests.keys import KEY
    from tests.unit.hub.control.rollout.test_runner import SITES, V1, V2, Fleet, local_planner

    class SharedFleet(Fleet):
        """The rollout runner's fleet over the shared database instead of a state directory."""

        def __init__(self, store: PgStateStore) -> None:
            self.shared = store
            super().__init__(store.root)

        def open(self) -> Coordinator:
            return Coordinator(
                SiteRegistry(parse_sites(SITES)),
                planner=local_planner,
                distributor=PlanDistributor(self.publisher, KEY, self.shared),
                store=self.shared,
                documents=self.shared,
                clock=self.clock,
            )

    a, b = contender(dsn, "hub-a", dbs), contender(dsn, "hub-b", dbs)
    assert a.try_acquire()
    fleet = SharedFleet(PgStateStore(tmp_path / "a", dbs[0], a))
    fleet.coordinator.deploy(V1, "app.py")
    fleet.deliver()
    record = fleet.coordinator.rollouts.deploy(V2, "app_v2.py", stages="kind=truck:1, *", hold_s=30)
    (canary,) = record.rollout.stages[0].sites
    fleet.deliver()
    fleet.advance(10)
    old = fleet.coordinator
    assert not (tmp_path / "a" / "rollouts").exists()  # in the database, not in the state directory

    wait_for(b.try_acquire, timeout=30, what="the standby to take the lapsed lease", poll=0.1)
    fleet.shared = PgStateStore(tmp_path / "b", dbs[1], b)
    fleet.coordinator = fleet.open()
    fleet.coordinator.resume()
    rollout = fleet.coordinator.rollouts.record("demo").rollout  # type: ignore[union-attr]
    assert rollout.status is Status.HOLDING
    assert tuple(rollout.stages[0].sites) == (canary,)
    assert "the hub restarted" in rollout.steps[-1].reason

    a.renewed_at = a.clock()  # the old leader, resumed, still believes it leads
    with pytest.raises(StaleEpoch):
        old.rollouts.roll_back("demo")
    fleet.deliver()
    fleet.advance(35)
    fleet.deliver()
    fleet.advance(40)
    assert fleet.coordinator.rollouts.record("demo").rollout.status is Status.PASSED  # type: ignore[union-attr]
