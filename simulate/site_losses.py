"""What a spoke killed for good destroys: the source records it was handling when it died.

A dead agent takes with it its open windows, the records its sensors' broker
queued for it, and the results in its outbox; the same for every replica it
ran for another site, until a re-plan hands the replica to a new owner at the
switch time (the new owner takes the windows starting at or after it). So a
spoke ``D`` killed at ``t`` destroys, for each source site ``S`` whose
replicas it ran (``S = D`` included), the records of ``S`` with an event time
from ``t - lookback`` (windows still open, results not yet delivered) to the
switch of the last of those replicas away from ``D`` (for ever if none
moved). :mod:`simulate.checking` excuses the results that depend on them.
A spoke revoked at the hub (``revoke``) counts alike: its agent runs on, but
the brokers refuse what it sends from then on.

An agent behind its input (a busy machine) may still hold older results: so
the records lost start no later than the longest window before what the
hub's plan history says the dead site had delivered (a move's
``at_risk_from``, from its heartbeats: every result before it).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Destroyed:
    """The records of source site ``source`` with event time in ``[start, end)``, lost with dead site ``dead``."""

    source: str
    start: float
    end: float
    dead: str
    revoked: bool = False  # ``dead`` was revoked (its agent ran on, refused), not killed

    def covers(self, site: str, event_time: float) -> bool:
        """True if a record of ``site`` at ``event_time`` is among these."""
        return site == self.source and self.start <= event_time < self.end

    def describe(self, t0: float) -> str:
        """One line for the report, times relative to ``t0``."""
        end = "the end" if math.isinf(self.end) else f"{self.end - t0:.0f} s"
        why = f"refused with revoked {self.dead}" if self.revoked else f"lost with {self.dead}"
        return f"records of {self.source} from {self.start - t0:.0f} s to {end}: {why}"


def destroyed_by(
    kills: Mapping[str, float],
    placement: Mapping[str, Any] | None,
    sources: Iterable[str],
    windows: Mapping[str, float],
    revoked: Collection[str] = (),
) -> list[Destroyed]:
    """The records that the spokes in ``kills`` (site: wall-clock time killed or ``revoked``) destroyed.

    ``placement`` is the hub's ``GET /apps/<name>/placement`` answer at the end
    of the run (its replicas, handovers and history); ``sources`` are the sites
    that source the app's streams (a singleton replica reads them all);
    ``windows`` the length of each windowed operator, which sets how far back
    a dead site's open windows reach (:func:`lookback_of`).
    """
    out = []
    everyone = sorted(set(sources))
    for dead, killed in sorted(kills.items()):
        recovered = _recovered(placement, dead)
        hosted = {r: leaves for r, leaves in _hosted(placement, dead, killed).items() if r not in recovered}
        spans = [windows.get(r.partition("@")[0], 0.0) for r in hosted]
        start = min(killed - lookback_of(spans), _at_risk_from(placement, dead) - max(spans, default=0.0))
        ends: dict[str, float] = {dead: math.inf} if dead in everyone else {}
        for replica, leaves in hosted.items():
            _, _, home = replica.partition("@")
            for source in [home] if home else everyone:
                ends[source] = max(ends.get(source, killed), leaves)
        out += [Destroyed(source, start, end, dead, dead in revoked) for source, end in sorted(ends.items())]
    return out


def _recovered(placement: Mapping[str, Any] | None, site: str) -> set[str]:
    """The replicas moved away from dead ``site`` whose part their source site recomputed (``recovered_by``)."""
    history = (placement or {}).get("history", [])
    return {
        str(m["replica"])
        for h in history
        if isinstance(h, dict)
        for m in h.get("moved", [])
        if m.get("from") == site and m.get("recovered_by")
    }


def recoveries(kills: Iterable[str], placement: Mapping[str, Any] | None) -> set[tuple[str, str]]:
    """``(dead site, site that recomputed its part)`` for each move away from a site in ``kills`` that was recovered.

    ``kills`` are the sites whose agent was killed, for good or to come back
    after the re-plan around it. Sink values the dead site published after
    its last heartbeat come out a second time from the recovering site
    (:mod:`edge_agent.recovery`): :mod:`simulate.checking` counts such a
    pair of arrivals as *repeated*.
    """
    dead = set(kills)
    history = (placement or {}).get("history", [])
    return {
        (str(m["from"]), str(m["recovered_by"]))
        for h in history
        if isinstance(h, dict)
        for m in h.get("moved", [])
        if m.get("from") in dead and m.get("recovered_by")
    }


def _at_risk_from(placement: Mapping[str, Any] | None, site: str) -> float:
    """The earliest ``at_risk_from`` of the moves away from dead ``site`` in the plan history (inf: none)."""
    history = (placement or {}).get("history", [])
    return min(
        (
            float(m["at_risk_from"])
            for h in history
            if isinstance(h, dict)
            for m in h.get("moved", [])
            if m.get("from") == site and isinstance(m.get("at_risk_from"), int | float)
        ),
        default=math.inf,
    )


def _hosted(placement: Mapping[str, Any] | None, site: str, at: float) -> dict[str, float]:
    """The replicas ``site`` ran at time ``at``, each with when its records stop going there (inf: never)."""
    if not placement:
        return {}
    where = {str(a["replica"]): str(a["site"]) for a in placement.get("replicas", [])}
    history = [h for h in placement.get("history", []) if isinstance(h, dict)]
    later = [h for h in history if float(h.get("at", 0.0)) > at and h.get("changed", True)]
    for entry in sorted(later, key=lambda h: float(h.get("at", 0.0)), reverse=True):
        for move in entry.get("moved", []):
            where[str(move["replica"])] = str(move["from"])  # undo the moves made after ``at``
    switch = {
        str(h["replica"]): float(h["switch_at"]) for h in placement.get("handovers", []) if h.get("source") == site
    }
    hosted = {}
    for replica, host in where.items():
        if host != site:
            continue
        left = next(
            (
                float(h.get("at", 0.0))
                for h in sorted(later, key=lambda h: float(h.get("at", 0.0)))
                for m in h.get("moved", [])
                if m["replica"] == replica and m["from"] == site
            ),
            math.inf,
        )
        hosted[replica] = switch.get(replica, left)
    return hosted


def lookback_of(windows: Iterable[float], out_of_orderness: float = 1.0, delivery: float = 2.0) -> float:
    """Seconds before its death whose records a dead agent may still hold.

    Its longest window, its watermark delay (``out_of_orderness``, the agents'
    default) and the time to deliver a result (``delivery``).
    """
    return max(windows, default=0.0) + out_of_orderness + delivery
