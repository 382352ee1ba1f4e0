"""Records in and out per operator over a whole run, from every heartbeat the agents sent.

An agent's heartbeat carries, per replica, the records it took in and gave
out since the agent started. A count that goes down is a new count (the agent
restarted after a ``kill-agent``): it adds to what came before. A replica that
moved keeps its count at the site it left. So the totals hold every record an
agent counted, up to its last heartbeat before it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

Counts = tuple[int, int]
"""Records in and out."""


class OperatorTotals:
    """The running totals of each replica at each site, fed one heartbeat at a time."""

    def __init__(self) -> None:
        """Start with nothing counted."""
        self._earlier: dict[tuple[str, str], Counts] = {}  # what counts that went down had reached
        self._latest: dict[tuple[str, str], Counts] = {}

    def add(self, site: str, beat: Mapping[str, Any]) -> None:
        """Take the per-replica counts of one heartbeat of ``site``."""
        operators = beat.get("operators")
        if not isinstance(operators, dict):
            return
        for replica, counts in operators.items():
            if not isinstance(counts, dict):
                continue
            now = (_count(counts.get("in")), _count(counts.get("out")))
            key = (site, str(replica))
            last = self._latest.get(key)
            if last is not None and (now[0] < last[0] or now[1] < last[1]):
                done = self._earlier.get(key, (0, 0))
                self._earlier[key] = (done[0] + last[0], done[1] + last[1])
            self._latest[key] = now

    def by_operator(self, sites: Collection[str] | None = None) -> dict[str, dict[str, int]]:
        """Records in and out per operator, summed over its replicas at ``sites`` (every site if None)."""
        out: dict[str, dict[str, int]] = {}
        for key, (n_in, n_out) in self._latest.items():
            site, replica = key
            if sites is not None and site not in sites:
                continue
            before = self._earlier.get(key, (0, 0))
            total = out.setdefault(replica.partition("@")[0], {"in": 0, "out": 0})
            total["in"] += before[0] + n_in
            total["out"] += before[1] + n_out
        return out


def _count(value: Any) -> int:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return int(value) if number and math.isfinite(value) and value >= 0 else 0
