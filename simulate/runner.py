"""Running an app across a simulated topology: start everything, send sensor data, inject faults, report.

Managed mode starts ``spanedge hub`` and deploys the app over its REST API
(the hub places it and publishes signed plans that the agents take).
Standalone mode places the app here with :func:`placement.solve` (``ilp``,
``central`` or ``local-first``), then starts ``python -m hub.dataplane`` and
the agents with that plan: the way to compare placements on the same data.

:class:`Run` only orchestrates; the parts live in :mod:`simulate.scenario`
(inputs), :mod:`simulate.topology` and :mod:`simulate.cluster` (brokers, WAN
links, processes), :mod:`simulate.readiness`, :mod:`simulate.sensor_fleet`,
:mod:`simulate.fault_schedule` (with :mod:`simulate.joins`), :mod:`simulate.drain` and
:mod:`simulate.checking` (results against the reference).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulate import charts
from simulate.checking import Reference, check_sinks, site_counts
from simulate.cluster import Cluster
from simulate.devices.actuated import Devices
from simulate.drain import drain_problems, wait_drained
from simulate.errors import InvalidOption, SimulationError
from simulate.fault_schedule import FaultSchedule
from simulate.faults import FaultKind, drifts, insecure_refusal
from simulate.joins import first_offset
from simulate.netns.topology import NetnsTopology
from simulate.progress import EventLog, SiteStatus, Status
from simulate.readiness import (
    plan_sites,
    subscription_baseline,
    wait_dataplane,
    wait_heartbeats,
    wait_subscribed,
)
from simulate.report import (
    Report,
    SinkCheck,
    combine_latency,
    plan_changes_of,
    plan_history_of,
    replans_of,
)
from simulate.report_html import write_html
from simulate.results import Collector, mqtt_sinks
from simulate.scenario import Options, Scenario, check_options, place
from simulate.sensor_fleet import SensorFleet
from simulate.sensors import Sent
from simulate.site_losses import Destroyed, destroyed_by, recoveries
from simulate.timeline import Timeline, WanSampler, fault_marks, relative, replan_marks
from simulate.topology import OBSERVER, Topology
from spanedge.sites import Tier

__all__ = [
    "Options",
    "Outcome",
    "Run",
    "SimulationError",
    "run",
    "run_compare",
]


@dataclass
class Outcome:
    """What a run produced: the report plus the raw observations, for tests.

    ``html`` is the HTML report that shows this run: ``report.html`` in its run
    directory, or the one that overlays the runs of :func:`run_compare`.
    """

    report: Report
    sent: list[Sent]
    collector: Collector
    run_dir: Path
    started_at: float
    events: list[str]
    timeline: Timeline
    html: Path


def write_outputs(run_dir: Path, report: Report, timeline: Timeline, events: list[str]) -> Path:
    """Write a run's report (JSON and HTML), timeline and event log to ``run_dir``; return the HTML report's path."""
    (run_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2))
    (run_dir / "timeline.json").write_text(json.dumps(timeline.to_dict()))
    (run_dir / "events.log").write_text("\n".join(events) + "\n")
    return write_html(run_dir / "report.html", [(report, timeline)])


async def _final_placement(cluster: Cluster, scenario: Scenario) -> dict[str, Any] | None:
    """The hub's placement answer at the end of a run; with a ``deploy`` fault, ``rollout.json`` written too."""
    placement = await cluster.placement(scenario.app.name)
    if any(f.kind is FaultKind.DEPLOY for f in scenario.faults):
        await cluster.rollout(scenario.app.name)
    return placement


class Run:
    """One run (internal; use :func:`run`)."""

    def __init__(self, opts: Options, *, insecure_brokers: bool = False) -> None:
        """Check every input and plan the topology, on secured brokers unless ``insecure_brokers``; start nothing."""
        charts.require()
        self.opts = opts
        self.scenario = scenario = Scenario.load(opts)
        if insecure_brokers and (refused := insecure_refusal(scenario.faults)):
            raise InvalidOption(refused)
        kind = NetnsTopology if opts.hosts == "netns" else Topology
        where = scenario.sites, scenario.sim, scenario.run_dir, opts.broker
        self.topology = kind(*where, secure=not insecure_brokers, joining=scenario.joining)
        self.cluster = Cluster(self.topology, scenario.run_dir, scenario.hub, scenario.starting)
        self.collector = Collector(scenario.app.name, mqtt_sinks(scenario.app))
        self.events = EventLog()
        self.faults = FaultSchedule(
            scenario.faults,
            self.cluster,
            scenario.hub,
            self.events.note,
            stop_sensors=lambda s: self.fleet.stop(s),
            placement=(lambda: self.cluster.placement(scenario.app.name)) if scenario.mode == "managed" else None,
            start_sensors=self._start_joined,
        )
        self.fleet = SensorFleet()
        self.devices = Devices.of(scenario.sites, scenario.app, scenario.sim, loopback=opts.hosts != "netns")
        self.device_checks: dict[str, SinkCheck] = {}
        self.wan = WanSampler(self.topology.wan_bytes)
        self.stop_event = asyncio.Event()
        self.phase = "starting"
        self.t0 = 0.0
        self.problems: list[str] = []
        self.drained = True
        self.placement: dict[str, Any] | None = None
        self.baseline: dict[str, int] = {}

    async def run(self) -> Outcome:
        """Run the whole simulation and return its outcome; everything started is stopped."""
        tasks: list[asyncio.Task[Any]] = []
        try:
            await self._bring_up(tasks)
            await self._drive(tasks)
            return self._outcome()
        finally:
            self.phase = "stopping"
            await self._shutdown(tasks)

    def _spawn(self, tasks: list[asyncio.Task[Any]], coroutine: Coroutine[Any, Any, Any]) -> None:
        tasks.append(asyncio.ensure_future(coroutine))

    async def _bring_up(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Brokers and WAN, the watchers, the hub and agents, the deploy; return once everyone subscribed."""
        scenario, opts, topology, cluster = self.scenario, self.opts, self.topology, self.cluster
        await self.devices.start(topology, self.events.note)
        await topology.start()
        kind = topology.broker_kind
        note = " (embedded Python broker: Mosquitto is not installed)" if kind == "amqtt" else ""
        self.events.note(
            f"brokers: {len(topology.brokers)} x {kind}{note}, {topology.security}; "
            f"{len(topology.proxies)} WAN proxies; run directory {scenario.run_dir}"
        )
        for line in topology.shaping():
            self.events.note(line)
        for name, broker in topology.brokers.items():
            hub = name == scenario.hub
            login = topology.login(OBSERVER)
            self._spawn(
                tasks, self.collector.watch(name, topology.host(name), broker.port, hub, self.stop_event, login)
            )
        self._spawn(tasks, self._report_status())
        self.baseline = baseline = await subscription_baseline(self.collector, kind, len(scenario.sites.sites))
        plan_file = None
        if scenario.mode == "standalone":
            plan_file, summary = place(scenario)
            self.events.note(summary)
        child = cluster.start_hub(
            scenario.mode, opts.spark_master, scenario.app_file, plan_file, opts.hub_command, opts.ha
        )
        self._spawn(tasks, cluster.sample_cpu())
        if scenario.mode == "managed":
            self.events.note(await cluster.wait_hub(opts.ready_timeout))
        cluster.start_agents(opts.heartbeat_interval, plan_file)
        if scenario.mode == "managed":
            plan = await cluster.deploy(scenario.app_file)
            self.events.note("deployed the app to the hub")
        else:  # the data plane says when the app's queries run (the managed deploy returns once they do)
            assert plan_file is not None
            await wait_dataplane(child.log, opts.ready_timeout, cluster.check_alive)
            plan = json.loads(plan_file.read_text())
        app = scenario.app.name
        running = plan_sites(plan, scenario.starting)
        await wait_heartbeats(
            self.collector, scenario.starting, app, opts.ready_timeout, cluster.check_agents, cluster.logs, running
        )
        idle = [s for s in scenario.starting if s not in running]
        self.events.note(
            f"agents run the app at {', '.join(running)}"
            + (f"; up with nothing to run: {', '.join(idle)}" if idle else "")
            + (f"; joining later: {', '.join(scenario.joining)}" if scenario.joining else "")
        )
        sources = [s for s in scenario.source_sites if s not in scenario.joining]
        for sites, what in (([scenario.hub], "the hub ingest"), (sources, "the agents")):
            await wait_subscribed(self.collector, kind, sites, baseline, opts.ready_timeout, cluster.check_alive, what)
        await self.devices.sensors.wait_subscribed(opts.ready_timeout, cluster.check_alive)
        await asyncio.sleep(1.0)
        self.events.note("ready: agents and hub subscribed")

    async def _drive(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Run the sensors and the fault schedule, then wait for the results to drain."""
        scenario = self.scenario
        loop = asyncio.get_running_loop()
        self.t0 = time.time()
        start_mono = loop.time()
        self.events.start(self.t0)
        self._spawn(tasks, self.wan.run(self.t0))
        self.phase = "sensors running"
        ports, hosts, logins = self.topology.sensor_endpoints()
        held = set(scenario.joining)  # a site that joins sends from the switch of its join on
        nodes = self.devices.sensors
        self.fleet = SensorFleet.build(
            scenario.sites, scenario.sim, ports, self.t0, hosts, logins=logins, held=held, nodes=nodes
        )
        self.fleet.drift(drifts(scenario.faults))  # drift faults shift values as the sensors make them
        joins = f" (held until they join: {', '.join(held)})" if held else ""
        self.events.note(f"sensors started: {self.fleet.devices} devices{joins}")
        faults = asyncio.ensure_future(self.faults.run(start_mono, until=start_mono + scenario.duration))
        await self.fleet.run(start_mono, scenario.duration)
        sensors_done = time.time()
        self.events.note("sensors finished")
        if not faults.done():
            self.phase = "waiting for faults to end"
            await faults
        if self.faults.killed:  # what the dead sites destroyed depends on when their replicas moved
            self.placement = await self.cluster.placement(scenario.app.name)
        await self._drain(sensors_done)
        self.device_checks = await self.devices.check(self._reference(), self.events.note)
        self.placement = await _final_placement(self.cluster, scenario)
        self.problems += self.faults.skipped + self.cluster.stopped()

    async def _start_joined(self, site: str, switch: float) -> None:
        """Start the sensors of ``site``, which joined, once its agent subscribed: from its join ``switch`` on."""
        waits = self.collector, self.topology.broker_kind, [site], self.baseline, self.opts.ready_timeout
        await wait_subscribed(*waits, self.cluster.check_alive, f"the agent of {site}, which joined,")
        begin = first_offset(switch, self.t0, self.scenario.sim.sensors.get(site, {}).values())
        self.fleet.release(site, begin)
        self.events.note(
            f"sensors of {site} start at {begin:.1f} s, its agent subscribed: every record they send counts"
        )

    async def _drain(self, sensors_done: float) -> None:
        reference = self._reference()
        risk = reference.at_risk(self.scenario.app, self._destroyed())
        spokes = [s for s in self.scenario.spokes if s not in self.faults.killed]

        def on_phase(phase: str) -> None:
            self.phase = phase

        self.drained = await wait_drained(
            self.collector,
            spokes,
            lambda: reference.missing(self.collector.results, risk),
            sensors_done,
            self.opts.drain_timeout,
            self.opts.quiet,
            on_phase,
        )
        if not self.drained:
            self.problems += drain_problems(
                self.collector, spokes, sensors_done, self.opts.drain_timeout, self.events.began
            )

    async def _shutdown(self, tasks: list[asyncio.Task[Any]]) -> None:
        await self.cluster.stop()
        self.stop_event.set()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        await self.topology.stop()
        await self.devices.stop()

    # --- progress ------------------------------------------------------------------------------

    def status(self) -> Status:
        """A snapshot for the progress display."""
        per_site: dict[str, int] = {}
        for r in self.collector.results:
            per_site[r.site] = per_site.get(r.site, 0) + 1
        wan = self.topology.wan_bytes() if self.topology.proxies else {}
        sites = []
        for name, site in self.scenario.sites.sites.items():
            child = self.cluster.hub if site.tier is Tier.HUB else self.cluster.agents.get(name)
            down = name in self.faults.down
            sites.append(
                SiteStatus(
                    site=name,
                    tier=site.tier.value,
                    sent=self.fleet.sent_at(name),
                    pending=self.fleet.pending_at(name),
                    results=per_site.get(name, 0),
                    backlog=self.collector.backlog(name),
                    dead=self.collector.dlq.get(name, 0),
                    wan_bytes=sum(sum(v.values()) for k, v in wan.items() if name in k.split("<->")),
                    up=(child is None or child.alive) and not down,
                    note="partitioned" if down else "",
                )
            )
        since = time.time() - 2
        recent_results = sum(1 for r in self.collector.results[-2000:] if r.received_at > since)
        return Status(
            self.scenario.label,
            self.phase,
            self.events.elapsed(),
            self.scenario.duration,
            sites,
            list(self.events.lines),
            self.fleet.recent(since) / 2,
            recent_results / 2,
        )

    async def _report_status(self) -> None:
        if self.opts.on_status is None:
            return
        while True:
            with contextlib.suppress(Exception):
                self.opts.on_status(self.status())
            await asyncio.sleep(0.5)

    # --- the report ----------------------------------------------------------------------------

    def _reference(self) -> Reference:
        sim = self.scenario.sim
        return Reference.of(
            self.scenario.app,
            self.fleet.sent(),
            sim.settle,
            self.t0,
            dead=self.faults.killed,
            joined=self.faults.joined,
        )

    def _destroyed(self) -> list[Destroyed]:
        """The source records the sites killed for good took with them (see :mod:`simulate.site_losses`)."""
        app = self.scenario.app
        windows = {n: op.window.size or op.window.gap or 0.0 for n, op in app.operators.items() if op.window}
        faults = self.faults
        return destroyed_by(faults.killed, self.placement, self.scenario.source_sites, windows, faults.revoked)

    def _outcome(self) -> Outcome:
        scenario, collector = self.scenario, self.collector
        reference = self._reference()
        destroyed = self._destroyed()
        repeats = recoveries(self.faults.stopped, self.placement)  # a site back from the dead repeats alike
        checks, latencies = check_sinks(
            scenario.app, reference, collector.results, self.t0 + scenario.sim.warmup, destroyed, repeats
        )
        checks = [self.device_checks.get(c.sink, c) for c in checks]  # what the devices hold, read back
        failures = {site: self.fleet.failures_at(site) for site in scenario.spokes}
        report = Report(
            label=scenario.label,
            app=scenario.app.name,
            placement=f"{scenario.placement}, {scenario.mode}",
            broker=self.topology.broker_kind,
            hosts=self.opts.hosts,
            shaping=self.topology.shaping(),
            duration=scenario.duration,
            streams=sorted(reference.streams.values(), key=lambda s: (s.stream, s.site)),
            operators=collector.operators.by_operator(scenario.spokes),
            sinks=checks,
            local_latency=combine_latency(checks, latencies, "local"),
            global_latency=combine_latency(checks, latencies, "global"),
            wan_bytes=self.topology.wan_bytes(),
            wan_total=self.topology.wan_total,
            sites=site_counts(collector, scenario.spokes, reference, failures),
            replans=replans_of(self.placement),
            plan_changes=plan_changes_of(self.placement),
            hub_cpu_s=self.cluster.hub_cpu(),
            faults=[f.describe() for f in scenario.faults],
            problems=self.problems,
            drained=self.drained,
            started_at=self.t0,
            events=list(self.events.lines),
            plan_history=plan_history_of(self.placement, self.t0),
            destroyed_by=[d.describe(self.t0) for d in destroyed],
            warmup=scenario.sim.warmup,
            settle=scenario.sim.settle,
            baseline=self.opts.baseline,
        )
        timeline = _timeline(self, checks, latencies)
        run_dir = scenario.run_dir
        html = write_outputs(run_dir, report, timeline, self.events.lines)
        return Outcome(report, self.fleet.sent(), collector, run_dir, self.t0, self.events.lines, timeline, html)


def _timeline(sim: Run, checks: list[SinkCheck], latencies: dict[str, list[float]]) -> Timeline:
    """The series of ``sim``'s charts: WAN bytes (with a last sample now), backlog, faults, re-plans, latencies."""
    sim.wan.sample(sim.t0)
    spokes = sim.scenario.spokes
    history = sim.collector.backlog_history
    return Timeline(
        wan_times=list(sim.wan.times),
        wan={link: list(series) for link, series in sim.wan.wan.items()},
        backlog={site: relative(history[site], sim.t0) for site in spokes if site in history},
        marks=fault_marks(sim.faults.applied, sim.t0) + replan_marks(sim.placement, sim.t0),
        latency_ms={
            tier: [v * 1000.0 for c in checks if c.tier == tier for v in latencies.get(c.sink, [])]
            for tier in ("local", "global")
        },
    )


async def run(opts: Options, *, insecure_brokers: bool = False) -> Outcome:
    """Run one simulation (on plain anonymous brokers if ``insecure_brokers``)."""
    return await Run(opts, insecure_brokers=insecure_brokers).run()


async def run_compare(opts: Options, baseline: str, *, insecure_brokers: bool = False) -> list[Outcome]:
    """Run the same app and sensor data under the ILP and ``baseline`` placement, one after the other.

    The runs go to ``spanedge/`` and ``<baseline>/`` under ``opts.run_dir`` (by
    default a new directory under ``.spanedge/sim``), and ``report.html`` there
    overlays both.
    """
    check_options(opts, baseline)
    mode = "standalone" if opts.mode == "auto" else opts.mode
    parent = opts.run_dir or Path(".spanedge") / "sim" / f"{time.strftime('%Y%m%d-%H%M%S')}-compare-{baseline}"
    first = dataclasses.replace(opts, placement="ilp", mode=mode, label="spanedge", run_dir=parent / "spanedge")
    second = dataclasses.replace(
        opts, placement=baseline, mode=mode, label=baseline, run_dir=parent / baseline, baseline=True
    )
    outcomes = [
        await run(first, insecure_brokers=insecure_brokers),
        await run(second, insecure_brokers=insecure_brokers),
    ]
    html = write_html(outcomes[0].run_dir.parent / "report.html", [(o.report, o.timeline) for o in outcomes])
    return [dataclasses.replace(o, html=html) for o in outcomes]
