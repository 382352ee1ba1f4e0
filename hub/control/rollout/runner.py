"""The hub's rollout runner: it starts a staged rollout, drives its steps and applies them.

Beside the MAPE loop, :meth:`RolloutRunner.run` ticks on its own thread, as
often as :func:`~hub.control.rollout.steps.due` asks (at least every
:data:`TICK_S` while a rollout runs, for the versions sites report). Each
tick confirms what the sites' heartbeats say they run (their ``sources``),
checks a hold that is over against the heartbeats received in it, and
applies what changed, in this order: the rollout record is persisted
(:class:`~hub.control.rollout.records.RolloutStore`), each new step goes into
the app's plan history with its reason and gate values, then the sites whose
version changed get their plan messages (:meth:`hub.control.deployments.Deployments.offer`).
A rollout that passed makes the new version the app's deployed one; its hub
part is the same (:mod:`hub.control.rollout.mixing`), so the hub's queries keep their state.

After a hub restart, :meth:`RolloutRunner.load` gives the sites their versions
again before any plan message leaves, and restarts a hold or take-up (:func:`~hub.control.rollout.steps.resume`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from hub.control.deployments import Deployment, Deployments
from hub.control.distribution import SiteApp, sites_of
from hub.control.plan_history import MAX_HISTORY, deployed_record, history_entry
from hub.control.planning import load_app
from hub.control.registry import SiteRegistry
from hub.control.rollout import steps
from hub.control.rollout.gates import parse_gates
from hub.control.rollout.metrics import Beat, Context, HubErrors
from hub.control.rollout.mixing import mixing_problems
from hub.control.rollout.model import Rollout, Status
from hub.control.rollout.records import RolloutRecord, RolloutStore
from hub.control.rollout.stages import fleet_of, parse_stages
from hub.control.state import HistoryEntry
from spanedge.app import App
from spanedge.errors import InvalidRollout, SpanEdgeError
from spanedge.history import ROLLOUT_REASON
from spanedge.loader import source_hash
from spanedge.operators import Kind
from spanedge.plan import Plan
from spanedge.wire.heartbeat import decode

log = logging.getLogger(__name__)

#: Seconds between two ticks while a rollout runs.
TICK_S = 1.0
#: The longest hold a rollout takes: a day.
MAX_HOLD_S = 86400.0
#: The longest stage or gate spec a rollout takes, in characters.
MAX_SPEC_CHARS = 2000
#: Heartbeats kept per site of a running rollout (a day of them at one every 5 s).
MAX_BEATS = 20_000

Plans = Callable[..., Plan]
"""Plans an app's next version: ``(app, plan in force, **options)`` (:meth:`hub.control.replanning.Replanner.plan`)."""


@dataclasses.dataclass
class _Live:
    """A rollout that is not over: its record, the new version's app, and what its sites sent."""

    record: RolloutRecord
    app: App
    beats: dict[str, deque[Beat]] = dataclasses.field(default_factory=dict)
    running: dict[str, str] = dataclasses.field(default_factory=dict)  # site: the version it reported last
    hub_errors: dict[str, deque[tuple[float, float]]] = dataclasses.field(default_factory=dict)  # sampled per tick


class RolloutRunner:
    """Starts, drives and keeps the staged rollouts of the deployed apps.

    Every change happens under the deployments' lock; heartbeats are only
    recorded (:meth:`observe`), never acted on in the thread that receives them.
    """

    def __init__(
        self,
        deployments: Deployments,
        registry: SiteRegistry,
        plans: Plans,
        store: RolloutStore | None = None,
        clock: Callable[[], float] = time.time,
        hub_errors: HubErrors | None = None,
    ) -> None:
        """Drive rollouts of ``deployments`` planned with ``plans``, kept in ``store``, sampling ``hub_errors``."""
        self.deployments = deployments
        self.hub_errors = hub_errors
        self.registry = registry
        self._plans = plans
        self.store = store
        self._clock = clock
        self._lock = deployments.lock
        self._seen = threading.Lock()  # guards each live rollout's beats and running
        self._live: dict[str, _Live] = {}
        self._last: dict[str, RolloutRecord] = {}
        self.wake = threading.Event()

    # -- queries -------------------------------------------------------------------------------

    def rolling(self, name: str) -> bool:
        """Whether app ``name`` has a rollout in progress (its re-plans wait for it)."""
        return name in self._live

    def record(self, name: str) -> RolloutRecord | None:
        """App ``name``'s rollout in progress, else its last one (None: it never had one)."""
        live = self._live.get(name)
        return live.record if live is not None else self._last.get(name)

    def next_due(self) -> float | None:
        """When the next tick has something to do (None: no rollout runs)."""
        if not self._live:
            return None
        now = self._clock()
        times = [steps.due(live.record.rollout) for live in list(self._live.values())]
        return min([now + TICK_S, *(t for t in times if t is not None)])

    # -- start ---------------------------------------------------------------------------------

    def deploy(
        self,
        source: str,
        filename: str,
        *,
        app_name: str | None = None,
        stages: str,
        gates: str = "",
        hold_s: float,
    ) -> RolloutRecord:
        """Start a staged rollout of ``source`` over the deployed version of its app.

        Raises:
            InvalidRollout: the app is not deployed, already rolling out, the same version, the versions
                cannot mix (each difference named), or the stages, gates or hold are invalid.
            InvalidDataflow, InvalidSites, InfeasiblePlacement: the new version cannot be planned.
        """
        _check_specs(stages, gates, hold_s)
        app = load_app(source, filename, app_name)
        with self._lock:
            deployed = self.deployments.get(app.name)
            if deployed is None:
                msg = f"app {app.name!r} is not deployed: there is no version to roll out from; deploy it without --rollout"
                raise InvalidRollout(msg)
            if app.name in self._live:
                last = self._live[app.name].record.rollout
                msg = f"app {app.name!r} is rolling out already ({last.status}, stage {last.stage + 1}); wait for it or roll it back"
                raise InvalidRollout(msg)
            old = deployed.record
            before, after = source_hash(old.source), source_hash(source)
            if before == after:
                msg = f"app {app.name!r} runs this source already (sha256 {after[:12]}): nothing to roll out"
                raise InvalidRollout(msg)
            options: dict[str, Any] = {"source": source, "filename": filename, "slo_ms": old.slo_ms}
            options |= {"weights": old.weights}
            options["previous"] = old.plan
            plan = self._plans(app, old.plan, **options)
            problems = mixing_problems(deployed.app, old.plan, app, plan)
            if problems:
                msg = (
                    f"app {app.name!r}: the new version cannot run beside the deployed one while sites change: "
                    + "; ".join(problems)
                    + "; deploy it with --all-at-once (every site at once) instead"
                )
                raise InvalidRollout(msg)
            fleet = fleet_of(self.registry.sites, sites_of(old.plan) - {old.plan.hub})
            parsed = parse_stages(stages, fleet, "--rollout")
            planned = steps.plan_stages(parsed, fleet, app.name, after)
            rollout = steps.start(app.name, before, after, planned, parse_gates(gates, "--gate"), hold_s, self._clock())
            live = _Live(RolloutRecord(rollout, source, filename, app_name, plan), app)
            self._live[app.name] = live
            self._last.pop(app.name, None)
            self._apply(live, None)
        self.wake.set()
        return live.record

    # -- what sites report ---------------------------------------------------------------------

    def observe(self, site: str, data: Any, at: float) -> None:
        """Keep a heartbeat ``site`` sent (received at ``at``) for the rollouts it is part of."""
        mine = [live for live in list(self._live.values()) if site in live.record.rollout.sites]
        if not mine:
            return
        try:
            beat = decode(data)[0]
        except ValueError:
            return  # the registry refused it and said why
        with self._seen:
            for live in mine:
                live.beats.setdefault(site, deque(maxlen=MAX_BEATS)).append(Beat(site, at, beat))
                version = beat.sources.get(live.record.rollout.app)
                if version is not None:
                    live.running[site] = version

    # -- the steps -----------------------------------------------------------------------------

    def tick(self) -> list[str]:
        """Do what is due for every rollout in progress; the names of the apps whose rollout moved."""
        moved = []
        with self._lock:
            for name, live in list(self._live.items()):
                try:
                    if self._step(live):
                        moved.append(name)
                except Exception:
                    log.exception("the rollout of app %r could not take its next step; it is tried again", name)
        return moved

    def _step(self, live: _Live) -> bool:
        now, rollout = self._clock(), live.record.rollout
        if self.deployments.get(rollout.app) is None:  # the app was deleted: its rollout goes with it
            self._live.pop(rollout.app, None)
            if self.store is not None:
                self.store.delete(rollout.app)
            log.info("app %r is no longer deployed; its rollout is dropped", rollout.app)
            return True
        if rollout.status is Status.PASSED:  # persisted as passed before the new version became the app's
            self._promote(live)
            return True
        replanned = _replanned(self.deployments.get(rollout.app), live)
        if replanned is not None and rollout.status in (Status.RUNNING, Status.HOLDING):
            live.record = dataclasses.replace(live.record, rollout=steps.roll_back(rollout, now, replanned))
            self._apply(live, rollout)
            return True
        if self.hub_errors is not None:
            _sample(live, self.hub_errors.counts(rollout.app), now)
        with self._seen:
            running = dict(live.running)
        after = steps.confirm(rollout, now, running)
        when = steps.due(after)
        if when is not None and now >= when:
            with self._seen:
                beats = [b for got in live.beats.values() for b in got]
            context = _context(live, self.deployments.get(rollout.app), self.registry, self.hub_errors is not None)
            after = steps.check(after, now, beats, context)
        if after is rollout:
            return False
        live.record = dataclasses.replace(live.record, rollout=after)
        self._apply(live, rollout)
        return True

    def roll_back(self, name: str, reason: str = "rolled back by hand") -> RolloutRecord:
        """Give every site app ``name``'s rollout changed its previous version back.

        Raises:
            InvalidRollout: the app has no rollout in progress, or it is rolling back already.
        """
        with self._lock:
            live = self._live.get(name)
            if live is None:
                last = self._last.get(name)
                why = f"its last one {last.rollout.status}" if last is not None else "it never had one"
                msg = f"app {name!r} has no rollout in progress ({why}); to go back after one passed, deploy the previous source"
                raise InvalidRollout(msg)
            before = live.record.rollout
            live.record = dataclasses.replace(live.record, rollout=steps.roll_back(before, self._clock(), reason))
            self._apply(live, before)
            self.wake.set()
            return live.record

    def _apply(self, live: _Live, before: Rollout | None) -> None:
        """Persist ``live``'s rollout, write its new steps to the plan history, publish the sites whose version changed."""
        record, rollout = live.record, live.record.rollout
        if self.store is not None:
            self.store.save(record)
        new_steps = rollout.steps[len(before.steps) :] if before is not None else rollout.steps
        for step in new_steps:
            log.info("app %r rollout: %s", rollout.app, step.reason)
        self._history(
            rollout.app, [HistoryEntry(0, s.at, ROLLOUT_REASON + s.reason, {}, changed=False) for s in new_steps]
        )
        self.deployments.offer(rollout.app, on_trial(record), rollout.on(rollout.to_version))
        was = before.wanted() if before is not None else {}
        changed = [site for site, version in rollout.wanted().items() if was.get(site, rollout.from_version) != version]
        if changed:
            self.deployments.distribute(changed)
        if rollout.status is Status.PASSED:
            self._promote(live)
        elif rollout.status is Status.ROLLED_BACK:
            self.deployments.offer(rollout.app, SiteApp(record.plan, record.source), ())
            self._over(live)

    def _history(self, name: str, entries: list[HistoryEntry]) -> None:
        deployment = self.deployments.get(name)
        if deployment is None or not entries:
            return
        record, plan = deployment.record, deployment.record.plan
        stamped = [
            dataclasses.replace(e, version=plan.version, totals=dataclasses.asdict(plan.totals)) for e in entries
        ]
        self.deployments.update(dataclasses.replace(record, history=[*record.history, *stamped][-MAX_HISTORY:]))

    def _promote(self, live: _Live) -> None:
        """Make the new version of a rollout that passed the app's deployed one."""
        candidate, rollout = live.record, live.record.rollout
        deployment = self.deployments.get(rollout.app)
        if deployment is not None and source_hash(deployment.record.source) == rollout.from_version:
            self._install(deployment, live.app, candidate)
            log.info("app %r: the rollout passed; version %s is the deployed one", rollout.app, rollout.to_version[:12])
        self.deployments.offer(rollout.app, SiteApp(candidate.plan, candidate.source), ())
        self._over(live)

    def _install(self, deployment: Deployment, app: App, candidate: RolloutRecord) -> None:
        old, at = deployment.record, self._clock()
        entry = history_entry(candidate.plan, at, f"rollout passed: {rollout_summary(candidate.rollout)}", old.plan)
        request: dict[str, Any] = {"source": candidate.source, "filename": candidate.filename}
        request |= {"app_name": candidate.app_name, "slo_ms": old.slo_ms, "weights": old.weights}
        record = deployed_record(app, candidate.plan, old, entry, old.basis, **request)
        self.deployments.offer(app.name, SiteApp(candidate.plan, candidate.source), ())
        self.deployments.install(app, record, old.plan, changed=True)

    def _over(self, live: _Live) -> None:
        name = live.record.rollout.app
        self._live.pop(name, None)
        self._last[name] = live.record

    # -- restart and the thread ----------------------------------------------------------------

    def load(self) -> list[str]:
        """Read the persisted rollouts; give their sites their versions again and restart holds and take-ups.

        Call it before the deployed apps republish their plans. Returns the apps whose rollout resumes.
        """
        if self.store is None:
            return []
        resumed = []
        with self._lock:
            for record in self.store.load():
                rollout = record.rollout
                if rollout.status is Status.ROLLED_BACK:
                    self._last[rollout.app] = record
                    continue
                try:
                    app = load_app(record.source, record.filename, record.app_name)
                except SpanEdgeError as exc:
                    log.error(
                        "cannot resume the rollout of app %r: %s; its sites get the deployed version", rollout.app, exc
                    )
                    continue
                after = steps.resume(rollout, self._clock())
                live = _Live(dataclasses.replace(record, rollout=after), app)
                if after is not rollout and self.store is not None:
                    self.store.save(live.record)
                if rollout.status is Status.PASSED:
                    self._live[rollout.app] = live  # the next tick makes it the deployed version, if not done
                    continue
                self._live[rollout.app] = live
                self.deployments.offer(rollout.app, on_trial(record), after.on(after.to_version))
                resumed.append(rollout.app)
        for name in resumed:
            log.info("app %r: the rollout resumes: %s", name, self._live[name].record.rollout.steps[-1].reason)
        return resumed

    def start(self, stop: threading.Event) -> threading.Thread:
        """Start :meth:`run` on a daemon thread of its own, until ``stop`` is set (then set :attr:`wake` too)."""
        thread = threading.Thread(target=self.run, args=(stop,), name="spanedge-rollouts", daemon=True)
        thread.start()
        return thread

    def run(self, stop: threading.Event, idle_s: float = 5.0) -> None:
        """Tick until ``stop`` is set: as :meth:`next_due` asks while a rollout runs, else every ``idle_s``."""
        while not stop.is_set():
            due = self.next_due()
            wait = idle_s if due is None else max(0.0, min(idle_s, due - self._clock()))
            self.wake.wait(wait)
            self.wake.clear()
            if stop.is_set():
                return
            self.tick()


def on_trial(record: RolloutRecord) -> SiteApp:
    """The new version's entry in the plan messages of the sites a stage changed: marked as on trial.

    Their agents keep what they need to return to the previous version
    (``edge_agent.rollback``) while it is; the promoted version's entry is
    not, so they drop it then.
    """
    return SiteApp(dataclasses.replace(record.plan, trial=True), record.source)


def _replanned(deployment: Deployment | None, live: _Live) -> str | None:
    """Why a rollout must roll back because the previous version was re-planned under it (None: it was not).

    Only a forced re-plan (a site gone for good) goes ahead during a rollout; the new version's plan,
    made from the plan in force then, no longer fits the sites.
    """
    if deployment is None or deployment.record.plan.version == live.record.plan.version - 1:
        return None
    record = deployment.record
    why = record.history[-1].reason if record.history else "a site changed"
    return f"the app was re-planned (plan v{record.plan.version}: {why}); the new version's plan no longer fits it"


def _sample(live: _Live, counts: Mapping[str, int], now: float) -> None:
    """Keep the hub's count of operator errors on each rollout site's records at ``now``."""
    for site in live.record.rollout.sites:
        live.hub_errors.setdefault(site, deque(maxlen=MAX_BEATS)).append((now, float(counts.get(site, 0))))


def _context(live: _Live, deployment: Deployment | None, registry: SiteRegistry, hub_counted: bool) -> Context:
    """What the gates of ``live``'s rollout need besides heartbeats: the apps' sources, the sites' declared CPU.

    With ``hub_counted``, also the hub's samples of its operator errors on each site's records.
    """
    apps = [live.app] + ([deployment.app] if deployment is not None else [])
    sources = frozenset(n for a in apps for n, op in a.operators.items() if op.kind is Kind.SOURCE)
    cpu = {s.name: s.cpu for s in registry.sites.spokes}
    hub_errors = {site: list(got) for site, got in live.hub_errors.items()} if hub_counted else None
    return Context(live.record.rollout.app, sources, cpu, hub_errors)


def rollout_summary(rollout: Rollout) -> str:
    """One line on a rollout: versions, stages and where it is."""
    return (
        f"version {rollout.to_version[:12]} over {rollout.from_version[:12]}, "
        f"stages {', '.join(s.spec for s in rollout.stages)}: {rollout.status} at stage {rollout.stage + 1}/{len(rollout.stages)}"
    )


def _check_specs(stages: str, gates: str, hold_s: float) -> None:
    for what, text in (("--rollout", stages), ("--gate", gates)):
        if len(text) > MAX_SPEC_CHARS:
            msg = f"{what} is {len(text)} characters long; give at most {MAX_SPEC_CHARS}"
            raise InvalidRollout(msg)
    if not (0 < hold_s <= MAX_HOLD_S):
        msg = f"--hold {hold_s:g} s is out of range; give more than 0 s and at most {MAX_HOLD_S:g} s (a day)"
        raise InvalidRollout(msg)
