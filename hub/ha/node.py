"""A hub of a high-availability group: a standby until it takes the lease, then the leader until it loses it.

:class:`HaNode` binds the REST port at once and serves the standby API
(:func:`hub.api.standby.standby_app`: ``/healthz`` with ``role``, ``leader``,
``epoch`` and ``leader_url``, the apps read from the database, writes
redirected to the leader's URL, the other reads sent on to it), starts a
SparkSession and warms its driver with a throwaway query
(:mod:`hub.engine.warmup`), and once the session is up tries to take the
lease every ``poll_s``, or just after it expires if that is sooner
(:func:`next_try_s`): a standby still starting Spark leaves the lease to a
warm one; a lease it takes records this hub's REST URL (``--ha-url``) for
the standbys. Once it leads, it installs the lease's check as the
process's fence (:mod:`hub.ingest.fence`), starts renewing
(:class:`hub.ha.keeper.LeaseKeeper`), lets a throwaway Spark job end if one
still runs (the warm-up, or the one every :data:`hub.engine.warmup.KEEP_WARM_S`
that keeps the Python workers), and starts a :class:`hub.server.Hub`
whose apps and plan versions live in the database
(:class:`hub.ha.pg_state.PgStateStore`) and whose plans carry the epoch;
the REST port then serves the hub's full API.

A leader whose lease is lost exits at once with status
:data:`EXIT_LEASE_LOST` (Spark's JVM ends with it), before another hub can
take the lease; its supervisor restarts it, as a standby. A leader stopped
with SIGTERM stops its hub, then gives the lease up, so a standby takes over
without waiting for it to expire.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hub.ha.config import served_url
from hub.ha.db import Database, redacted
from hub.ha.keeper import LeaseKeeper
from hub.ha.lease import Lease
from hub.ha.pg_lease import PgLeaseStore
from hub.ha.pg_state import PgStateStore, stored_apps
from hub.ha.schema import migrate
from hub.ingest import fence
from spanedge.errors import SpanEdgeError
from spanedge.logsafe import escaped

if TYPE_CHECKING:
    from hub.server import Hub, HubConfig
    from spanedge.sites import Sites

log = logging.getLogger(__name__)

#: The exit status of a leader that lost its lease (EX_TEMPFAIL: restart it).
EXIT_LEASE_LOST = 75
#: The file the hubs of a group lock while one of them makes the state directory's instance id and CA.
SETUP_LOCK = "ha-setup.lock"
#: How long after the lease's expiry (by the database's clock) a standby tries to take it.
EXPIRY_SLACK_S = 0.02


class RoleApp:
    """The ASGI app on the REST port: the standby API until :attr:`active` is set to the leader's."""

    def __init__(self, standby: Any) -> None:
        """Serve ``standby`` until :attr:`active` is set."""
        self.standby = standby
        self.active: Any = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Pass the request on to the app of the hub's role; answer lifespan events itself."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await (self.active or self.standby)(scope, receive, send)


class HaNode:
    """One hub process of a group sharing ``config.ha.dsn`` and ``config.state_dir``."""

    def __init__(self, sites: Sites, config: HubConfig) -> None:
        """Prepare the node; nothing connects until :meth:`serve`."""
        assert config.ha is not None
        self.sites = sites
        self.config = config
        self.ha = config.ha
        self.db = Database(self.ha.dsn)
        #: the REST URL this hub advertises with its lease
        self.url = self.ha.url or served_url(config.host, config.port, config.plain_http)
        self.lease = Lease(PgLeaseStore(Database(self.ha.dsn), self.url), self.ha.name, self.ha.ttl_s)
        self.leading = False
        self._leader: tuple[str | None, int | None, str | None] = (None, None, None)
        self.hub: Hub | None = None
        self._keeper: LeaseKeeper | None = None
        self._stop = threading.Event()
        self._warm = threading.Event()  # set once Spark is up (or not wanted)
        self._warming = threading.Lock()  # held while a throwaway Spark job of the standby runs
        self._taking_over = threading.Event()  # set once this hub leads: no more throwaway jobs

    def role(self) -> dict[str, Any]:
        """The fields ``/healthz`` adds: ``role``, ``leader``, ``epoch`` and ``leader_url``."""
        if self.leading:
            return {"role": "leader", "leader": self.ha.name, "epoch": self.lease.epoch, "leader_url": self.url}
        leader, epoch, url = self._leader
        return {"role": "standby", "leader": leader, "epoch": epoch, "leader_url": url}

    def serve(self) -> None:
        """Stand by, lead when the lease is free, serve the REST API until SIGINT or SIGTERM.

        Raises:
            SpanEdgeError: the database cannot be reached or migrated, or the REST port is taken.
        """
        from hub.api.listener import bind_listener
        from hub.control.identity import HubIdentity
        from hub.control.state_lock import StateDirLock
        from hub.server import api_tls

        state_dir = Path(self.config.state_dir)
        with _setup(state_dir):  # the hubs of a group may start at once: one makes the instance id and the CA
            lock = StateDirLock(state_dir, HubIdentity.of(state_dir).instance, shared=True).acquire()
            try:
                tls = api_tls(self.config)
                self.db.run(migrate)
                log.info("hub %s stands by for the lease in %s", self.ha.name, redacted(self.ha.dsn))
                listener = bind_listener(self.config.host, self.config.port)
            except BaseException:
                lock.release()
                raise
        try:
            self._serve(listener, tls)
        finally:
            lock.release()

    def _serve(self, listener: Any, tls: Any) -> None:
        from hub.api.forwarding import Forwarder, leader_ca
        from hub.api.serving.run import ApiServer
        from hub.api.standby import standby_app
        from hub.server import uvicorn_options

        forwarder = Forwarder(leader_ca(tls, Path(self.config.state_dir)))
        app = RoleApp(standby_app(self.role, self.config.tokens, lambda name: stored_apps(self.db, name), forwarder))
        server = ApiServer(app, uvicorn_options(self.config, tls), self.config.client_limits)
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminate) if main else None
        if self.config.spark and self.ha.warm_spark:
            threading.Thread(target=self._warm_spark, name="spanedge-warm-spark", daemon=True).start()
        else:
            self._warm.set()
        elector = threading.Thread(target=self._elect, args=(app,), name="spanedge-election", daemon=True)
        elector.start()
        try:
            server.run(sockets=[listener])
        except (_Terminated, KeyboardInterrupt):
            log.info("hub stopping")
        finally:
            self._stop.set()
            elector.join(timeout=30)
            self._step_down()
            listener.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def _warm_spark(self) -> None:
        from hub.engine.session import build_session
        from hub.engine.warmup import KEEP_WARM_S, keep_warm, warm_up

        try:
            spark = build_session(self.config.spark_master, extra=self.config.spark_conf)
        except Exception:
            log.exception("starting Spark while standing by failed; it starts when this hub leads")
            self._warm.set()
            return
        with self._warming:  # a takeover waits for it: the queries' first jobs must not run beside these
            log.info("Spark is up: hub %s is a warm standby; a throwaway query warms its driver", self.ha.name)
            self._warm.set()
            try:
                took = warm_up(spark, cancel=self._taking_over)
                if took is None:
                    log.info("warming Spark's driver stopped: hub %s leads now", self.ha.name)
                    return
                log.info("Spark's driver is warm (%.1f s)", took)
            except Exception:
                log.exception("warming Spark's driver failed; this hub's first queries start cold")
                return
        while not self._stop.wait(KEEP_WARM_S):
            with self._warming:
                if self._taking_over.is_set():
                    return
                try:
                    keep_warm(spark)
                except Exception as exc:
                    log.warning("keeping Spark's Python workers warm failed: %s; no longer trying", escaped(exc))
                    return

    def _elect(self, app: RoleApp) -> None:
        # a standby whose Spark still starts leaves the lease to a warm one: it would take as long to lead
        while not self._warm.is_set() and not self._stop.is_set():
            self._observe()
            self._warm.wait(self.ha.poll_s)
        while not self._stop.is_set():
            try:
                if self.lease.try_acquire():
                    break
            except SpanEdgeError as exc:
                log.warning("cannot take the lease: %s; trying again", escaped(exc))
            self._stop.wait(next_try_s(self._observe(), self.ha.poll_s))
        else:
            return
        try:
            self._lead(app)
        except Exception:
            log.exception("taking over as the leader of epoch %d failed; exiting", self.lease.epoch)
            os._exit(EXIT_LEASE_LOST)

    def _observe(self) -> float | None:
        """Note who leads, for ``/healthz``, and where writes go: no URL for an expired lease, or this hub's own.

        Returns:
            The seconds the lease has left by the database's clock, or None if it is not known.
        """
        try:
            current = self.lease.store.current()
        except SpanEdgeError as exc:
            log.warning("cannot read the lease: %s; trying again", escaped(exc))
            return None
        if current is None:
            self._leader = (None, None, None)
            return None
        url = current.url if current.live and current.url != self.url else None
        self._leader = (current.holder, current.epoch, url)
        return current.remaining_s

    def _lead(self, app: RoleApp) -> None:
        from hub.server import Hub

        epoch = self.lease.epoch
        log.info("hub %s leads under epoch %d", self.ha.name, epoch)
        fence.install(self.lease.check)
        self._keeper = LeaseKeeper(self.lease, self._lost).start()
        self._taking_over.set()
        if not self._warming.acquire(blocking=False):  # the queries' first jobs must not run beside a throwaway one
            log.info("hub %s stops the throwaway query warming Spark's driver", self.ha.name)
            self._warming.acquire()
        self._warming.release()
        store = PgStateStore(Path(self.config.state_dir), self.db, self.lease)
        hub = Hub(self.sites, self.config, store=store, documents=store)
        hub.distributor.epoch = epoch
        hub.role = self.role
        self.hub = hub
        self._leader = (self.ha.name, epoch, None)  # the standby API says so while the hub starts (503, no redirect)
        hub.claim(bind=False)
        hub.start()
        app.active = hub.api()
        self.leading = True
        log.info(
            "hub %s took over: it ingests, runs the queries and distributes plans of epoch %d", self.ha.name, epoch
        )

    def _lost(self, why: str) -> None:
        log.error("%s; this hub stops leading now and exits with status %d", why, EXIT_LEASE_LOST)
        logging.shutdown()
        os._exit(EXIT_LEASE_LOST)

    def _step_down(self) -> None:
        """Stop the hub, then give the lease up (a SIGTERM, not a lost lease)."""
        if self._keeper is not None:
            self._keeper.stop()
        if self.hub is not None:
            self.hub.stop()
            self.hub.release()
        try:
            self.lease.release()
        except SpanEdgeError as exc:
            log.warning("giving the lease up failed (it expires by itself): %s", escaped(exc))
        fence.install(None)
        self.db.close()


def next_try_s(remaining_s: float | None, poll_s: float) -> float:
    """How long a standby waits before it tries the lease again: ``poll_s``, or less if the lease expires sooner.

    A lease with ``remaining_s`` left is tried just after it expires, not at the next poll; the database
    still decides (its ``WHERE expires_at < now()``), so a leader that renewed meanwhile keeps it.
    """
    if remaining_s is None:
        return poll_s
    return min(poll_s, max(remaining_s, 0.0) + EXPIRY_SLACK_S)


@contextlib.contextmanager
def _setup(state_dir: Path) -> Iterator[None]:
    """Hold ``<state_dir>/ha-setup.lock`` exclusively: one hub of the group at a time sets the directory up."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / SETUP_LOCK).open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class _Terminated(Exception):
    """SIGTERM arrived."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated
