"""When to re-plan an app: its latencies or stream rates drifted beyond a relative threshold."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hub.control.distribution import sites_of
from spanedge.plan import Plan

log = logging.getLogger(__name__)


def _drift(old: float, new: float, floor: float) -> float:
    return abs(new - old) / max(abs(old), floor)


@dataclass(frozen=True)
class DriftPolicy:
    """What counts as drift, and how often an app may be re-planned.

    Attributes:
        threshold: relative change of a latency or rate that triggers a re-plan.
        min_replan_interval_s: an app is re-planned at most this often.
        latency_floor_ms: changes are relative to at least this latency, so 1→2 ms is no drift.
        rate_floor: changes are relative to at least this many records/s.
    """

    threshold: float = 0.5
    min_replan_interval_s: float = 60.0
    latency_floor_ms: float = 5.0
    rate_floor: float = 1.0

    def __post_init__(self) -> None:
        """Reject a threshold that is not positive."""
        if self.threshold <= 0:
            msg = f"drift threshold must be positive, got {self.threshold}"
            raise ValueError(msg)

    def due(self, last: float, now: float) -> bool:
        """True if an app last planned (or tried) at ``last`` may be re-planned at ``now``."""
        return now - last >= self.min_replan_interval_s

    def reasons(
        self, planned: dict[str, Any], now: dict[str, Any], declared: Callable[[str], float | None]
    ) -> list[str]:
        """What moved beyond the threshold from the ``planned`` basis to the ``now`` one, for people.

        Both are :func:`hub.control.planning.basis` results, which hold measured
        latencies only: a pair missing from one has its ``declared`` latency
        there. A rate the plan did not know is no drift.
        """
        reasons = []
        then, current = planned.get("latency", {}), now["latency"]
        for key in sorted(current.keys() | then.keys()):
            old, new = then.get(key), current.get(key)
            old = declared(key) if old is None else old
            new = declared(key) if new is None else new
            if old is not None and new is not None and _drift(old, new, self.latency_floor_ms) > self.threshold:
                a, b = key.split("|")
                reasons.append(f"latency {a}–{b} {old:.1f}→{new:.1f} ms ({(new - old) / max(old, 1e-9):+.0%})")
        for key, new in now["rates"].items():
            old = planned.get("rates", {}).get(key)
            if old is not None and _drift(old, new, self.rate_floor) > self.threshold:
                reasons.append(f"rate of {key} {old:.1f}→{new:.1f} rec/s ({(new - old) / max(old, 1e-9):+.0%})")
        return reasons


@dataclass
class SilenceWatch:
    """Which apps' re-plans must wait: a spoke of their plan fell silent (heard once, not lately).

    A move is handed over by a plan both owners must get before its switch
    time; a site cut off from the hub would not, so the old owner would go on
    emitting windows the new one also emits, and the new owner could not reach
    a cut-off source's broker. Logged once each time an app's set changes.

    Attributes:
        silent: tells whether a site fell silent (:meth:`hub.control.registry.SiteRegistry.silent`).
    """

    silent: Callable[[str], bool]
    _waiting: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def waits(self, app: str, plan: Plan) -> bool:
        """True while a spoke that ``plan`` uses (or hands a replica over from) is silent."""
        silent = tuple(sorted(s for s in sites_of(plan) if s != plan.hub and self.silent(s)))
        if silent != self._waiting.get(app, ()):
            self._waiting[app] = silent
            if silent:
                log.info("app %r: re-plans wait until %s is heard from again", app, ", ".join(silent))
        return bool(silent)
