"""The fault schedule of a run: each fault at its time after the sensors start, healed after its duration.

:class:`FaultSchedule` drives a :class:`FaultTarget`, the part of a running
topology that faults act on, so a schedule can be run against any object with
those methods. A fault timed relative to the first move (``replan+3s``,
``switch-2s``) waits until the hub's placement answer shows a re-plan that
changed the placement (:func:`first_move`), polled every second.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from simulate.faults import NEW_OWNER, OLD_OWNER, Anchor, Fault, FaultKind, fault_order
from simulate.joins import join_switch
from simulate.rollout_fault import DeploySpec, parse_deploy


class FaultTarget(Protocol):
    """What faults act on: the WAN links, the brokers and the processes of a running topology.

    The methods without ``async`` that stop or restart something may block;
    the schedule runs them in an executor.
    """

    def partition(self, site: str) -> None:
        """Cut every WAN link of ``site``."""

    def heal(self, site: str) -> None:
        """Heal every WAN link of ``site``."""

    def set_latency(self, site: str, delay_ms: float) -> None:
        """Set the one-way delay of every WAN link of ``site``."""

    def restart_broker(self, site: str) -> None:
        """Stop and start the broker of ``site`` on the same port."""

    def kill_agent(self, site: str) -> None:
        """SIGKILL the agent of ``site``."""

    def start_agent(self, site: str) -> None:
        """Start the agent of ``site`` again."""

    def restart_hub(self) -> None:
        """Stop the hub gracefully and start it again."""

    def kill_hub(self) -> str:
        """SIGKILL the (leading) hub's process group; which hub it was."""

    def start_hub_again(self, name: str) -> None:
        """Start the hub ``name`` killed by :meth:`kill_hub` again, with the same command."""

    def pause_hub(self) -> str:
        """SIGSTOP the (leading) hub's process group; which hub it was."""

    def resume_hub(self, name: str) -> str:
        """SIGCONT the hub ``name``; what it did then (with ``--ha``: kept leading, or exited and was restarted)."""

    def kill_site(self, site: str) -> None:
        """SIGKILL the agent of ``site`` for good: it is not started again."""

    def revoke_site(self, site: str) -> list[str]:
        """Revoke ``site`` at the hub (``spanedge site revoke``); what the hub did, one line each."""

    async def join_site(self, site: str) -> list[str]:
        """Add ``site`` at the hub and enrol it with ``spanedge agent join``, then run its agent; one line each."""

    def agent_cpu_seconds(self, site: str) -> float:
        """CPU seconds the agent of ``site`` used so far."""

    def set_cpu_budget(self, site: str, cores: float | None) -> None:
        """Tell the agent of ``site`` the CPU cores it may use now (None: what sites.yaml declares)."""

    def deploy_version(self, spec: DeploySpec) -> str:
        """Deploy the new version ``spec`` names (a staged rollout with stages); what the hub said, one line."""


@dataclass(frozen=True)
class Move:
    """The first re-plan that changed the placement: when (wall clock), its switch time, and who hands over to whom.

    ``switch_at`` is None when that re-plan handed nothing over (the plan
    lists no handover at or after it); the owners are then those of its
    first moved replica.
    """

    replan_at: float
    switch_at: float | None
    source: str | None
    target: str | None

    def moment(self, anchor: Anchor) -> float | None:
        """The wall-clock time ``anchor`` stands for."""
        return self.replan_at if anchor is Anchor.REPLAN else self.switch_at

    def site(self, name: str) -> str | None:
        """``name``, or the site ``old-owner`` / ``new-owner`` stands for."""
        return {OLD_OWNER: self.source, NEW_OWNER: self.target}.get(name, name)


def first_move(placement: Any, since: float) -> Move | None:
    """The first re-plan at or after ``since`` that changed the placement, from the hub's placement answer.

    Its switch is the earliest switch time of the handovers listed from then on,
    its owners the source and target of the first handover with that time (or,
    without handovers, of its first moved replica).
    """
    history = placement.get("history") if isinstance(placement, dict) else None
    entries = [h for h in (history or [])[1:] if isinstance(h, dict) and h.get("changed")]
    entry = next((h for h in entries if float(h.get("at", 0.0)) >= since), None)
    if entry is None:
        return None
    at = float(entry["at"])
    listed = [h for h in placement.get("handovers") or [] if isinstance(h, dict)]
    handovers = sorted((h for h in listed if float(h.get("switch_at", 0.0)) >= at), key=lambda h: h["switch_at"])
    if handovers:
        first = handovers[0]
        return Move(at, float(first["switch_at"]), first.get("source"), first.get("target"))
    moved = [m for m in entry.get("moved") or [] if isinstance(m, dict)]
    return Move(at, None, moved[0].get("from") if moved else None, moved[0].get("to") if moved else None)


@dataclass
class AppliedFault:
    """A fault that began at wall-clock time ``began`` and, for those that heal, ended at ``ended``."""

    fault: Fault
    began: float
    ended: float | None = None


class FaultSchedule:
    """Applies faults to a target at their times.

    ``down`` holds the sites partitioned right now; ``applied`` every fault
    begun so far, with when it began and, once healed, when it ended;
    ``killed`` the sites killed for good or revoked, with when; ``stopped`` the sites
    whose agent was killed, for good or to come back, or revoked; ``revoked`` the sites
    revoked at the hub (their agents and sensors go on, refused); ``joined`` the sites
    that joined, with the switch time from which the hub counts their data; ``move`` the
    first move once seen (faults with a relative time only); ``skipped`` a line for each
    fault that could not be applied (or, for a join, was never planned in), and why.
    """

    def __init__(
        self,
        faults: Iterable[Fault],
        target: FaultTarget,
        hub: str,
        note: Callable[[str], None],
        restart_delay: float = 1.0,
        clock: Callable[[], float] = time.time,
        stop_sensors: Callable[[str], None] | None = None,
        measure_s: float = 2.0,
        placement: Callable[[], Awaitable[Any]] | None = None,
        poll_s: float = 1.0,
        start_sensors: Callable[[str, float], Awaitable[None]] | None = None,
    ) -> None:
        """Schedule ``faults`` (sorted by time); ``hub`` is the site of faults that name none.

        Args:
            faults: the faults, in any order.
            target: what the faults act on.
            hub: the site a fault without one (``restart-hub``) concerns.
            note: called with a line for each thing that happens.
            restart_delay: seconds between killing an agent and starting it again.
            clock: the wall clock that stamps :attr:`applied`.
            stop_sensors: stops the sensors of a site (``kill-site``).
            measure_s: seconds over which ``overload`` measures the CPU an agent uses.
            placement: returns the hub's placement answer of the app (or None), for faults
                timed relative to the first move; without it such faults are skipped.
            poll_s: seconds between two looks at the placement while waiting for the first move or a join.
            start_sensors: starts the sensors of a site that joined, given the switch time of its join.
        """
        self.faults = sorted(faults, key=fault_order)
        self.target = target
        self.hub = hub
        self.note = note
        self.restart_delay = restart_delay
        self.clock = clock
        self.stop_sensors = stop_sensors
        self.measure_s = measure_s
        self.placement = placement
        self.poll_s = poll_s
        self.start_sensors = start_sensors
        self.until: float | None = None
        self.joined: dict[str, float] = {}
        self.down: set[str] = set()
        self.killed: dict[str, float] = {}
        self.stopped: set[str] = set()
        self.revoked: set[str] = set()
        self.applied: list[AppliedFault] = []
        self.move: Move | None = None
        self.skipped: list[str] = []

    async def run(self, start_monotonic: float, until: float | None = None) -> None:
        """Apply each fault ``fault.at`` seconds after ``start_monotonic`` (event-loop time); return once all healed.

        A fault with a relative time is applied at its offset from the first
        move; if no move shows by ``until`` (event-loop time), it is skipped.
        """
        loop = asyncio.get_running_loop()
        self.until = until
        running: list[asyncio.Task[None]] = []
        relative = [f for f in self.faults if f.anchor is not None]
        if relative:
            since = self.clock() - (loop.time() - start_monotonic)
            running.append(asyncio.ensure_future(self._after_move(relative, since, until)))
        for fault in (f for f in self.faults if f.anchor is None):
            wait = start_monotonic + fault.at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            running.append(asyncio.ensure_future(self.apply(fault)))
        if running:
            await asyncio.gather(*running)

    async def _after_move(self, faults: list[Fault], since: float, until: float | None) -> None:
        """Wait for the first move at or after wall-clock ``since``, then apply ``faults`` at their offsets from it."""
        move = await self._wait_move(since, until)
        if move is None:
            why = (
                "no re-plan changed the placement before the sensors stopped"
                if self.placement is not None
                else "times relative to a re-plan need the managed hub (--mode managed)"
            )
            for fault in faults:
                self._skip(fault, why)
            return
        due: list[tuple[float, Fault]] = []
        for fault in faults:
            moment, site = move.moment(fault.anchor or Anchor.REPLAN), move.site(fault.site) if fault.site else None
            if moment is None:
                self._skip(fault, "the first re-plan that changed the placement handed nothing over between spokes")
            elif fault.site and site is None:
                self._skip(fault, f"the first re-plan that changed the placement names no {fault.site}")
            else:
                due.append((moment + fault.at, dataclasses.replace(fault, site=site)))
        running: list[asyncio.Task[None]] = []
        for when, fault in sorted(due, key=lambda d: d[0]):
            wait = when - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
            elif wait < -self.poll_s:
                self.note(f"fault {fault.describe()} is {-wait:.1f} s late: the move showed after its time")
            running.append(asyncio.ensure_future(self.apply(fault)))
        if running:
            await asyncio.gather(*running)

    async def _wait_move(self, since: float, until: float | None) -> Move | None:
        """Poll the hub's placement until it shows the first move (None if none by ``until``, or no placement)."""
        if self.placement is None:
            return None
        loop = asyncio.get_running_loop()
        while True:
            move = first_move(await self.placement(), since)
            if move is not None:
                self.move = move
                switch = "no handover" if move.switch_at is None else f"switch {move.switch_at - since:+.1f} s"
                self.note(
                    f"first move: re-plan at {move.replan_at - since:+.1f} s, {switch}, {move.source} -> {move.target}"
                )
                return move
            if until is not None and loop.time() >= until:
                return None
            await asyncio.sleep(self.poll_s)

    def _skip(self, fault: Fault, why: str) -> None:
        line = f"fault {fault.describe()} was not applied: {why}"
        self.skipped.append(line)
        self.note(line)

    async def apply(self, fault: Fault) -> None:
        """Apply one fault now, and heal it when it has a duration."""
        loop = asyncio.get_running_loop()
        site = fault.site or self.hub
        self.note(f"fault {fault.describe()}")
        record = AppliedFault(fault, self.clock())
        self.applied.append(record)
        if fault.kind is FaultKind.PARTITION:
            self.target.partition(site)
            self.down.add(site)
            await asyncio.sleep(fault.duration or 0)
            self.target.heal(site)
            self.down.discard(site)
            record.ended = self.clock()
            self.note(f"healed {site}")
        elif fault.kind is FaultKind.KILL_AGENT:
            self.stopped.add(site)
            await loop.run_in_executor(None, self.target.kill_agent, site)
            self.note(f"killed agent {site} (SIGKILL)")
            await asyncio.sleep(self.restart_delay if fault.duration is None else fault.duration)
            self.target.start_agent(site)
            record.ended = self.clock()
            self.note(f"restarted agent {site}")
        elif fault.kind is FaultKind.RESTART_HUB:
            await loop.run_in_executor(None, self.target.restart_hub)
            self.note("restarted the hub")
        elif fault.kind is FaultKind.KILL_HUB:
            name = await loop.run_in_executor(None, self.target.kill_hub)
            self.note(f"killed {name} (SIGKILL of its process group, Spark included)")
            await asyncio.sleep(self.restart_delay if fault.duration is None else fault.duration)
            await loop.run_in_executor(None, self.target.start_hub_again, name)
            record.ended = self.clock()
            self.note(f"started {name} again")
        elif fault.kind is FaultKind.PAUSE_HUB:
            name = await loop.run_in_executor(None, self.target.pause_hub)
            self.note(f"paused {name} (SIGSTOP of its process group)")
            await asyncio.sleep(fault.duration or 0)
            outcome = await loop.run_in_executor(None, self.target.resume_hub, name)
            record.ended = self.clock()
            self.note(f"resumed {name} (SIGCONT): {outcome}")
        elif fault.kind is FaultKind.RESTART_BROKER:
            await loop.run_in_executor(None, self.target.restart_broker, site)
            self.note(f"restarted the broker of {site}")
        elif fault.kind is FaultKind.LATENCY:
            self.target.set_latency(site, fault.latency_ms or 0.0)
            self.note(f"latency of {site}'s links set to {fault.latency_ms:.0f} ms")
        elif fault.kind is FaultKind.KILL_SITE:
            if self.stop_sensors is not None:
                self.stop_sensors(site)
            self.killed[site] = self.clock()
            self.stopped.add(site)
            await loop.run_in_executor(None, self.target.kill_site, site)
            self.note(f"killed site {site} for good: its agent (SIGKILL) and its sensors")
        elif fault.kind is FaultKind.REVOKE:
            self.killed[site] = self.clock()  # the fleet loses what it was handling, as for a site killed
            self.stopped.add(site)
            self.revoked.add(site)
            done = await loop.run_in_executor(None, self.target.revoke_site, site)
            self.note(f"revoked site {site}; its agent and sensors keep running: {'; '.join(done)}")
        elif fault.kind is FaultKind.OVERLOAD:
            await self._overload(site, fault, record)
        elif fault.kind is FaultKind.JOIN:
            await self._join(site, fault, record)
        elif fault.kind is FaultKind.DEPLOY:
            spec = parse_deploy(fault.text.rpartition("@")[0])
            said = await loop.run_in_executor(None, self.target.deploy_version, spec)
            self.note(f"deployed {spec.file.name}: {said}")
        elif fault.kind is FaultKind.DRIFT:  # the sensors shift the values they make (simulate.drift)
            self.note(f"the sensors of {site} read {fault.field} {fault.shift:+g} from now on")

    async def _join(self, site: str, fault: Fault, record: AppliedFault) -> None:
        """Enrol ``site``; once the hub planned it in, start its sensors from the switch of its join."""
        done = await self.target.join_site(site)
        self.note(f"site {site} added at the hub and joined with its one-time token: {'; '.join(done)}")
        switch = await self._wait_join(site)
        if switch is None:
            line = f"fault {fault.describe()}: the hub planned {site} in no app before the sensors stopped"
            self.skipped.append(line)
            self.note(line)
            return
        self.joined[site] = switch
        self.note(
            f"the hub planned {site} in: it counts its data from the join switch, {switch - self.clock():.1f} s on"
        )
        if self.start_sensors is not None:
            await self.start_sensors(site, switch)
        record.ended = self.clock()

    async def _wait_join(self, site: str) -> float | None:
        """Poll the hub's placement until it lists the join of ``site``; its switch time (None: none by ``until``)."""
        if self.placement is None:
            return None
        loop = asyncio.get_running_loop()
        while True:
            switch = join_switch(await self.placement(), site)
            if switch is not None:
                return switch
            if self.until is not None and loop.time() >= self.until:
                return None
            await asyncio.sleep(self.poll_s)

    async def _overload(self, site: str, fault: Fault, record: AppliedFault) -> None:
        """Shrink the CPU budget of ``site`` to 1/factor of what its agent uses; restore it after the duration."""
        before = self.target.agent_cpu_seconds(site)
        await asyncio.sleep(self.measure_s)
        used = (self.target.agent_cpu_seconds(site) - before) / self.measure_s
        budget = max(used / (fault.factor or 1.0), 0.001)
        self.target.set_cpu_budget(site, budget)
        self.note(f"CPU budget of {site} set to {budget:.3f} cores (its agent used {used:.3f})")
        if fault.duration is None:
            return
        await asyncio.sleep(max(0.0, fault.duration - self.measure_s))
        self.target.set_cpu_budget(site, None)
        record.ended = self.clock()
        self.note(f"CPU budget of {site} back to what sites.yaml declares")
