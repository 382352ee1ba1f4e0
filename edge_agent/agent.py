"""The edge agent: one asyncio process per site.

It subscribes to the site brokers of the streams its pipelines read
(:mod:`edge_agent.intake`), runs the pipelines, commits their outputs and
window snapshots to the outbox, and only then acknowledges the intake
messages and serves local sinks (:mod:`edge_agent.processing`,
:mod:`edge_agent.sinks`). A drain task publishes the outbox to the hub broker;
a heartbeat task reports counters and measured latencies
(:mod:`edge_agent.telemetry`). With ``idle_timeout``, the intake loop also
ticks the pipelines (every second, or a quarter of a shorter timeout), so
windows of a site whose sensors went quiet still close; what a tick fires is
committed like any other output. In managed mode it takes signed plans from
the hub (:mod:`edge_agent.plans`, :mod:`edge_agent.apps`). Dead letters go to
the DLQ topic on the hub broker; late records (the side output of windows) are
counted in heartbeats and appended to ``<state dir>/late-<app>.jsonl``.

The connections are made by the :class:`~edge_agent.mqtt.transport.TransportFactory`
the agent is given (``PahoTransport`` in production, a stand-in in tests).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from edge_agent.apps import Apps
from edge_agent.config import AgentConfig
from edge_agent.connectors.mqtt import SiteBrokerLink
from edge_agent.connectors.status import connector_states
from edge_agent.heartbeat import CPU_BUDGET_FILE
from edge_agent.intake import Intake
from edge_agent.models.intake import ModelIntake
from edge_agent.models.store import ModelStore
from edge_agent.mqtt.transport import Inbox, Message, Transport, TransportFactory
from edge_agent.outbox import Drainer, Outbox
from edge_agent.plans import HubPlans, PlanIntake, peer_learner
from edge_agent.processing import Processor
from edge_agent.recovery import Recoveries, Spool, SpoolFeed
from edge_agent.sinks import LocalSinks
from edge_agent.telemetry import Telemetry
from spanedge import topics
from spanedge.loader import source_hash
from spanedge.mqtt import AGENT_HUB_LINK
from spanedge.plan import Plan
from spanedge.private_files import private_dir
from spanedge.runtime import Pipeline
from spanedge.wire.heartbeat import Heartbeat

if TYPE_CHECKING:
    from spanedge.metrics import Exposition
    from spanedge.signing import TrustedKeys

log = logging.getLogger(__name__)


def _no_keys() -> TrustedKeys:
    from spanedge.signing import TrustedKeys

    return TrustedKeys([])


def _managed_intakes(config: AgentConfig, hub_site: str) -> tuple[ModelIntake, PlanIntake, HubPlans]:
    """A managed agent's model and plan intakes (the plan last saved under its state directory comes back first)."""
    keys = config.trusted_keys or _no_keys()
    models = ModelIntake(config.site, keys, ModelStore(config.state_dir / "models"))
    models.restore()
    plans = PlanIntake(config.site, keys, learn=peer_learner(config.sites, config.site))
    return models, plans, HubPlans(plans, config.state_dir / "plan.signed", config.plan_wait, hub_site)


class Agent:
    """Runs the operators a plan gives one site: composes the parts and runs their loops.

    Args:
        config: the agent settings.
        plans: the plans to run (standalone); ``None`` to take them from the hub (managed).
        connect: builds the MQTT connections (``edge_agent.mqtt.paho_transport.PahoTransport``).
    """

    def __init__(self, config: AgentConfig, plans: list[Plan] | None = None, *, connect: TransportFactory) -> None:
        self.config = config
        self.site = site = config.site
        self.sites = sites = config.sites
        sites.site(site)  # raises with the known names if unknown
        self.managed = plans is None
        hubs = [s.name for s in sites.hubs]
        self.hub_site = plans[0].hub if plans and plans[0].hub in hubs else hubs[0]
        private_dir(config.state_dir)  # everything under it is the site's own: 0700 directories, 0600 files
        self.outbox = Outbox(config.state_dir / "agent.db", config.outbox_max_bytes, config.drop_policy)
        self.inbox = Inbox(config.inbox_size)
        self.apps = Apps(config, self.outbox)
        self.hub: Transport = connect(
            sites.site(self.hub_site).mqtt(),
            f"spanedge-{site}-hub",
            f"hub broker ({self.hub_site})",
            inbox=self.inbox,
            settings=AGENT_HUB_LINK,
            on_published=self._on_hub_published,
        )
        self.connect = connect
        self.intake = Intake(site, sites, self.inbox, connect)
        self.site_broker = SiteBrokerLink(site, sites, self.intake, connect)
        devices = lambda: getattr(self.sites.sites.get(site), "devices", {})  # noqa: E731
        self.sinks = LocalSinks(
            site, config.state_dir, config.late_file_max_bytes, self.hub, self.site_broker.get, devices=devices
        )
        self.telemetry = Telemetry(
            site,
            sites,
            self.hub_site,
            self.hub,
            config.heartbeat_interval,
            config.peer_probe_interval,
            budget_file=config.state_dir / CPU_BUDGET_FILE,
        )
        self.drainer = Drainer(
            self.outbox,
            self.hub,
            config.drain_rate,
            batch_size=config.batch_size,
            publisher=site,
            max_batch_bytes=sites.site(self.hub_site).message_limit,
        )
        self.processor = Processor(
            self.apps.pipelines,
            self.outbox,
            self.intake,
            self.sinks,
            checkpoint_interval=config.checkpoint_interval,
            idle_timeout=config.idle_timeout,
            on_stored=self.drainer.kick,
            rollbacks=self.apps.rollbacks,
        )
        spool = Spool(config.state_dir / "spool.db", config.spool_keep_s)
        self.spool_feed = SpoolFeed(site, sites, spool, self.inbox, connect)
        self.recoveries = Recoveries(
            site,
            sites,
            self.outbox,
            spool,
            self.sinks.serve,
            on_stored=self.drainer.kick,
            out_of_orderness=config.out_of_orderness,
            max_future_skew=config.max_future_skew,
        )
        self.hub.on_connected = self.telemetry.reconnected
        self.hub_plans: HubPlans | None = None
        self.plan_intake: PlanIntake | None = None
        self.models: ModelIntake | None = None
        if self.managed:
            self.models, self.plan_intake, self.hub_plans = _managed_intakes(config, self.hub_site)
        self._initial = plans or []
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    @property
    def pipelines(self) -> dict[str, Pipeline]:
        """The running pipelines, by app name."""
        return self.apps.pipelines

    @property
    def plans(self) -> dict[str, Plan]:
        """The plans of the running apps, by app name."""
        return self.apps.plans

    @property
    def dlq_count(self) -> int:
        """Dead letters sent since start."""
        return self.sinks.dlq_count

    @property
    def late_count(self) -> int:
        """Late records since start."""
        return self.sinks.late_count

    @property
    def memory(self) -> dict[str, list[Any]]:
        """Values of ``memory`` sinks, by target."""
        return self.sinks.memory

    # -- lifecycle ----------------------------------------------------------

    def stop(self) -> None:
        """Ask the agent to drain, checkpoint and exit (safe from signal handlers)."""
        self._stop.set()

    async def run(self) -> None:
        """Run until :meth:`stop`; then drain, checkpoint and disconnect."""
        loop = asyncio.get_running_loop()
        self.inbox.bind(loop)
        if self.config.metrics_port is not None:
            from spanedge.metrics import serve as serve_metrics  # only with --metrics-port

            serve_metrics(self.config.metrics_port, self._exposition)
        self.hub.start()
        if self.hub_plans is not None:
            assert self.models is not None
            plan, probe = topics.control(self.site, "plan"), topics.control(self.site, "probe")
            self.hub.subscribe([(self.models.topic_filter, 1), (plan, 1), (probe, 0)])
            self._apply_if_any(self.hub_plans.start(loop.time()))
        else:
            self.hub.subscribe([(topics.control(self.site, "probe"), 0)])
            self.apply(self._initial)
        self._tasks.append(asyncio.create_task(self.drainer.run(self._stop), name="drain"))
        if not self._waiting_for_plan():
            self._start_heartbeats()
        try:
            await self._consume()
        finally:
            await self._shutdown(self._tasks)

    def _exposition(self) -> Exposition:
        """The last heartbeat's metrics and the connectors' state."""
        from edge_agent.connectors.status import add_connector_metrics

        out = self.telemetry.exposition()
        add_connector_metrics(out, self.site, self.intake.connectors.values(), self.sinks.opened_actuators)
        return out

    def _waiting_for_plan(self) -> bool:
        return self.hub_plans is not None and self.hub_plans.waiting

    def _start_heartbeats(self) -> None:
        """Start the heartbeats (and probes); a restarted agent waiting for the hub's plan sends none yet.

        Until then the hub keeps the frontiers the site announced before it went down, so its
        windows keep waiting for what the site still owes instead of an app it does not list yet.
        """
        self._tasks.append(asyncio.create_task(self.telemetry.run(self._stop, self.heartbeat), name="heartbeat"))

    async def _consume(self) -> None:
        while not self._stop.is_set():
            await self.inbox.wait(0.1)
            if self._stop.is_set():
                break
            messages = self.inbox.drain(1000)
            if messages:
                self._handle(messages)
            if self._waiting_for_plan():
                self._resume_when_due()
            self.processor.step()
            self._retire_drained()
            if self.recoveries.pending:
                self.recoveries.step()

    async def _shutdown(self, tasks: list[asyncio.Task[None]]) -> None:
        self._stop.set()
        # messages still in the inbox are not acknowledged: the broker redelivers them
        self.processor.flush()
        self.intake.stop()
        self.site_broker.stop()
        self.spool_feed.stop()
        for task in tasks:
            try:
                await asyncio.wait_for(task, 2.0)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
        if self.outbox.records and self.hub.connected:
            drained = await self.drainer.drain(self.config.shutdown_drain_s)
            log.info("shutdown: outbox %s", "drained" if drained else f"keeps {self.outbox.records} records on disk")
        self.hub.stop()
        self.sinks.close()
        self.spool_feed.close()
        self.outbox.close()
        log.info("agent of site %s stopped; state checkpointed in %s", self.site, self.config.state_dir)

    # -- plans --------------------------------------------------------------

    def _resume_when_due(self) -> None:
        """Start the heartbeats once the wait for the hub's plan is over, and run the saved plan if it did not come."""
        assert self.hub_plans is not None
        plans = self.hub_plans.resume_when_due(asyncio.get_running_loop().time())
        if self.hub_plans.waiting:
            return
        self._start_heartbeats()
        self._apply_if_any(plans)

    def _apply_if_any(self, plans: list[Plan] | None) -> None:
        if plans is not None:
            self.apply(plans)

    def apply(self, plans: Iterable[Plan]) -> None:
        """(Re)build the pipelines of ``plans``; stop apps no longer listed.

        Pending outputs are committed first, so a rebuilt pipeline restores its latest state.
        """
        self.processor.flush()
        self.apps.apply(plans)
        self._rewire()
        self.sinks.resume(self.pipelines)
        apps = {name: p.app for name, p in self.pipelines.items()}
        self.spool_feed.update(self.plans, apps)
        self.recoveries.update(self.plans, apps)

    def _rewire(self) -> None:
        """Subscribe to what the pipelines read now; the sinks stop using the connections that closed."""
        for closed in self.intake.rewire(self.pipelines):
            self.site_broker.closed(closed)
            self.sinks.closed(closed)

    def _retire_drained(self) -> None:
        """Report the handover parts here that emitted everything; drop them once their last window here fired."""
        if not any(p.handovers for p in self.plans.values()):
            return
        delivered = self.apps.newly_delivered()
        if delivered:
            self.processor.flush()  # the parts' last results are committed before their sequence numbers are read
            self.apps.record_sent(delivered)
        if not any(pipeline.drained() for pipeline in self.pipelines.values()):
            return
        self.processor.flush()  # their last results and the snapshot without them are committed first
        if self.apps.retire_drained():
            self._rewire()

    # -- messages -------------------------------------------------------------

    def _handle(self, messages: list[Message]) -> None:
        """Act on hub control messages; pass the others to the processor, in arrival order."""
        data: list[Message] = []
        for m in self.spool_feed.take(messages):
            if m.source is not self.hub:
                data.append(m)
                continue
            if data:  # what came before a new plan runs on the pipelines of the old one
                self.processor.handle(data)
                data = []
            self._control(m)
        if data:
            self.processor.handle(data)

    def _control(self, m: Message) -> None:
        if m.topic == topics.control(self.site, "plan"):
            if self.hub_plans is not None and m.payload:
                self._apply_if_any(self.hub_plans.receive(m.payload))
        elif m.topic == topics.control(self.site, "probe"):
            self.telemetry.echo(m.payload, m.arrival)
        elif self.models is not None and self.models.handles(m.topic):
            self.models.receive(m.topic, m.payload)
        self.hub.ack(m.mid, m.qos)

    def _on_hub_published(self, mid: int) -> None:
        if not self.telemetry.published(mid):
            self.drainer.acked(mid)

    def heartbeat(self) -> Heartbeat:
        """The current heartbeat message; it flags a plan in force past its expiry (warned about in the log)."""
        beat = self.telemetry.heartbeat(
            self.pipelines,
            self.outbox,
            self.inbox,
            self.dlq_count,
            self.late_count,
            self.apps.handed_over() + self.recoveries.reports(),
            self.processor.checkpointer.frontiers,
            self.processor.checkpointer.sink_frontiers,
            self.sinks.unacknowledged_bounds(),
            self.sinks.result_latency(),
            0.0 if len(self.inbox) else self.intake.live_for(),
            self.sinks.counters,
        )
        states = connector_states(self.site, self.intake.connectors.values(), self.sinks.opened_actuators)
        if states:
            beat = msgspec.structs.replace(beat, connectors=states)
        sources = {name: source_hash(plan.app_source) for name, plan in self.plans.items() if plan.app_source}
        beat = msgspec.structs.replace(beat, sources=sources)
        if self.models is not None:
            beat = msgspec.structs.replace(beat, models=self.models.report())
        if self.hub_plans is not None and self.hub_plans.warn_if_expired():
            return msgspec.structs.replace(beat, plan_expired=True)
        return beat
