"""Running an app across a simulated topology: start everything, send sensor data, inject faults, report.

Managed mode starts ``spanedge hub`` and deploys the app over its REST API
(the hub places it and publishes signed plans that the agents take).
Standalone mode places the app here with :func:`placement.solve` (``ilp``,
``central`` or ``local-first``), then starts ``python -m hub.dataplane`` and
the agents with that plan: the way to compare placements on the same data.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from simulate.broker import free_port
from simulate.config import Simulation, parse_simulation
from simulate.faults import Fault, FaultKind, parse_faults
from simulate.processes import Child, spanedge_command
from simulate.progress import SiteStatus, Status
from simulate.reference import Expected, Item, evaluate
from simulate.report import (
    Report,
    SiteCount,
    StreamCount,
    check_sink,
    combine_latency,
    epoch,
    operator_counts,
)
from simulate.results import Collector, mqtt_sinks
from simulate.sensors import Device, Sent, SiteSensors
from simulate.topology import Topology
from spanedge.app import App
from spanedge.errors import SpanEdgeError
from spanedge.loader import load_app
from spanedge.operators import Kind, Operator
from spanedge.sites import Sites, Tier, load_sites

log = logging.getLogger(__name__)


class SimulationError(SpanEdgeError):
    """A simulated topology could not be brought up or run."""


@dataclass
class Options:
    """How to run one simulation.

    ``hub_command`` replaces the hub's program (``spanedge hub`` or ``python -m
    hub.dataplane``) and receives the same options.
    """

    sites: Path
    app: Path
    duration: float | None = None
    faults: list[str] = field(default_factory=list)
    placement: str = "ilp"
    mode: str = "auto"
    seed: int | None = None
    run_dir: Path | None = None
    broker: str = "auto"
    spark_master: str = "local[2]"
    heartbeat_interval: float = 2.0
    ready_timeout: float = 180.0
    drain_timeout: float = 90.0
    quiet: float = 4.0
    label: str = ""
    hub_command: list[str] | None = None
    on_status: Callable[[Status], None] | None = None

    def resolved_mode(self) -> str:
        """``managed`` for the ILP unless told otherwise; baselines need ``standalone``."""
        if self.mode != "auto":
            return self.mode
        return "managed" if self.placement == "ilp" else "standalone"


@dataclass
class Outcome:
    """What a run produced: the report plus the raw observations, for tests."""

    report: Report
    sent: list[Sent]
    collector: Collector
    run_dir: Path
    started_at: float
    events: list[str]


def scope_tier(app: App, sink: str) -> str:
    """``global`` if the sink or anything upstream runs only at the hub, else ``local``."""
    graph = app.graph()
    names = {sink, *nx.ancestors(graph, sink)}
    return "global" if any(graph.nodes[n]["op"].hub_only for n in names) else "local"


def source_time_field(app: App) -> str | None:
    """The event-time field of the app's sources (the first one that names one)."""
    return next((op.time_field for op in app.operators.values() if op.kind is Kind.SOURCE and op.time_field), None)


class Run:
    """One run (internal; use :func:`run`)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.sites: Sites = load_sites(opts.sites)
        self.sim: Simulation = parse_simulation(self.sites, str(opts.sites))
        if opts.seed is not None:
            self.sim = self.sim.model_copy(update={"seed": opts.seed})
        self.duration = opts.duration or self.sim.duration
        self.app: App = load_app(opts.app)
        sources = {op.stream or op.name for op in self.app.operators.values() if op.kind is Kind.SOURCE}
        self.sites.check_app_streams(sources, self.app.name)
        self.faults: list[Fault] = parse_faults(opts.faults, self.sites)
        self.mode = opts.resolved_mode()
        if self.mode == "managed" and opts.placement != "ilp":
            msg = f"placement {opts.placement!r} needs --mode standalone (the hub always places with its ILP)"
            raise SimulationError(msg)
        hubs = self.sites.hubs
        self.hub = hubs[0].name
        self.spokes = [s.name for s in self.sites.spokes]
        label = opts.label or opts.placement
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.run_dir = (opts.run_dir or Path(".spanedge") / "sim" / f"{stamp}-{label}").resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.label = label
        self.topology = Topology(self.sites, self.sim, self.run_dir, opts.broker)
        self.collector = Collector(self.app.name, mqtt_sinks(self.app))
        self.token = secrets.token_hex(16)
        self.secret = secrets.token_hex(32)
        self.env = {"SPANEDGE_TOKEN": self.token, "SPANEDGE_PLAN_SECRET": self.secret, "PYTHONUNBUFFERED": "1"}
        self.hub_proc: Child | None = None
        self.hub_port = 0
        self.agents: dict[str, Child] = {}
        self.sensors: dict[str, SiteSensors] = {}
        self.events: list[str] = []
        self.problems: list[str] = []
        self.phase = "starting"
        self.began = time.time()
        self.t0 = 0.0
        self.t0_mono = 0.0
        self.stop_event = asyncio.Event()
        self.down: set[str] = set()
        self.replans: int | None = None
        self.drained = True
        self.plan_changes: int | None = None

    # --- events and status -------------------------------------------------

    def event(self, text: str) -> None:
        """Note something that happened, with the time since the sensors started."""
        if self.t0:
            line = f"t={time.time() - self.t0:5.1f}s {text}"
        else:
            line = f"setup +{time.time() - self.began:4.1f}s {text}"
        self.events.append(line)
        log.info("%s", line)

    def status(self) -> Status:
        """A snapshot for the progress display."""
        elapsed = time.time() - self.t0 if self.t0 else 0.0
        per_site = {name: 0 for name in self.sites.sites}
        for r in self.collector.results:
            per_site[r.site] = per_site.get(r.site, 0) + 1
        wan = self.topology.wan_bytes() if self.topology.proxies else {}
        sites = []
        for name, site in self.sites.sites.items():
            sensors = self.sensors.get(name)
            link_bytes = sum(sum(v.values()) for k, v in wan.items() if name in k.split("<->"))
            child = self.hub_proc if site.tier is Tier.HUB else self.agents.get(name)
            sites.append(
                SiteStatus(
                    site=name,
                    tier=site.tier.value,
                    sent=len(sensors.sent) if sensors else 0,
                    pending=sensors.pending if sensors else 0,
                    results=per_site.get(name, 0),
                    backlog=self.collector.backlog(name),
                    dead=self.collector.dlq.get(name, 0),
                    wan_bytes=link_bytes,
                    up=(child is None or child.alive) and name not in self.down,
                    note="partitioned" if name in self.down else "",
                )
            )
        now = time.time()
        recent_sent = sum(1 for s in self.sensors.values() for x in s.sent[-2000:] if x.sent_at > now - 2)
        recent_res = sum(1 for r in self.collector.results[-2000:] if r.received_at > now - 2)
        return Status(
            self.label, self.phase, elapsed, self.duration, sites, list(self.events), recent_sent / 2, recent_res / 2
        )

    async def _report_status(self) -> None:
        if self.opts.on_status is None:
            return
        while True:
            with contextlib.suppress(Exception):
                self.opts.on_status(self.status())
            await asyncio.sleep(0.5)

    # --- bring-up ----------------------------------------------------------

    def _hub_child(self, plan_file: Path | None) -> Child:
        sites_file = str(self.topology.files[self.hub])
        state = str(self.run_dir / "hub")
        if self.mode == "managed":
            self.hub_port = free_port()
            argv = spanedge_command(
                "hub", "--sites", sites_file, "--state-dir", state, "--port", str(self.hub_port),
                "--spark-master", self.opts.spark_master, "--hub-site", self.hub,
                "--min-replan-interval", "10",
            )  # fmt: skip
        else:
            assert plan_file is not None
            argv = [
                sys.executable, "-m", "hub.dataplane", "--sites", sites_file, "--state-dir", state,
                "--app", str(self.opts.app.resolve()), "--plan", str(plan_file),
                "--spark-master", self.opts.spark_master,
            ]  # fmt: skip
        if self.opts.hub_command is not None:  # another hub implementation, with the same arguments
            argv = [*self.opts.hub_command, *argv[argv.index("--sites") :]]
        return Child("hub", argv, self.run_dir / "logs" / "hub.log", self.env)

    def _agent_child(self, site: str, plan_file: Path | None) -> Child:
        args = [
            "agent", "--site", site, "--sites", str(self.topology.files[site]),
            "--state-dir", str(self.run_dir / "agents" / site),
            "--heartbeat-interval", str(self.opts.heartbeat_interval),
        ]  # fmt: skip
        if plan_file is not None:
            args += ["--plan", str(plan_file)]
        return Child(f"agent-{site}", spanedge_command(*args), self.run_dir / "logs" / f"agent-{site}.log", self.env)

    def _plan(self) -> Path:
        try:
            from placement import solve
        except ImportError as exc:
            msg = f"the placement package cannot be imported ({exc}); standalone mode needs placement.solve"
            raise SimulationError(msg) from None
        plan = solve(self.app, self.sites, method=self.opts.placement)
        if not plan.app_source:
            plan = dataclasses.replace(
                plan, app_file=str(self.opts.app.resolve()), app_source=self.opts.app.read_text()
            )
        path = self.run_dir / "plan.json"
        path.write_text(plan.to_json())
        by_site: dict[str, list[str]] = {}
        for a in plan.assignments:
            by_site.setdefault(a.site, []).append(a.operator)
        self.event(
            f"placed with {self.opts.placement}: "
            + "; ".join(f"{site}: {', '.join(ops)}" for site, ops in by_site.items())
        )
        return path

    def _http(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 60) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.hub_port}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            text = response.read()
        return json.loads(text) if text else None

    async def _wait_hub(self) -> None:
        assert self.hub_proc is not None
        deadline = time.monotonic() + self.opts.ready_timeout
        loop = asyncio.get_running_loop()
        last = "no answer"
        while time.monotonic() < deadline:
            self._check_alive(self.hub_proc)
            try:
                await loop.run_in_executor(None, lambda: self._http("GET", "/healthz", timeout=2))
                return
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}"
            except (OSError, ValueError) as exc:
                last = str(exc)
            await asyncio.sleep(0.5)
        msg = (
            f"the hub did not answer /healthz within {self.opts.ready_timeout:.0f}s (last: {last}); "
            f"see {self.hub_proc.log}"
        )
        raise SimulationError(msg)

    async def _deploy(self) -> None:
        loop = asyncio.get_running_loop()
        body = {"source": self.opts.app.read_text(), "filename": self.opts.app.name}
        try:
            answer = await loop.run_in_executor(None, lambda: self._http("POST", "/apps", body, timeout=120))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            msg = f"the hub refused the app ({exc.code}): {detail}"
            raise SimulationError(msg) from None
        (self.run_dir / "deploy.json").write_text(json.dumps(answer, indent=2))
        self.event("deployed the app to the hub")

    def _check_alive(self, child: Child) -> None:
        if child.proc is not None and child.proc.poll() is not None:
            msg = f"{child.name} exited with code {child.proc.returncode}; last lines of {child.log}:\n{child.tail()}"
            raise SimulationError(msg)

    async def _wait_subscribed(self, sites: list[str], baseline: dict[str, int], timeout: float, what: str) -> None:
        """Wait until each broker counts more subscriptions than before the processes started."""
        if self.topology.broker_kind != "mosquitto":  # no subscription count to watch: give them a moment
            await asyncio.sleep(2.0)
            return
        deadline = time.monotonic() + timeout
        pending = set(sites)
        while pending and time.monotonic() < deadline:
            for child in [*self.agents.values(), *([self.hub_proc] if self.hub_proc else [])]:
                self._check_alive(child)
            for site in list(pending):
                if self.collector.subscriptions.get(site, 0) > baseline.get(site, 0):
                    pending.discard(site)
            await asyncio.sleep(0.25)
        if pending:
            msg = f"{what} did not subscribe on the broker of {', '.join(sorted(pending))} within {timeout:.0f}s"
            raise SimulationError(msg)

    async def _wait_heartbeats(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in self.agents.values():
                self._check_alive(child)
            if all(self._runs_app(s) for s in self.spokes):
                return
            await asyncio.sleep(0.25)
        missing = [s for s in self.spokes if not self._runs_app(s)]
        msg = (
            f"no heartbeat running app '{self.app.name}' from {', '.join(missing)} within {timeout:.0f}s; "
            f"see {self.run_dir / 'logs'}"
        )
        raise SimulationError(msg)

    def _runs_app(self, site: str) -> bool:
        """True once ``site`` sent a heartbeat that lists the app (or lists no apps at all)."""
        beat = self.collector.heartbeats.get(site)
        if beat is None:
            return False
        apps = beat.get("apps")
        return not isinstance(apps, list) or self.app.name in apps

    async def _sys_baseline(self) -> dict[str, int]:
        """Subscription counts before any SpanEdge process runs (Mosquitto publishes them every second)."""
        if self.topology.broker_kind != "mosquitto":
            return {}
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(self.collector.subscriptions) < len(self.sites.sites):
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.2)
        return dict(self.collector.subscriptions)

    # --- faults ------------------------------------------------------------

    async def _faults(self) -> None:
        loop = asyncio.get_running_loop()
        heals: list[asyncio.Task[None]] = []
        for fault in self.faults:
            wait = self.t0_mono + fault.at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            heals.append(asyncio.ensure_future(self._apply(fault)))
        if heals:
            await asyncio.gather(*heals)

    async def _apply(self, fault: Fault) -> None:
        loop = asyncio.get_running_loop()
        site = fault.site or self.hub
        self.event(f"fault {fault.describe()}")
        if fault.kind is FaultKind.PARTITION:
            self.topology.partition(site)
            self.down.add(site)
            await asyncio.sleep(fault.duration or 0)
            self.topology.heal(site)
            self.down.discard(site)
            self.event(f"healed {site}")
        elif fault.kind is FaultKind.KILL_AGENT:
            child = self.agents[site]
            await loop.run_in_executor(None, child.kill)
            self.event(f"killed agent {site} (SIGKILL)")
            await asyncio.sleep(1.0)
            child.start()
            self.event(f"restarted agent {site}")
        elif fault.kind is FaultKind.RESTART_HUB:
            assert self.hub_proc is not None
            await loop.run_in_executor(None, self.hub_proc.restart)
            self.event("restarted the hub")
        elif fault.kind is FaultKind.RESTART_BROKER:
            await loop.run_in_executor(None, self.topology.brokers[site].restart)
            self.event(f"restarted the broker of {site}")
        elif fault.kind is FaultKind.LATENCY:
            self.topology.set_latency(site, fault.latency_ms or 0.0)
            self.event(f"latency of {site}'s links set to {fault.latency_ms:.0f} ms")

    # --- the run -----------------------------------------------------------

    async def _sample_cpu(self) -> None:
        while True:
            if self.hub_proc is not None:
                self.hub_proc.sample_cpu()
            await asyncio.sleep(1.0)

    async def _drain(self, sensors_done: float) -> None:
        """Wait for empty backlogs (fresh heartbeats), every checkable result, and ``quiet`` seconds without results."""
        self.phase = "draining"
        deadline = time.monotonic() + self.opts.drain_timeout
        expected, cutoff, _ = self._reference()
        missing = self._missing(expected, cutoff)
        checked_at = time.monotonic()
        while time.monotonic() < deadline:
            if missing and time.monotonic() - checked_at > 1.0:
                missing, checked_at = self._missing(expected, cutoff), time.monotonic()
            fresh = all(self.collector.heartbeat_times.get(s, 0) > sensors_done for s in self.spokes)
            empty = all((self.collector.backlog(s) or 0) == 0 for s in self.spokes)
            last = self.collector.results[-1].received_at if self.collector.results else 0.0
            if fresh and empty and not missing and time.time() - last > self.opts.quiet:
                return
            self.phase = f"draining: {missing} results to come"
            await asyncio.sleep(0.5)
        self.drained = False
        silent = [s for s in self.spokes if self.collector.heartbeat_times.get(s, 0) <= sensors_done]
        for site in silent:
            ago = time.time() - self.collector.heartbeat_times.get(site, self.began)
            self.problems.append(f"agent {site}: no heartbeat for {ago:.0f}s (hung or cut off); see its log")
        for site in self.spokes:
            if (self.collector.backlog(site) or 0) > 0:
                self.problems.append(f"agent {site}: outbox backlog {self.collector.backlog(site)} at the end")
        self.problems.append(
            f"not drained within {self.opts.drain_timeout:.0f}s (backlog or results still moving): "
            "missing results may only be late"
        )

    async def run(self) -> Outcome:
        """Run the whole simulation and return its outcome; everything started is stopped."""
        tasks: list[asyncio.Task[Any]] = []
        try:
            await self.topology.start()
            kind = self.topology.broker_kind
            note = " (embedded Python broker: Mosquitto is not installed)" if kind == "amqtt" else ""
            self.event(
                f"brokers: {len(self.topology.brokers)} x {kind}{note}; "
                f"{len(self.topology.proxies)} WAN proxies; run directory {self.run_dir}"
            )
            for name, broker in self.topology.brokers.items():
                tasks.append(
                    asyncio.ensure_future(
                        self.collector.watch(name, "127.0.0.1", broker.port, name == self.hub, self.stop_event)
                    )
                )
            tasks.append(asyncio.ensure_future(self._report_status()))
            baseline = await self._sys_baseline()
            plan_file = self._plan() if self.mode == "standalone" else None
            self.hub_proc = self._hub_child(plan_file).start()
            tasks.append(asyncio.ensure_future(self._sample_cpu()))
            if self.mode == "managed":
                await self._wait_hub()
                self.event("hub up")
            for spoke in self.spokes:
                self.agents[spoke] = self._agent_child(spoke, plan_file).start()
            if self.mode == "managed":
                await self._deploy()
            await self._wait_heartbeats(self.opts.ready_timeout)
            self.event("every agent runs the app")
            await self._wait_subscribed([self.hub], baseline, self.opts.ready_timeout, "the hub ingest")
            await self._wait_subscribed(self.spokes, baseline, self.opts.ready_timeout, "the agents")
            await asyncio.sleep(1.0)
            self.event("ready: agents and hub subscribed")
            await self._send()
            return self._outcome()
        finally:
            self.phase = "stopping"
            await self._shutdown(tasks)

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        self.t0 = time.time()
        self.t0_mono = loop.time()
        self.phase = "sensors running"
        for site, streams in self.sim.sensors.items():
            devices: list[Device] = []
            qos: dict[str, int] = {}
            for stream, spec in streams.items():
                binding = self.sites.sites[site].streams[stream]
                qos[stream] = spec.qos if spec.qos is not None else binding.qos
                devices += [
                    Device(site, stream, i, spec, binding.topic, self.sim.seed, self.t0) for i in range(spec.count)
                ]
            broker = self.topology.brokers[site]
            self.sensors[site] = SiteSensors(site, "127.0.0.1", broker.port, devices, qos)
        self.event(f"sensors started: {sum(len(s.devices) for s in self.sensors.values())} devices")
        faults = asyncio.ensure_future(self._faults())
        await asyncio.gather(*(s.run(self.t0_mono, self.duration) for s in self.sensors.values()))
        sensors_done = time.time()
        self.event("sensors finished")
        if not faults.done():
            self.phase = "waiting for faults to end"
            await faults
        await self._drain(sensors_done)
        if self.mode == "managed":
            with contextlib.suppress(Exception):
                placement = await loop.run_in_executor(
                    None, lambda: self._http("GET", f"/apps/{self.app.name}/placement", timeout=10)
                )
                (self.run_dir / "placement.json").write_text(json.dumps(placement, indent=2))
                self.replans = _replans(placement)
                self.plan_changes = _plan_changes(placement)
        for name, child in [*self.agents.items(), ("hub", self.hub_proc)]:
            if child is not None and not child.alive:
                self.problems.append(f"{name} is not running at the end; see {child.log}")

    async def _shutdown(self, tasks: list[asyncio.Task[Any]]) -> None:
        loop = asyncio.get_running_loop()
        children = [c for c in [*self.agents.values(), self.hub_proc] if c is not None]
        await asyncio.gather(*(loop.run_in_executor(None, c.stop) for c in children), return_exceptions=True)
        self.stop_event.set()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        await self.topology.stop()

    # --- the report --------------------------------------------------------

    def _reference(self) -> tuple[Expected, float, dict[tuple[str, str], StreamCount]]:
        """The expected results of what the sensors sent, the check cutoff and the counts per stream."""
        items: dict[str, list[Item]] = {}
        max_event: dict[str, float] = {}
        streams: dict[tuple[str, str], StreamCount] = {}
        for sensors in self.sensors.values():
            for record in sensors.sent:
                m = record.message
                count = streams.setdefault((m.stream, m.site), StreamCount(m.stream, m.site))
                count.sent += 1
                if m.malformed:
                    count.malformed += 1
                    continue
                assert m.event_time is not None
                items.setdefault(m.stream, []).append(Item(m.site, m.event_time, m.value))
                max_event[m.site] = max(max_event.get(m.site, 0.0), m.event_time)
        cutoff = (min(max_event.values()) if max_event else self.t0) - self.sim.settle
        return evaluate(self.app, items), cutoff, streams

    def _missing(self, expected: Expected, cutoff: float) -> int:
        """Checkable results that have not arrived yet (windows by key and start, others by count)."""
        missing = 0
        for sink, want in expected.sinks.items():
            got = [r for r in self.collector.results if r.sink == sink]
            spec = expected.windowed.get(sink)
            if spec is None:
                missing += max(0, len(want) - len(got))
                continue
            seen = {
                (str(r.value.get(spec.key)), round(epoch(r.value.get("window_start")) or 0.0, 3))
                for r in got
                if isinstance(r.value, dict)
            }
            missing += sum(
                1
                for i in want
                if float(i.value["window_end"]) <= cutoff
                and (str(i.value[spec.key]), round(float(i.value["window_start"]), 3)) not in seen
            )
        return missing

    def _outcome(self) -> Outcome:
        sent = [s for sensors in self.sensors.values() for s in sensors.sent]
        time_field = source_time_field(self.app)
        expected, cutoff, streams = self._reference()
        latency_from = self.t0 + self.sim.warmup
        sinks = [op for op in self.app.operators.values() if op.kind is Kind.SINK]
        checks = []
        raw: dict[str, list[float]] = {}
        for op in sinks:
            check, lat = self._check(op, expected, cutoff, time_field, latency_from)
            checks.append(check)
            raw[op.name] = lat
        site_counts = []
        for spoke in self.spokes:
            malformed = sum(c.malformed for c in streams.values() if c.site == spoke)
            backlog = self.collector.backlog(spoke)
            site_counts.append(
                SiteCount(
                    site=spoke,
                    dead_lettered=max(self.collector.dlq.get(spoke, 0), int(self.collector.counter(spoke, "dlq"))),
                    expected_dead=malformed + expected.errors.get(spoke, 0),
                    late=int(self.collector.counter(spoke, "late")),
                    dropped=int(self.collector.counter(spoke, "outbox", "dropped")),
                    backlog=backlog,
                    max_backlog=self.collector.max_backlog.get(spoke, 0),
                    sensor_failures=self.sensors[spoke].failures if spoke in self.sensors else 0,
                )
            )
        report = Report(
            label=self.label,
            app=self.app.name,
            placement=f"{self.opts.placement}, {self.mode}",
            broker=self.topology.broker_kind,
            duration=self.duration,
            streams=sorted(streams.values(), key=lambda s: (s.stream, s.site)),
            operators=operator_counts(
                self.collector.heartbeats[s] for s in self.spokes if s in self.collector.heartbeats
            ),
            sinks=checks,
            local_latency=combine_latency(checks, raw, "local"),
            global_latency=combine_latency(checks, raw, "global"),
            wan_bytes=self.topology.wan_bytes(),
            wan_total=self.topology.wan_total,
            sites=site_counts,
            replans=self.replans,
            plan_changes=self.plan_changes,
            hub_cpu_s=self.hub_proc.sample_cpu() if self.hub_proc else None,
            faults=[f.describe() for f in self.faults],
            problems=self.problems,
            drained=self.drained,
            started_at=self.t0,
            events=list(self.events),
        )
        (self.run_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2))
        (self.run_dir / "events.log").write_text("\n".join(self.events) + "\n")
        return Outcome(report, sent, self.collector, self.run_dir, self.t0, self.events)

    def _check(
        self, op: Operator, expected: Any, cutoff: float, time_field: str | None, latency_from: float
    ) -> tuple[Any, list[float]]:
        received = [r for r in self.collector.results if r.sink == op.name]
        tier = scope_tier(self.app, op.name)
        if op.sink is None or op.sink.kind != "mqtt":
            check, lat = check_sink(op.name, tier, received, None, None, cutoff, time_field, latency_from)
            check.unchecked = f"{op.sink.kind if op.sink else '?'} sink: the simulator only watches mqtt sinks"
            return check, lat
        if op.name in expected.unchecked:
            check, lat = check_sink(
                op.name, tier, received, None, expected.windowed.get(op.name), cutoff, time_field, latency_from
            )
            check.unchecked = expected.unchecked[op.name]
            return check, lat
        return check_sink(
            op.name,
            tier,
            received,
            expected.sinks.get(op.name, []),
            expected.windowed.get(op.name),
            cutoff,
            time_field,
            latency_from,
        )


def _replans(placement: Any) -> int | None:
    """Re-plans from the hub's placement answer: its history length less one, or its version less one."""
    if not isinstance(placement, dict):
        return None
    history = placement.get("history")
    if isinstance(history, list):
        return max(0, len(history) - 1)
    plan = placement.get("plan", placement)
    version = plan.get("version") if isinstance(plan, dict) else None
    return max(0, int(version) - 1) if isinstance(version, int) else None


def _plan_changes(placement: Any) -> int | None:
    """Re-plans that moved an operator (history entries after the first marked ``changed``)."""
    history = placement.get("history") if isinstance(placement, dict) else None
    if not isinstance(history, list):
        return None
    return sum(1 for h in history[1:] if isinstance(h, dict) and h.get("changed", True))


async def run(opts: Options) -> Outcome:
    """Run one simulation."""
    return await Run(opts).run()


async def run_compare(opts: Options, baseline: str) -> list[Outcome]:
    """Run the same app and sensor data under the ILP and ``baseline`` placement, one after the other."""
    mode = "standalone" if opts.mode == "auto" else opts.mode
    first = dataclasses.replace(opts, placement="ilp", mode=mode, label="spanedge")
    second = dataclasses.replace(opts, placement=baseline, mode=mode, label=baseline)
    if opts.run_dir is not None:
        first = dataclasses.replace(first, run_dir=opts.run_dir / "spanedge")
        second = dataclasses.replace(second, run_dir=opts.run_dir / baseline)
    return [await run(first), await run(second)]
