"""What a run measured over time, for the charts: WAN bytes per link, outbox backlog per site, faults, re-plans.

Times are seconds since the sensors started. :class:`WanSampler` reads the
byte counters of the WAN links every second; the backlog comes from the
agents' heartbeats (:attr:`simulate.results.Collector.backlog_history`); the
faults from :class:`~simulate.fault_schedule.FaultSchedule`; the re-plans
from the hub's placement history.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from simulate.charts import Mark
from simulate.fault_schedule import AppliedFault
from spanedge.history import fold

LABEL_CHARS = 80


@dataclass
class Timeline:
    """The series of one run."""

    wan_times: list[float] = field(default_factory=list)
    wan: dict[str, list[int]] = field(default_factory=dict)
    """Bytes each link delivered (both ways) up to each of ``wan_times``."""
    backlog: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Outbox records per spoke, one point per heartbeat."""
    marks: list[Mark] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    """Result latencies per tier (``local``, ``global``), in milliseconds."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Timeline:
        """Rebuild from :meth:`to_dict` output."""
        return cls(
            wan_times=list(data.get("wan_times", [])),
            wan={k: list(v) for k, v in data.get("wan", {}).items()},
            backlog={k: [(float(t), int(n)) for t, n in v] for k, v in data.get("backlog", {}).items()},
            marks=[Mark(**m) for m in data.get("marks", [])],
            latency_ms={k: list(v) for k, v in data.get("latency_ms", {}).items()},
        )


class WanSampler:
    """Samples the bytes each WAN link delivered so far, both directions summed."""

    def __init__(self, read: Callable[[], Mapping[str, Mapping[str, int]]], clock: Callable[[], float] = time.time):
        """Sample ``read()`` (bytes per link and direction, as :meth:`simulate.topology.Topology.wan_bytes`)."""
        self.read = read
        self.clock = clock
        self.times: list[float] = []
        self.wan: dict[str, list[int]] = {}

    def sample(self, t0: float) -> None:
        """Take one sample, stamped with the seconds since ``t0``."""
        totals = {link: sum(ways.values()) for link, ways in self.read().items()}
        n = len(self.times)
        self.times.append(round(self.clock() - t0, 3))
        for link, total in totals.items():
            self.wan.setdefault(link, [0] * n).append(total)
        for series in self.wan.values():
            if len(series) == n:  # a link that vanished keeps its last count
                series.append(series[-1] if series else 0)

    async def run(self, t0: float, interval: float = 1.0) -> None:
        """Sample every ``interval`` seconds until cancelled."""
        while True:
            self.sample(t0)
            await asyncio.sleep(interval)


def relative(points: Iterable[tuple[float, int]], t0: float) -> list[tuple[float, int]]:
    """Points stamped with wall-clock times, from ``t0`` on, restamped as seconds since ``t0``.

    The last point before ``t0`` is kept at 0, so a series starts where it stood when the sensors started.
    """
    before: tuple[float, int] | None = None
    out: list[tuple[float, int]] = []
    for t, value in points:
        if t < t0:
            before = (0.0, value)
        else:
            out.append((round(t - t0, 3), value))
    return ([before] if before is not None else []) + out


def fault_marks(applied: Sequence[AppliedFault], t0: float) -> list[Mark]:
    """A mark per fault applied, with the span until it healed (partitions, killed agents)."""
    marks = []
    for a in applied:
        until = None if a.ended is None else round(a.ended - t0, 3)
        marks.append(Mark(round(a.began - t0, 3), "fault", _label(a.fault.describe()), until))
    return marks


def replan_marks(placement: Any, t0: float) -> list[Mark]:
    """A mark per re-plan in the hub's placement history (the first entry is the deploy) from ``t0`` on.

    A run of re-plans that left the placement unchanged is one mark, at the first, that counts them.
    """
    history = placement.get("history") if isinstance(placement, dict) else None
    if not isinstance(history, list):
        return []
    entries = [e for e in history[1:] if isinstance(e, dict) and isinstance(e.get("at"), int | float) and e["at"] >= t0]
    marks = []
    for group in fold(entries):
        t = float(group[0]["at"]) - t0
        if len(group) > 1:
            what = f"{len(group)} re-plans to {float(group[-1]['at']) - t0:.1f} s, unchanged"
        else:
            what = "re-plan" if group[0].get("changed", True) else "re-plan, unchanged"
        reason = str(group[-1].get("reason", "")).split(";")[0].strip()
        marks.append(Mark(round(t, 3), "replan", _label(f"{what}: {reason}" if reason else what)))
    return marks


def _label(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
