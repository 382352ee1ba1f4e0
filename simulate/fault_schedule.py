"""The fault schedule of a run: each fault at its time after the sensors start, healed after its duration.

:class:`FaultSchedule` drives a :class:`FaultTarget`, the part of a running
topology that faults act on, so a schedule can be run against any object with
those methods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from simulate.faults import Fault, FaultKind


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


@dataclass
class AppliedFault:
    """A fault that began at wall-clock time ``began`` and, for those that heal, ended at ``ended``."""

    fault: Fault
    began: float
    ended: float | None = None


class FaultSchedule:
    """Applies faults to a target at their times.

    ``down`` holds the sites partitioned right now; ``applied`` every fault
    begun so far, with when it began and, once healed, when it ended.
    """

    def __init__(
        self,
        faults: Iterable[Fault],
        target: FaultTarget,
        hub: str,
        note: Callable[[str], None],
        restart_delay: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Schedule ``faults`` (sorted by time); ``hub`` is the site of faults that name none.

        Args:
            faults: the faults, in any order.
            target: what the faults act on.
            hub: the site a fault without one (``restart-hub``) concerns.
            note: called with a line for each thing that happens.
            restart_delay: seconds between killing an agent and starting it again.
            clock: the wall clock that stamps :attr:`applied`.
        """
        self.faults = sorted(faults, key=lambda f: f.at)
        self.target = target
        self.hub = hub
        self.note = note
        self.restart_delay = restart_delay
        self.clock = clock
        self.down: set[str] = set()
        self.applied: list[AppliedFault] = []

    async def run(self, start_monotonic: float) -> None:
        """Apply each fault ``fault.at`` seconds after ``start_monotonic`` (event-loop time); return once all healed."""
        loop = asyncio.get_running_loop()
        running: list[asyncio.Task[None]] = []
        for fault in self.faults:
            wait = start_monotonic + fault.at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            running.append(asyncio.ensure_future(self.apply(fault)))
        if running:
            await asyncio.gather(*running)

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
            await loop.run_in_executor(None, self.target.kill_agent, site)
            self.note(f"killed agent {site} (SIGKILL)")
            await asyncio.sleep(self.restart_delay)
            self.target.start_agent(site)
            record.ended = self.clock()
            self.note(f"restarted agent {site}")
        elif fault.kind is FaultKind.RESTART_HUB:
            await loop.run_in_executor(None, self.target.restart_hub)
            self.note("restarted the hub")
        elif fault.kind is FaultKind.RESTART_BROKER:
            await loop.run_in_executor(None, self.target.restart_broker, site)
            self.note(f"restarted the broker of {site}")
        elif fault.kind is FaultKind.LATENCY:
            self.target.set_latency(site, fault.latency_ms or 0.0)
            self.note(f"latency of {site}'s links set to {fault.latency_ms:.0f} ms")
