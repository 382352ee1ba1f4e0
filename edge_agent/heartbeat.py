"""Heartbeats: what the agent reports to the hub every few seconds."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from spanedge.keyrange import spread_of
from spanedge.wire.heartbeat import COUNTERS, Heartbeat

log = logging.getLogger(__name__)

#: The file in an agent's state directory that holds the CPU cores SpanEdge may use at its site now.
CPU_BUDGET_FILE = "cpu-budget"


class Rates:
    """Per-replica records/s in and out between two heartbeats."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int, int]] = {}

    def update(self, counts: dict[str, dict[str, int]], now: float | None = None) -> dict[str, dict[str, float]]:
        """Return ``{replica: {"in", "out", "rate_in", "rate_out"}}`` from cumulative counts."""
        now = time.monotonic() if now is None else now
        out: dict[str, dict[str, float]] = {}
        for replica, c in counts.items():
            prev = self._last.get(replica)
            n_in, n_out = c["in"], c["out"]
            if prev is None or now <= prev[0]:
                rate_in = rate_out = 0.0
            else:
                dt = now - prev[0]
                rate_in, rate_out = max(0, n_in - prev[1]) / dt, max(0, n_out - prev[2]) / dt
            self._last[replica] = (now, n_in, n_out)
            out[replica] = {"in": n_in, "out": n_out, "rate_in": round(rate_in, 3), "rate_out": round(rate_out, 3)}
        return out


class KeySpread:
    """How the records of each window replica spread over its keys, smoothed over heartbeats.

    Each heartbeat adds the records taken per key since the last one, by
    bucket of the key hash space (:func:`spanedge.keyrange.spread_of`), to
    the earlier counts halved: a replica's recent spread, in records. The hub
    splits a keyed window where its records, not its key space, divide in two
    (:mod:`placement.split`).
    """

    #: What an earlier heartbeat's counts weigh at the next one.
    DECAY = 0.5

    def __init__(self) -> None:
        self._spread: dict[tuple[str, str], dict[int, float]] = {}

    def update(self, taken: Mapping[str, Mapping[str, Mapping[Any, int]]]) -> dict[str, dict[str, dict[str, float]]]:
        """Fold ``taken`` (app -> replica -> key -> records) in; return app -> replica -> bucket -> records."""
        for (app, replica), spread in list(self._spread.items()):
            faded = {b: n * self.DECAY for b, n in spread.items() if n * self.DECAY >= 0.01}
            if faded:
                self._spread[app, replica] = faded
            else:
                del self._spread[app, replica]
        for app, replicas in taken.items():
            for replica, counts in replicas.items():
                spread = self._spread.setdefault((app, replica), {})
                for b, n in spread_of(counts).items():
                    spread[b] = spread.get(b, 0.0) + n
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (app, replica), spread in sorted(self._spread.items()):
            out.setdefault(app, {})[replica] = {str(b): round(n, 2) for b, n in sorted(spread.items())}
        return out


class ProcessStats:
    """CPU percent (since the previous call) and resident memory of this process."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)

    def sample(self) -> tuple[float, int]:
        """Return ``(cpu_percent, rss_bytes)``."""
        return self._proc.cpu_percent(None), int(self._proc.memory_info().rss)


class CpuBudget:
    """The CPU budget a gateway gives SpanEdge now, read from a file before each heartbeat.

    Whatever shares the gateway (another workload, a resource manager, an
    operator) writes the cores SpanEdge may use into the file, as a number
    like ``sites.yaml``'s ``cpu`` (``0.25``); removing the file returns to the
    declared budget. The hub plans the site with less when its CPU use stays
    above that budget. A file that does not hold a positive number is ignored
    with a warning (logged once per content).
    """

    def __init__(self, path: Path | None) -> None:
        """Read the budget from ``path`` (None: never overridden)."""
        self.path = path
        self._warned: str | None = None

    def read(self) -> float | None:
        """The overriding budget in cores, or None (no file, or an invalid one)."""
        if self.path is None:
            return None
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return self._invalid(f"unreadable: {exc.strerror}")
        try:
            cores = float(text)
        except ValueError:
            return self._invalid(f"holds {text[:40]!r}")
        if not (math.isfinite(cores) and cores > 0):
            return self._invalid(f"holds {text[:40]!r}")
        self._warned = None
        return cores

    def _invalid(self, why: str) -> float | None:
        """Warn (once per reason) that the file is ignored; the budget is then the declared one (None)."""
        if self._warned != why:
            self._warned = why
            log.warning(
                "ignoring CPU budget file %s: %s; write a positive number of cores (0.5) or remove it", self.path, why
            )
        return None


def heartbeat(
    *,
    site: str,
    apps: list[str],
    operators: dict[str, dict[str, float]],
    watermark_lag_s: float | None,
    outbox: dict[str, int],
    dlq: int,
    late: int,
    overload_dropped: int,
    cpu_percent: float,
    rss_bytes: int,
    latency: dict[str, dict[str, Any]],
    clock_offset_ms: float | None,
    cpu_budget: float | None = None,
    handed_over: list[dict[str, Any]] | None = None,
    state_bytes: dict[str, dict[str, int]] | None = None,
    complete: dict[str, float | None] | None = None,
    delivered: dict[str, float] | None = None,
    key_spread: dict[str, dict[str, dict[str, float]]] | None = None,
    result_latency: dict[str, dict[str, dict[str, float]]] | None = None,
    counters: Mapping[str, Mapping[str, int]] | None = None,
) -> Heartbeat:
    """Assemble one heartbeat message (:class:`spanedge.wire.heartbeat.Heartbeat`).

    ``cpu_budget`` is the CPU cores SpanEdge may use at the site now, when it
    is less than ``sites.yaml`` declares (see :class:`CpuBudget`); None leaves it out.
    ``handed_over`` lists the handovers whose part this site has finished, with
    the last record it sent of each stream (:meth:`edge_agent.apps.Apps.handed_over`);
    empty or None leaves it out. ``state_bytes`` gives, per app, the bytes of
    state each window replica holds here (what its snapshot would take); the
    hub weighs moving a replica by it and shows it in the plan history.
    ``complete`` gives, per app sending to the hub, the event time below which
    this site sends it nothing more (None: idle); the hub's windows wait for
    the slowest live site (:mod:`hub.handover.frontiers`). ``delivered`` gives,
    per app, the event time below which this site has delivered every
    result, to the hub and to its local sinks: if it dies for good, the hub
    reports its results from there on at risk. ``key_spread`` gives, per app,
    each window replica's recent records by bucket of its key hash space
    (:class:`KeySpread`). ``result_latency`` gives, per app, each local sink's
    result latency over the last minute (:meth:`edge_agent.sinks.LocalSinks.result_latency`).
    ``counters`` gives, per app, its dead letters, late records and operator errors since the agent started
    (:attr:`edge_agent.sinks.LocalSinks.counters`); every app in ``apps`` gets each counter, 0 if not given.
    Empty or None leaves any of these out, as it
    leaves out a ``watermark_lag_s`` or ``clock_offset_ms`` not known yet.
    """
    return Heartbeat(
        site=site,
        ts=time.time(),
        apps=apps,
        operators=operators,
        watermark_lag_s=None if watermark_lag_s is None else round(watermark_lag_s, 3),
        outbox=outbox,
        dlq=dlq,
        late=late,
        overload_dropped=overload_dropped,
        cpu_percent=cpu_percent,
        rss_bytes=rss_bytes,
        latency=latency,
        clock_offset_ms=clock_offset_ms,
        cpu_budget=cpu_budget,
        handed_over=handed_over or [],
        state_bytes=state_bytes or {},
        complete=complete or {},
        delivered=delivered or {},
        key_spread=key_spread or {},
        result_latency=result_latency or {},
        counters={app: {c: (counters or {}).get(app, {}).get(c, 0) for c in COUNTERS} for app in apps},
    )
