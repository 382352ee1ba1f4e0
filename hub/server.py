"""The running hub: REST API, control connection, coordinator, plan distribution and data plane.

:class:`Hub` composes the parts around one state directory::

    <state_dir>/apps/, distribution.json    deployed apps and plan versions (hub.control.state)
    <state_dir>/ingest/<app>/               the durable ingest logs (hub.ingest.consumer)
    <state_dir>/checkpoints/<app>/          Spark checkpoints and sink state (hub.engine.engine)
    <state_dir>/ca/, tls/                   the hub's CA (spanedge.ca) and the REST API's certificate (hub.api.tls)
    <state_dir>/models/<app>/<model>/       trained model versions, signed (hub.models.registry), and the
                                            labelled records to train on, in history/ (hub.models.history)
    <state_dir>/fleet.json, join-tokens.json  sites added and revoked, join tokens (hub.control.enrolment)
    <state_dir>/hub-id.json, hub.lock       the hub's instance id and its lock (hub.control.identity, state_lock)

and :meth:`Hub.serve` runs uvicorn (HTTPS unless ``plain_http``; slow and greedy clients bounded by
:mod:`hub.api.serving`) in the foreground until SIGINT/SIGTERM.
Before anything else, :meth:`Hub.claim` locks the state directory, claims the
hub site on its broker (:mod:`hub.control.presence`) and binds the REST port;
a hub that cannot gets an error naming what holds it, before it touches a
persistent MQTT session or starts Spark.
Without Spark (``spark=False``) only the control plane runs: the API,
heartbeats, planning and plan distribution.
"""

from __future__ import annotations

import logging
import secrets
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from hub.api.listener import bind_listener
from hub.api.serving.limits import ClientLimits
from hub.api.tls import ServerTls, check_plain_http, server_tls
from hub.control.brokers import BrokerFiles
from hub.control.coordinator import Coordinator
from hub.control.distribution import PLAN_TTL_S, MqttControl, PlanDistributor
from hub.control.enrolment import Enrolment
from hub.control.fleet import Fleet
from hub.control.identity import HubIdentity
from hub.control.join_tokens import DEFAULT_TTL_S, JoinTokens
from hub.control.presence import HubPresence, presence_of
from hub.control.registry import SiteRegistry, shared_entry
from hub.control.site_health import HealthPolicy
from hub.control.state import Documents, StateStore
from hub.control.state_lock import StateDirLock
from hub.engine.dead_letters import OPERATOR_ERRORS
from hub.engine.session import DEFAULT_TRIGGER, batch_intervals
from hub.ha.config import HaConfig
from hub.handover.holds import DEFAULT_LIMIT_S
from hub.handover.recovered import Recovered
from hub.ingest.publishers import from_plans
from spanedge.ca import CertificateAuthority
from spanedge.client_certs import check_client_certificates
from spanedge.signing import PlanSigningKey
from spanedge.sites import Sites
from spanedge.tokens import Tokens

log = logging.getLogger(__name__)

HOLD_CHECK_S = 0.25
"""How often the hub looks at which windows wait for an old owner's last records (:mod:`hub.handover.holds`)."""


@dataclass(frozen=True)
class HubConfig:
    """Everything ``spanedge hub`` can set."""

    tokens: Tokens
    plan_key: PlanSigningKey
    state_dir: Path = Path(".spanedge/hub")
    host: str = "127.0.0.1"
    port: int = 8000
    spark: bool = True
    spark_master: str = "local[2]"
    #: Spark settings over the hub's own (``spanedge hub --conf``; hub.engine.session.session_settings)
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    trigger: str = DEFAULT_TRIGGER
    #: the micro-batch interval of the queries that run no window at the hub (None: 230 ms, or ``trigger`` if shorter)
    stateless_trigger: str | None = None
    #: a sink that reads a window directly writes it once the watermark passes it (hub.engine.window_close)
    close_windows: bool = True
    hub_site: str | None = None
    down_after_s: float = 15.0
    #: the weight of the newest report in the moving average of each stream's rate (link latencies: hub.control.links)
    rate_alpha: float = 0.3
    drift_threshold: float = 0.5
    min_replan_interval_s: float = 60.0
    check_interval_s: float = 5.0
    #: a spoke silent this long counts as gone: what it ran is re-planned elsewhere (hub.control.site_health)
    site_grace_s: float = 180.0
    #: how long after a switch the hub's windows wait at most for a live old owner's last records (hub.handover.holds)
    handover_wait_s: float = DEFAULT_LIMIT_S
    #: a spoke over its CPU budget this long is planned with what it can carry
    overload_for_s: float = 30.0
    #: a spoke able to carry its old load again this long gets its capacity back
    overload_recover_s: float = 60.0
    #: a plan message expires this long after it is issued; the hub re-issues it after half of it
    plan_ttl_s: float = PLAN_TTL_S
    #: the level of everything the hub logs, uvicorn's own lines included; DEBUG adds a line per request
    log_level: str = "INFO"
    #: where the hub writes its brokers' ACL and CRL files (None: nowhere; hub.control.brokers)
    broker_dir: Path | None = None
    #: the pid files of the brokers the hub reloads (SIGHUP) after writing them
    broker_pid_files: tuple[Path, ...] = ()
    #: read-only identities and local sink topics the brokers' ACLs keep (``broker-config --observer/--local-topic``)
    broker_observers: tuple[str, ...] = ()
    broker_local_topics: tuple[str, ...] = ()
    #: how long a join token is valid (hub.control.join_tokens)
    join_token_ttl_s: float = DEFAULT_TTL_S
    #: the REST API's certificate and key (None: issued by the hub's CA in ``<state_dir>/ca``; hub.api.tls)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: more names of the certificate the hub's CA issues (``--tls-name``): those clients reach the hub by
    tls_names: tuple[str, ...] = ()
    #: serve the REST API over plain HTTP (only on a loopback ``host``)
    plain_http: bool = False
    #: how long a REST client may take to send a request, and how many connections it may hold (hub.api.serving)
    client_limits: ClientLimits = field(default_factory=ClientLimits)
    #: lead or stand by under a lease in a shared database (``--ha``; None: the single hub of its state directory)
    ha: HaConfig | None = None


class Hub:
    """The hub's parts, started and stopped together."""

    def __init__(
        self, sites: Sites, config: HubConfig, store: StateStore | None = None, documents: Documents | None = None
    ) -> None:
        """Prepare the hub for ``sites`` and those it enrolled since; nothing connects until :meth:`start`.

        ``store`` keeps the apps and plan versions, ``documents`` the fleet and the join tokens (default:
        files in the state directory).
        """
        self.config = config
        self.state_dir = Path(config.state_dir)
        self.store = StateStore(self.state_dir) if store is None else store
        self._documents = documents
        self.fleet = Fleet(sites, self.state_dir / "fleet.json", documents)
        sites = self.sites = self.fleet.sites
        site = sites.site(config.hub_site) if config.hub_site is not None else sites.hubs[0]
        self.site = site
        check_client_certificates(sites, site.name)
        self.broker = site.mqtt()
        self.identity = HubIdentity.of(self.state_dir)
        self.registry = SiteRegistry(sites, down_after_s=config.down_after_s, alpha=config.rate_alpha)
        self.control = MqttControl(
            self.broker,
            client_id=self.identity.client_id(site.name, "control"),
            on_heartbeat=lambda site, payload: self.coordinator.heartbeat(site, payload),
        )
        self.distributor = PlanDistributor(self.control, config.plan_key, self.store, ttl_s=config.plan_ttl_s)
        self.distributor.site_entry = lambda name: shared_entry(self.registry.sites, name)
        self.ingest: Any = None
        self.engine: Any = None
        self.coordinator = Coordinator(
            self.registry,
            distributor=self.distributor,
            store=self.store,
            documents=documents,
            drift_threshold=config.drift_threshold,
            min_replan_interval_s=config.min_replan_interval_s,
            handover_wait_s=config.handover_wait_s,
            health=HealthPolicy(
                overload_for_s=config.overload_for_s,
                recover_for_s=config.overload_recover_s,
                site_grace_s=config.site_grace_s,
            ),
            hub_errors=OPERATOR_ERRORS if config.spark else None,
        )
        self.enrolment = self._enrolment(site.broker)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []  # the background loops, stopped by ``_stop``
        self._models: Any = None
        self._lock: StateDirLock | None = None
        self._presence: HubPresence | None = None
        self.listener: socket.socket | None = None
        #: more fields of ``/healthz`` (the leader's role and epoch, with ``--ha``)
        self.role: Callable[[], dict[str, Any]] | None = None

    def claim(self, bind: bool = True) -> Hub:
        """Lock the state directory, claim the hub site on its broker and bind the REST port, in that order.

        With ``config.ha`` the node holds the lock, shared by the hubs of the group, and the presence
        record of a hub of the same instance (another hub of the group, which no longer leads) does not
        block the claim. Without ``bind`` the REST port is left to the caller.

        Raises:
            SpanEdgeError: one of them is held (:class:`hub.control.state_lock.StateDirLocked`,
                :class:`hub.control.presence.HubAlreadyRunning`, :class:`hub.api.listener.PortInUse`) or the
                broker cannot be checked; what was taken is let go again.
        """
        try:
            if self.config.ha is None:  # with --ha, hub.ha.node holds it shared
                self._lock = StateDirLock(self.state_dir, self.identity.instance).acquire()
            me = presence_of(self.site.name, self.identity.instance, self.state_dir)
            client_id = self.identity.client_id(self.site.name, f"presence-{secrets.token_hex(3)}")
            peer = (lambda r: r.instance == me.instance) if self.config.ha is not None else None
            self._presence = HubPresence(self.broker, me, client_id, peer=peer)
            self._presence.claim()
            if bind:
                self.listener = bind_listener(self.config.host, self.config.port)
        except BaseException:
            self.release()
            raise
        if self.listener is not None:
            host, port = self.listener.getsockname()[:2]
            log.info("hub instance %s; REST API on %s:%s", self.identity.instance, host, port)
        return self

    def release(self) -> None:
        """Close the REST port, mark the hub gone on its broker and unlock the state directory."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self._presence is not None:
            presence, self._presence = self._presence, None
            if presence.claimed:
                presence.release()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _enrolment(self, default_broker: str) -> Enrolment:
        ca = CertificateAuthority.open(self.state_dir / "ca")
        return Enrolment(
            self.fleet,
            JoinTokens(self.state_dir / "join-tokens.json", self.config.join_token_ttl_s, documents=self._documents),
            ca,
            BrokerFiles(
                self.config.broker_dir,
                self.config.broker_pid_files,
                ca.crl_file,
                observers=self.config.broker_observers,
                local_topics=self.config.broker_local_topics,
            ),
            self.coordinator,
            self.config.plan_key.public_key,
            default_broker=default_broker,
        )

    def start(self) -> Hub:
        """Connect to the broker, resume the deployed apps, start the data plane and the periodic checks.

        Every ``check_interval_s`` the hub checks the sites' load and presence and
        link latencies for drift (:meth:`Coordinator.check`), re-issues the plan messages past half their
        TTL (:meth:`PlanDistributor.refresh`), and restarts failed Spark queries.
        """
        log.info("hub site %s, broker %s, state in %s", self.site.name, self.broker.url, self.state_dir)
        self.enrolment.start()
        self.control.start()
        if self.config.spark:
            self._start_data_plane()
        self.models()  # the model versions go out with the plans the resume sends
        self.coordinator.resume()
        if self.engine is not None and self.ingest is not None:
            self._hold_windows_once()  # before the ingest opens a log: what was held before a restart stays held
        if self.ingest is not None:
            # after the plans are back: a batch a site publishes for another checks them
            self.ingest.start()
        loops = [(self._tick, "spanedge-drift")]
        if self.engine is not None and self.ingest is not None:
            loops.append((self._hold_windows, "spanedge-window-holds"))
        for target, name in loops:
            self._threads.append(threading.Thread(target=target, name=name, daemon=True))
            self._threads[-1].start()
        self._threads.append(self.coordinator.rollouts.start(self._stop))
        if self.engine is not None:
            self._threads.append(self.models().start_training(self._stop, self.coordinator.app_names))
        return self

    def models(self) -> Any:
        """The apps' models (:class:`hub.models.service.ModelService`), trained with the engine's Spark if it runs."""
        if self._models is None:
            from hub.api.model_routes import coordinator_apps
            from hub.models.assembly import hub_models

            self._models = hub_models(self, coordinator_apps(self.coordinator))
        return self._models

    def _start_data_plane(self) -> None:
        try:
            from hub.engine.engine import Engine
            from hub.ingest.consumer import Ingest
        except ImportError as exc:
            from spanedge.errors import MissingExtra

            raise MissingExtra(exc.name or "pyspark", "hub") from None
        self.engine = Engine(
            self.state_dir,
            self.sites,
            spark_master=self.config.spark_master,
            spark_conf=self.config.spark_conf,
            trigger=self.config.trigger,
            stateless_trigger=self.config.stateless_trigger,
            close_windows=self.config.close_windows,
        )
        self.coordinator.engine = self.engine
        self.ingest = Ingest(
            self.broker,
            self.state_dir / "ingest",
            client_id=self.identity.client_id(self.site.name, "ingest"),
            may_publish=from_plans(self.coordinator.plans_of),
            on_complete=self.coordinator.frontiers.advance,
            recovered=Recovered(self.coordinator.frontiers.delivered),
            batch_every=batch_intervals(self.config.trigger, self.config.stateless_trigger),
            revoked=self.registry.revoked.__contains__,
            max_message_bytes=self.site.message_limit,
        )

    def _tick(self) -> None:
        while not self._stop.wait(self.config.check_interval_s):
            try:
                self.coordinator.check()
            except Exception:
                log.exception("the check of sites and drift failed")
            try:
                self.distributor.refresh()
            except Exception:
                log.exception("re-issuing the plan messages before they expire failed")
            if self.engine is not None:
                try:
                    self.engine.recover()
                    self.engine.retire_written_shares()
                except Exception:
                    log.exception("restarting failed queries or stopping those that are done failed")

    def _hold_windows(self) -> None:
        """Keep each app's hub windows from reading past what an old owner or a live site still owes them.

        See :mod:`hub.handover.holds` and :mod:`hub.handover.frontiers`; the holds are set on the ingest's logs,
        with where the plan in force lets a window close (:mod:`hub.ingest.seal_points`).
        """
        while not self._stop.wait(HOLD_CHECK_S):
            self._hold_windows_once()

    def _hold_windows_once(self) -> None:
        from hub.ingest.log import Hold

        try:
            for app, start in self.coordinator.window_holds(lambda a: partial(self.ingest.mark, a)).items():
                sinks = self.engine.watermarked_sinks(app)
                grid = self.coordinator.window_grid(app)
                if start is None or not sinks:
                    self.ingest.hold(app, None)
                else:  # each window query waits only for what can reach it (hub.handover.scope)
                    own = self.coordinator.reader_holds(app, partial(self.ingest.mark, app), sinks)
                    self.ingest.hold(app, Hold(start, frozenset(sinks), grid, own))
                self.ingest.close_at(app, self.coordinator.window_closings(app))
        except Exception:
            log.exception("holding the hub's windows for the records sites still owe them failed")

    def stop(self) -> None:
        """Stop drift checks, the engine, ingest and the control connection."""
        self._stop.set()
        self.coordinator.rollouts.wake.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for part in (self.engine, self.ingest):
            if part is not None:
                try:
                    part.stop()
                except Exception:
                    log.exception("stopping %s failed", type(part).__name__)
        self.control.stop()

    def health(self) -> dict[str, Any]:
        """Fields ``/healthz`` adds: broker connectivity and which planes run."""
        out: dict[str, Any] = {"broker": self.broker.url, "broker_connected": self.control.connected}
        out["spark"] = self.engine is not None
        if self.ingest is not None:
            out["ingest_connected"] = bool(self.ingest.connected)
        return out | (self.role() if self.role is not None else {})

    def api(self, dashboard_stream_s: float = 30.0) -> Any:
        """The FastAPI app over this hub; a dashboard's event stream ends after ``dashboard_stream_s``."""
        from hub.api.app import create_app

        return create_app(
            self.coordinator,
            self.config.tokens,
            ingest_stats=(lambda: self.ingest.stats()) if self.ingest is not None else None,
            engine_metrics=(lambda: self.engine.metrics()) if self.engine is not None else None,
            health=self.health,
            dashboard_stream_s=dashboard_stream_s,
            enrolment=self.enrolment,
            models=self.models(),
        )

    def tls(self) -> ServerTls | None:
        """The REST API's certificate, or None with ``plain_http`` (:func:`api_tls`)."""
        return api_tls(self.config)

    def serve(self) -> None:
        """Start everything, serve the API until SIGINT or SIGTERM, then stop everything."""
        try:
            from hub.api.serving.run import ApiServer
        except ImportError as exc:
            from spanedge.errors import MissingExtra

            raise MissingExtra(exc.name or "uvicorn", "hub") from None
        # uvicorn shuts down gracefully on a signal, then raises it again with the previous
        # handler; turning SIGTERM into an exception lets the data plane stop cleanly too
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminate) if main else None
        try:
            self.claim()
            try:
                tls = self.tls()
                self.start()
                server = ApiServer(self.api(), uvicorn_options(self.config, tls), self.config.client_limits)
                server.run(sockets=[self.listener] if self.listener is not None else None)
            finally:
                self.stop()
        except (_Terminated, KeyboardInterrupt):
            log.info("hub stopping")
        finally:
            self.release()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def api_tls(config: HubConfig) -> ServerTls | None:
    """The REST API's certificate (given, or issued by the hub's CA), or None with ``plain_http``; logs which.

    Raises:
        CertificateError: plain HTTP on an address other hosts reach, or no usable certificate.
    """
    if config.plain_http:
        check_plain_http(config.host)
        log.warning("the REST API serves plain HTTP on %s (--plain-http): its tokens travel unencrypted", config.host)
        return None
    tls = server_tls(Path(config.state_dir), config.host, config.tls_cert, config.tls_key, config.tls_names)
    if tls.ca_file is None:
        log.info("the REST API serves HTTPS with the certificate %s", tls.cert_file)
    else:
        log.info(
            "the REST API serves HTTPS with a certificate of the hub's CA; clients trust %s "
            "(--hub-ca or SPANEDGE_HUB_CA), SHA-256 fingerprint %s",
            tls.ca_file.absolute(),
            tls.ca_fingerprint,
        )
    return tls


def uvicorn_options(config: HubConfig, tls: ServerTls | None = None) -> dict[str, Any]:
    """The options of the hub's uvicorn server: its address, its certificate, and its logs at the hub's log level.

    The access log (one line per request) is on only at DEBUG; without ``tls`` it serves plain HTTP.
    """
    level = config.log_level.lower()
    options: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "log_level": level,
        "access_log": level == "debug",
        "timeout_graceful_shutdown": 3,  # an open dashboard stream must not hold a stop
    }
    if tls is not None:
        options |= {"ssl_certfile": str(tls.cert_file), "ssl_keyfile": str(tls.key_file)}
    return options


class _Terminated(Exception):
    """SIGTERM arrived."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated
