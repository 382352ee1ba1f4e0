"""When to re-plan an app: its latencies or stream rates drifted beyond a relative threshold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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

    def reasons(self, planned: dict[str, Any], now: dict[str, Any]) -> list[str]:
        """What moved beyond the threshold from the ``planned`` basis to the ``now`` one, for people.

        Both are :func:`hub.planning.basis` results; a latency or rate the plan
        did not know is no drift.
        """
        reasons = []
        for key, new in now["latency"].items():
            old = planned.get("latency", {}).get(key)
            if old is not None and _drift(old, new, self.latency_floor_ms) > self.threshold:
                a, b = key.split("|")
                reasons.append(f"latency {a}–{b} {old:.1f}→{new:.1f} ms ({(new - old) / max(old, 1e-9):+.0%})")
        for key, new in now["rates"].items():
            old = planned.get("rates", {}).get(key)
            if old is not None and _drift(old, new, self.rate_floor) > self.threshold:
                reasons.append(f"rate of {key} {old:.1f}→{new:.1f} rec/s ({(new - old) / max(old, 1e-9):+.0%})")
        return reasons
