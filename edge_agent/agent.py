"""The edge agent: one asyncio process per site.

It subscribes to the site brokers of the streams its pipelines read, runs the
pipelines, commits their outputs and window snapshots to the outbox, and only
then acknowledges the intake messages and serves local sinks. A drain task
publishes the outbox to the hub broker; a heartbeat task reports counters and
measured latencies. With ``idle_timeout``, the intake loop also ticks the
pipelines (every second, or a quarter of a shorter timeout), so windows of a
site whose sensors went quiet still close; what a tick fires is committed like
any other output. In managed mode it takes signed plans from the hub.
Dead letters go to the DLQ topic on the hub broker; late records (the side
output of windows) are counted in heartbeats and appended to
``<state dir>/late-<app>.jsonl``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
from paho.mqtt.client import topic_matches_sub

from edge_agent import checkpoint
from edge_agent.checkpoint import Checkpointer, Committed
from edge_agent.heartbeat import ProcessStats, Rates, heartbeat
from edge_agent.outbox import Drainer, Outbox
from edge_agent.plans import PlanIntake
from edge_agent.probes import ClockOffset, PublishProbe, RttStats, mqtt_roundtrip_ms, tcp_connect_ms
from edge_agent.runtime import DeadLetter, Pipeline, check_idle_timeout, from_plan
from edge_agent.transport import Inbox, Message, PahoTransport, Transport
from spanedge import topics
from spanedge.app import App
from spanedge.errors import InvalidPlan, SpanEdgeError
from spanedge.loader import load_app_source
from spanedge.plan import Plan, split_replica
from spanedge.sites import Sites, Tier

log = logging.getLogger("spanedge.agent")

_INTAKE_STATE = "__intake__"


@dataclass
class AgentConfig:
    """Settings of one agent (the ``spanedge agent`` options)."""

    site: str
    sites: Sites
    state_dir: Path
    heartbeat_interval: float = 5.0
    outbox_max_bytes: int = 256 * 2**20
    drop_policy: str = "oldest"
    drain_rate: float = 20_000.0
    max_future_skew: float = 300.0
    out_of_orderness: float = 1.0
    idle_timeout: float | None = None  # seconds without records before the watermark follows the clock
    checkpoint_interval: float = 1.0
    batch_size: int = 100
    inbox_size: int = 5000
    shutdown_drain_s: float = 5.0
    late_file_max_bytes: int = 16 * 2**20
    secret: bytes | None = None

    def __post_init__(self) -> None:
        """Reject an ``idle_timeout`` the pipelines could not use, before anything starts."""
        check_idle_timeout(self.idle_timeout)


@dataclass
class _Route:
    source_site: str
    topic_filter: str
    qos: int
    app: str
    replica: str


class Agent:
    """Runs the operators a plan gives one site.

    Args:
        config: the agent settings.
        plans: the plans to run (standalone); ``None`` to take them from the hub (managed).
    """

    def __init__(self, config: AgentConfig, plans: list[Plan] | None = None) -> None:
        self.config = config
        self.site = config.site
        self.sites = config.sites
        self.sites.site(self.site)  # raises with the known names if unknown
        self.managed = plans is None
        hubs = [s.name for s in self.sites.hubs]
        self.hub_site = plans[0].hub if plans and plans[0].hub in hubs else hubs[0]
        self.outbox = Outbox(config.state_dir / "agent.db", config.outbox_max_bytes, config.drop_policy)
        self.inbox = Inbox(config.inbox_size)
        self.pipelines: dict[str, Pipeline] = {}
        self.plans: dict[str, Plan] = {}
        self.checkpointer = Checkpointer(self.outbox, self.pipelines, config.checkpoint_interval)
        self.memory: dict[str, list[Any]] = collections.defaultdict(list)
        self.dlq_count = 0
        self.late_count = 0
        self._initial = plans or []
        self._routes: list[_Route] = []
        self._route_cache: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._intake: dict[str, Transport] = {}
        self._sink_transport: Transport | None = None
        self._acks: list[Message] = []
        self._touched: set[str] = set()
        idle = config.idle_timeout
        self._tick_interval = min(1.0, idle / 4) if idle else None
        self._next_tick = 0.0
        self._recent: collections.deque[tuple[str, int, int]] = collections.deque(maxlen=512)
        self._recent_set: set[tuple[str, int, int]] = set()
        self._pending_set: set[tuple[str, int, int]] = set()
        self._files: dict[str, IO[str]] = {}
        self._late_full: set[str] = set()
        self._stop = asyncio.Event()
        self._hub_probe = PublishProbe()
        self._peer_rtt: dict[str, RttStats] = {}
        self._clock = ClockOffset()
        self._rates = Rates()
        self._proc = ProcessStats()
        hub_site = self.sites.site(self.hub_site)
        self.hub: Transport = PahoTransport(
            hub_site.mqtt(),
            f"spanedge-{self.site}-hub",
            f"hub broker ({self.hub_site})",
            inbox=self.inbox,
            persistent=False,
            on_published=self._on_hub_published,
        )
        self.drainer = Drainer(self.outbox, self.hub, config.drain_rate, batch_size=config.batch_size)
        self.hub.on_connected = self._hub_connected
        if self.managed:
            self.plan_intake: PlanIntake | None = PlanIntake(self.site, config.secret or b"")
        else:
            self.plan_intake = None
        self._load_recent()

    # -- lifecycle ----------------------------------------------------------

    def stop(self) -> None:
        """Ask the agent to drain, checkpoint and exit (safe from signal handlers)."""
        self._stop.set()

    async def run(self) -> None:
        """Run until :meth:`stop`; then drain, checkpoint and disconnect."""
        loop = asyncio.get_running_loop()
        self.inbox.bind(loop)
        self.hub.start()
        if self.managed:
            self.hub.subscribe([(topics.control(self.site, "plan"), 1), (topics.control(self.site, "probe"), 0)])
            self._resume_managed()
        else:
            self.hub.subscribe([(topics.control(self.site, "probe"), 0)])
            self.apply(self._initial)
        tasks = [
            asyncio.create_task(self.drainer.run(self._stop), name="drain"),
            asyncio.create_task(self._heartbeats(), name="heartbeat"),
        ]
        try:
            await self._consume()
        finally:
            await self._shutdown(tasks)

    async def _shutdown(self, tasks: list[asyncio.Task[None]]) -> None:
        self._stop.set()
        # messages still in the inbox are not acknowledged: the broker redelivers them
        self._flush()
        for transport in self._intake.values():
            transport.stop()
        if self._sink_transport is not None and self._sink_transport not in self._intake.values():
            self._sink_transport.stop()
        for task in tasks:
            try:
                await asyncio.wait_for(task, 2.0)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
        if self.outbox.records and self.hub.connected:
            drained = await self.drainer.drain(self.config.shutdown_drain_s)
            log.info("shutdown: outbox %s", "drained" if drained else f"keeps {self.outbox.records} records on disk")
        self.hub.stop()
        for handle in self._files.values():
            handle.close()
        self.outbox.close()
        log.info("agent of site %s stopped; state checkpointed in %s", self.site, self.config.state_dir)

    # -- plans --------------------------------------------------------------

    def _resume_managed(self) -> None:
        saved = self.config.state_dir / "plan.signed"
        if saved.is_file() and self.plan_intake is not None:
            try:
                plans = self.plan_intake.accept(saved.read_bytes())
            except InvalidPlan as exc:
                log.warning("ignoring the saved plan %s: %s", saved, exc)
                return
            log.info("resuming plan version %d until the hub publishes a newer one", self.plan_intake.version)
            self.apply(plans)

    def _on_plan(self, payload: bytes) -> None:
        assert self.plan_intake is not None
        try:
            site_plan = self.plan_intake.verify(payload)
        except InvalidPlan as exc:
            stale = "not newer" in str(exc)
            (log.debug if stale else log.warning)("rejected plan message: %s", exc)
            return
        self.plan_intake.version = site_plan.version
        (self.config.state_dir / "plan.signed").write_bytes(payload)
        log.info("applying plan version %d (%d apps)", site_plan.version, len(site_plan.plans))
        self._flush()
        self.apply(list(site_plan.plans))

    def apply(self, plans: Iterable[Plan]) -> None:
        """(Re)build the pipelines of ``plans``; stop apps no longer listed."""
        self._flush()
        wanted: dict[str, Plan] = {}
        for plan in plans:
            wanted[plan.app] = plan
        for name in list(self.pipelines):
            if name not in wanted:
                log.info("stopping app %s (no longer in the plan)", name)
                del self.pipelines[name]
                self.plans.pop(name, None)
        for name, plan in wanted.items():
            try:
                app = self._load(plan)
                pipeline = from_plan(
                    app,
                    plan,
                    self.site,
                    out_of_orderness=self.config.out_of_orderness,
                    max_future_skew=self.config.max_future_skew,
                    idle_timeout=self.config.idle_timeout,
                )
            except SpanEdgeError as exc:
                log.error("cannot run app %s: %s", name, exc)
                continue
            if checkpoint.restore(self.outbox, name, pipeline):
                log.info("app %s: restored window state from the checkpoint", name)
            self.pipelines[name] = pipeline
            self.plans[name] = plan
            if not pipeline.nodes:
                log.info("app %s: the plan runs nothing at site %s", name, self.site)
        self._rewire()

    @staticmethod
    def _load(plan: Plan) -> App:
        if not plan.app_source:
            msg = f"plan of app '{plan.app}' carries no app source; regenerate it with spanedge deploy --dry-run --output plan.json"
            raise InvalidPlan(msg)
        app = load_app_source(plan.app_source, plan.app_file or f"<{plan.app}>")
        if app.name != plan.app:
            msg = f"plan is for app '{plan.app}' but its source defines app '{app.name}'"
            raise InvalidPlan(msg)
        return app

    def _rewire(self) -> None:
        routes: list[_Route] = []
        for name, pipeline in self.pipelines.items():
            for replica in pipeline.sources:
                stream, group = split_replica(replica)
                source_site = group or self.site
                binding = self.sites.site(source_site).streams.get(stream)
                if binding is None:
                    log.error(
                        "app %s: site %s does not bind stream %r in sites.yaml; %s gets no input",
                        name,
                        source_site,
                        stream,
                        replica,
                    )
                    continue
                routes.append(_Route(source_site, binding.topic, binding.qos, name, replica))
        self._routes = routes
        self._route_cache.clear()
        wanted: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
        for r in routes:
            if (r.topic_filter, r.qos) not in wanted[r.source_site]:
                wanted[r.source_site].append((r.topic_filter, r.qos))
        for source_site, transport in list(self._intake.items()):
            if source_site not in wanted:
                transport.unsubscribe([f for f, _ in transport.filters])
                transport.stop()
                del self._intake[source_site]
                if self._sink_transport is transport:
                    self._sink_transport = None
        for source_site, filters in wanted.items():
            existing = self._intake.get(source_site)
            if existing is None:
                transport = PahoTransport(
                    self.sites.site(source_site).mqtt(),
                    f"spanedge-{self.site}-from-{source_site}",
                    f"site broker ({source_site})",
                    inbox=self.inbox,
                )
                transport.subscribe(filters)
                transport.start()
                self._intake[source_site] = transport
            else:
                transport = existing
                stale = [f for f, _ in transport.filters if f not in {x for x, _ in filters}]
                if stale:
                    transport.unsubscribe(stale)
                transport.subscribe(filters)

    # -- intake -------------------------------------------------------------

    def _route(self, message: Message) -> list[tuple[str, str]]:
        source_site = message.source.name
        key = (source_site, message.topic)
        found = self._route_cache.get(key)
        if found is None:
            found = [
                (r.app, r.replica)
                for r in self._routes
                if self._intake.get(r.source_site) is message.source
                and topic_matches_sub(r.topic_filter, message.topic)
            ]
            if len(self._route_cache) > 10_000:
                self._route_cache.clear()
            self._route_cache[key] = found
        return found

    async def _consume(self) -> None:
        while not self._stop.is_set():
            await self.inbox.wait(0.1)
            if self._stop.is_set():
                break
            messages = self.inbox.drain(1000)
            if messages:
                self._handle(messages)
            if self._tick_interval is not None and time.monotonic() >= self._next_tick:
                self._tick()
            if self._acks or self.checkpointer.due or (self._touched and self._interval_passed()):
                self._flush()

    def _tick(self) -> None:
        """Let pipelines whose input went idle advance their watermark (``idle_timeout``).

        A pipeline that moved is marked touched, so what it fired is collected,
        committed with its snapshot and served by the next :meth:`_flush`, exactly
        like the outputs of :meth:`_handle`.
        """
        assert self._tick_interval is not None
        self._next_tick = time.monotonic() + self._tick_interval
        for name, pipeline in self.pipelines.items():
            if pipeline.tick():
                self._touched.add(name)

    def _interval_passed(self) -> bool:
        return time.monotonic() - self.checkpointer.last_commit >= self.checkpointer.interval

    def _handle(self, messages: list[Message]) -> None:
        pipelines = self.pipelines
        live = set(self._intake.values())
        for m in messages:
            if m.source is self.hub:
                self._control(m)
                continue
            if m.source not in live:
                continue  # from a connection closed by a new plan; the broker redelivers it
            if m.qos:
                # a redelivery of a message already processed (its ack was lost in a crash or
                # a disconnect) has the same id and payload: acknowledge it, do not count it twice
                entry = (m.source.name, m.mid, zlib.crc32(m.payload))
                if entry in self._recent_set:
                    self._acks.append(m)
                    continue
                self._pending_set.add(entry)
                self._recent_set.add(entry)
                self._acks.append(m)
            for app, replica in self._route(m):
                pipelines[app].process(replica, m.payload, m.arrival)
                self._touched.add(app)

    def _control(self, m: Message) -> None:
        if m.topic == topics.control(self.site, "plan"):
            if self.plan_intake is not None and m.payload:
                self._on_plan(m.payload)
        elif m.topic == topics.control(self.site, "probe"):
            try:
                echo = orjson.loads(m.payload)
                if isinstance(echo, dict) and "hub_ts" in echo and "echo_ts" in echo:
                    self._clock.observe(float(echo["echo_ts"]), float(echo["hub_ts"]), m.arrival)
            except (orjson.JSONDecodeError, TypeError, ValueError):
                pass
        self.hub.ack(m.mid, m.qos)

    def _flush(self) -> None:
        """Commit pending outputs and snapshots, then ack intake and serve sinks."""
        for app in self._touched:
            if app in self.pipelines:
                self.checkpointer.collect(app)
        self._touched.clear()
        acks, self._acks = self._acks, []
        for m in acks:
            entry = (m.source.name, m.mid, zlib.crc32(m.payload))
            if entry in self._pending_set:
                self._pending_set.discard(entry)
                if len(self._recent) == self._recent.maxlen:
                    self._recent_set.discard(self._recent[0])
                self._recent.append(entry)
        extra = {_INTAKE_STATE: orjson.dumps(list(self._recent))} if acks else None
        done = self.checkpointer.commit(extra)
        for m in acks:
            m.source.ack(m.mid, m.qos)
        self._serve(done)
        if done.stored:
            self.drainer.kick()

    def _load_recent(self) -> None:
        blob = self.outbox.load_state(_INTAKE_STATE)
        if blob is None:
            return
        try:
            for name, mid, crc in orjson.loads(blob):
                entry = (str(name), int(mid), int(crc))
                self._recent.append(entry)
                self._recent_set.add(entry)
        except (orjson.JSONDecodeError, TypeError, ValueError):
            log.warning("intake checkpoint unreadable; redelivered messages may be counted twice")

    # -- outputs ------------------------------------------------------------

    def _serve(self, done: Committed) -> None:
        for _app, item in done.sinks:
            spec = item.spec
            body = orjson.dumps(item.value, default=str)  # a sink never fails on an odd value type
            if spec.kind == "mqtt":
                self._sink_mqtt().publish(spec.target, body, 1)
            elif spec.kind == "file":
                self._sink_file(item.operator, spec.target).write(body.decode() + "\n")
            elif spec.kind == "console":
                print(body.decode(), flush=True)
            else:
                self.memory[spec.target or item.operator].append(item.value)
        for app, dead in done.dlq:
            self.dlq_count += 1
            if self.dlq_count <= 10 or self.dlq_count % 1000 == 0:
                log.info("dead letter #%d (%s, %s): %s", self.dlq_count, app, dead.operator, dead.reason)
            self.hub.publish(topics.dlq(app, self.site), dead.to_json(), 1)
        for app, dead in done.late:
            self.late_count += 1
            self._side_output(app, dead)
        for handle in self._files.values():
            handle.flush()

    def _side_output(self, app: str, dead: DeadLetter) -> None:
        """Append a late record to ``<state dir>/late-<app>.jsonl`` (bounded; the count is always kept)."""
        path = self.config.state_dir / f"late-{app}.jsonl"
        handle = self._files.get(str(path))
        if handle is None:
            handle = self._files[str(path)] = path.open("a", encoding="utf-8")
        if handle.tell() < self.config.late_file_max_bytes:
            handle.write(dead.to_json().decode() + "\n")
        elif app not in self._late_full:
            self._late_full.add(app)
            log.warning("late records of app %s exceed %s bytes; counting only", app, self.config.late_file_max_bytes)

    def _sink_mqtt(self) -> Transport:
        if self._sink_transport is None:
            own = self._intake.get(self.site)
            if own is None:
                own = PahoTransport(
                    self.sites.site(self.site).mqtt(),
                    f"spanedge-{self.site}-sink",
                    f"site broker ({self.site})",
                    persistent=False,
                )
                own.start()
            self._sink_transport = own
        return self._sink_transport

    def _sink_file(self, operator: str, target: str) -> IO[str]:
        path = Path(target)
        if path.suffix not in (".jsonl", ".json", ".txt", ".log"):
            path = path / f"{operator}-{self.site}.jsonl"
        key = str(path)
        handle = self._files.get(key)
        if handle is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = self._files[key] = path.open("a", encoding="utf-8")
        return handle

    # -- hub link, heartbeats, probes -------------------------------------

    def _on_hub_published(self, mid: int) -> None:
        if not self._hub_probe.acked(mid):
            self.drainer.acked(mid)

    def _hub_connected(self) -> None:
        self._hub_probe.forget()

    async def _heartbeats(self) -> None:
        interval = self.config.heartbeat_interval
        peers = [s for s in self.sites.sites.values() if s.name != self.site and s.tier is Tier.SPOKE]
        while not self._stop.is_set():
            await self._probe(peers)
            if self.hub.connected:
                self.hub.publish(topics.control(self.site, "heartbeat"), orjson.dumps(self.heartbeat()), 1)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)

    async def _probe(self, peers: list[Any]) -> None:
        if self.hub.connected:
            body = orjson.dumps({"site": self.site, "ts": time.time()})
            self._hub_probe.send(lambda: self.hub.publish(topics.control(self.site, "probe"), body, 1))
        brokers = [peer.mqtt() for peer in peers]
        times = await asyncio.gather(
            *(
                tcp_connect_ms(b.host, b.port) if b.tls is not None else mqtt_roundtrip_ms(b.host, b.port)
                for b in brokers
            )
        )
        for peer, ms in zip(peers, times, strict=True):
            if ms is not None:
                self._peer_rtt.setdefault(peer.name, RttStats()).add(ms)

    def heartbeat(self) -> dict[str, Any]:
        """The current heartbeat message."""
        counts: dict[str, dict[str, int]] = {}
        lags = []
        for name, pipeline in self.pipelines.items():
            prefix = f"{name}/" if len(self.pipelines) > 1 else ""
            for replica, c in pipeline.metrics().items():
                counts[prefix + replica] = c
            lag = pipeline.watermark_lag()
            if lag is not None:
                lags.append(lag)
        cpu, rss = self._proc.sample()
        latency = {self.hub_site: self._hub_probe.stats.to_dict()}
        latency.update({name: stats.to_dict() for name, stats in self._peer_rtt.items()})
        return heartbeat(
            site=self.site,
            apps=sorted(self.pipelines),
            operators=self._rates.update(counts),
            watermark_lag_s=max(lags) if lags else None,
            outbox=self.outbox.stats(),
            dlq=self.dlq_count,
            late=self.late_count,
            overload_dropped=self.inbox.dropped,
            cpu_percent=cpu,
            rss_bytes=rss,
            latency=latency,
            clock_offset_ms=self._clock.offset_ms,
        )
