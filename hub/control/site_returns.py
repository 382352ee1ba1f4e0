"""Noticing that a site gone for good is back: the first heartbeat after the moves that put its results at risk.

When a spoke is gone past the grace period, the re-plan around it marks each
move away from it with what is at risk (:func:`hub.control.plan_history.at_risk`).
Any heartbeat it sends after that re-plan means it is back; the coordinator
then marks those moves with ``back_at`` (:func:`hub.control.plan_history.back`). The
awaited sites come from the plan history itself, so a hub restarted while a
site was gone still notices its return.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from hub.control.state import AppRecord


def awaited(records: Iterable[AppRecord]) -> set[str]:
    """The sites whose moves away from them are marked at risk and not yet back."""
    return {
        str(m["from"])
        for r in records
        for entry in r.history
        for m in entry.moved
        if "recover_by" in m and "back_at" not in m
    }


class SiteReturns:
    """The awaited sites and when each was first heard from again; safe to call from any thread."""

    def __init__(self) -> None:
        """Await no site."""
        self._lock = threading.Lock()
        self._awaited: set[str] = set()
        self._back: dict[str, float] = {}

    def expect(self, sites: Iterable[str]) -> None:
        """Await ``sites``: from now on, a heartbeat of one of them means it is back."""
        with self._lock:
            self._awaited |= set(sites)

    def heard(self, site: str, at: float) -> None:
        """Note a heartbeat of ``site`` received at ``at``."""
        with self._lock:
            if site in self._awaited:
                self._awaited.discard(site)
                self._back[site] = at

    def take(self) -> dict[str, float]:
        """The awaited sites heard from since the last call, with their first heartbeat's time."""
        with self._lock:
            back, self._back = self._back, {}
            return back
