"""Holding a hub window's later records back while the old owner of a moved replica still owes it earlier ones.

Spark keeps one watermark per query, moved by every site's records. When a
replica moves away from a spoke at switch time T, its old owner finishes
the windows before T and sends their results; if it is held up (restarting,
or cut off across T), the other sites' records from T on move the hub
window's watermark past the windows those results belong to, and Spark
drops them as late.

So while the plan lists such a handover and its old owner has not
delivered its part, the hub's ingest holds the app's sealed log segments
that contain a record at or after T back from the queries that run a window
(:class:`hub.ingest.log.Hold`): their watermark stays below T. The old owner says
when its part is done: once it drops the replicas it handed over, its
heartbeats list each of them with the last sequence number it gave each
stream it sent for them (``handed_over``, :func:`parse_reports`). The hold
ends when the log holds every one of those records, and the held segments
reach the window queries together, the owed records among them, so one
micro-batch reads them all.

When the old owner is gone for good and the replica's source site
recomputes its part (``Handover.recoverer``, :mod:`edge_agent.recovery`),
the hold waits for that site's report instead, from ``recover_from`` on,
and twice as long (:data:`RECOVERY_LIMIT_FACTOR`), counted from the switch
or, for a recovery planned after it, from when the hub first saw it.

The hold also ends, with a warning, when the site that owes the part is gone (silent for
the grace period: what it held is lost with it) or ``limit_s`` after T
(:data:`DEFAULT_LIMIT_S`; ``spanedge hub --handover-wait``): the hub's
windows then come out without what is still owed, as before. Only a
handover whose old owner is a spoke that no longer runs the replica holds
anything: a spoke that keeps some of a split replica's keys never drops it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from spanedge.plan import Handover, Plan

log = logging.getLogger(__name__)

REPORT_FIELD = "handed_over"
"""The heartbeat field listing the handovers whose part the sending site has finished."""
DEFAULT_LIMIT_S = 30.0
"""How long after a switch the hub waits at most for its old owner's last records."""
RECOVERY_LIMIT_FACTOR = 2
"""A part recomputed for a gone old owner is waited for this many times as long (its source site reads it all first)."""

#: (site, stream, epoch, last seq): the last record of one stream an old owner sent for its part.
Sent = tuple[str, str, int, int]
#: The last ``seq`` of a (site, stream, epoch) an app's log holds, or None (:meth:`hub.ingest.consumer.Ingest.mark`).
Mark = Callable[[str, str, int], int | None]


def parse_reports(beat: Mapping[str, Any]) -> dict[tuple[str, str, float], tuple[Sent, ...]]:
    """The finished handover parts a heartbeat lists: ``{(app, replica, switch_at): sent}``; malformed entries skipped."""
    out: dict[tuple[str, str, float], tuple[Sent, ...]] = {}
    entries = beat.get(REPORT_FIELD)
    if not isinstance(entries, list):
        return out
    for entry in entries:
        try:
            key = (str(entry["app"]), str(entry["replica"]), float(entry["switch_at"]))
            out[key] = tuple((str(s[0]), str(s[1]), int(s[2]), int(s[3])) for s in entry["sent"])
        except (KeyError, TypeError, ValueError, IndexError):
            continue
    return out


def owner_of(h: Handover) -> str:
    """The site that owes a handover's part: its old owner, or the site recomputing it for a gone one."""
    return h.recoverer if h.recoverer is not None else h.source


def start_of(h: Handover) -> float:
    """The earliest event time a handover's part still owes: the switch, or where a recovery starts."""
    return h.recover_from if h.recover_from is not None and h.recoverer is not None else h.switch_at


class HandoverHolds:
    """What each app's hub windows wait for: the old owners' reports, and when to stop waiting.

    ``clock`` gives the time switches are compared with (epoch seconds).
    """

    def __init__(self, limit_s: float = DEFAULT_LIMIT_S, clock: Callable[[], float] = time.time) -> None:
        """Wait at most ``limit_s`` after a switch."""
        self.limit_s = limit_s
        self._clock = clock
        self._lock = threading.Lock()
        self._reports: dict[tuple[str, str, float, str], tuple[Sent, ...]] = {}
        self._given_up: set[tuple[str, str, float, str]] = set()
        self._owed: set[tuple[str, str, float, str]] = set()
        self._delivered: set[tuple[str, str, float, str]] = set()
        self._untaken: list[tuple[str, str, str, float]] = []  # (app, replica, old owner, when delivered)
        #: where each owed part starts (a recovery's earlier), and when it was first owed
        self._starts: dict[tuple[str, str, float, str], float] = {}
        self._first_seen: dict[tuple[str, str, float, str], float] = {}

    def observe(self, site: str, beat: Mapping[str, Any]) -> None:
        """Take the finished handover parts a heartbeat of ``site`` lists."""
        reports = parse_reports(beat)
        if not reports:
            return
        with self._lock:
            for (app, replica, switch), sent in reports.items():
                self._reports[(app, replica, switch, site)] = sent

    def owed(self, plan: Plan, mark: Mark, gone: Callable[[str], bool]) -> list[Handover]:
        """The handovers of ``plan`` whose old owner has not delivered its part yet and may still.

        Args:
            plan: the app's plan in force.
            mark: the last ``seq`` the app's log holds of a (site, stream, epoch).
            gone: whether a site is gone for good.
        """
        now = self._clock()
        owed: list[Handover] = []
        given_up: dict[tuple[float, str, str], list[str]] = {}
        listed = set()
        for h in plan.handovers:
            if h.source == plan.hub or h.source in {owner for _, _, owner, _ in plan.owners(h.replica)}:
                continue
            owner = owner_of(h)
            key = (plan.app, h.replica, h.switch_at, owner)
            listed.add(key)
            with self._lock:
                sent = self._reports.get(key)
            if sent is not None and all((mark(site, stream, epoch) or 0) >= seq for site, stream, epoch, seq in sent):
                with self._lock:
                    if key not in self._delivered:
                        self._delivered.add(key)
                        self._untaken.append((plan.app, h.replica, h.source, now))
                continue
            limit = self.limit_s * (RECOVERY_LIMIT_FACTOR if h.recoverer is not None else 1)
            since = h.switch_at
            if h.recoverer is not None:  # a recovery may be planned long after the switch: counted from then
                with self._lock:
                    since = max(since, self._first_seen.setdefault(key, now))
            if gone(owner) or now > since + limit:
                if key not in self._given_up:
                    self._given_up.add(key)
                    why = f"{owner} is gone" if gone(owner) else self._past_limit(limit)
                    given_up.setdefault((h.switch_at, owner, why), []).append(h.replica)
                continue
            owed.append(h)
        for (switch, site, why), replicas in given_up.items():
            log.warning(
                "app %s: the hub's windows no longer wait for %s's last records of %s (switch %.3f): %s",
                plan.app,
                site,
                ", ".join(sorted(replicas)),
                switch,
                why,
            )
        with self._lock:
            self._starts.update({(plan.app, h.replica, h.switch_at, owner_of(h)): start_of(h) for h in owed})
        self._log_changes(plan.app, {(plan.app, h.replica, h.switch_at, owner_of(h)) for h in owed}, now)
        with self._lock:  # reports of handovers the plan no longer lists are done with
            for stale in [k for k in self._reports if k[0] == plan.app and k not in listed]:
                del self._reports[stale]
            self._delivered -= {k for k in self._delivered if k[0] == plan.app and k not in listed}
            for stale in [k for k in self._first_seen if k[0] == plan.app and k not in listed]:
                del self._first_seen[stale]
        return owed

    def delivered(self, app: str, h: Handover) -> bool:
        """Whether the hub's log holds everything the old owner of handover ``h`` of ``app`` said it owed."""
        with self._lock:
            return (app, h.replica, h.switch_at, h.source) in self._delivered

    def take_delivered(self) -> list[tuple[str, str, str, float]]:
        """The handovers found delivered since the last call: (app, replica, old owner, when the hub had it all)."""
        with self._lock:
            taken, self._untaken = self._untaken, []
            return taken

    def _past_limit(self, limit: float) -> str:
        """Why the windows stop waiting for a live old owner, and how to wait longer."""
        return f"{limit:g} s after the switch (spanedge hub --handover-wait SECONDS waits longer)"

    def _log_changes(self, app: str, owed: set[tuple[str, str, float, str]], now: float) -> None:
        """Log the handovers of ``app`` the hub's windows start waiting for, or stop waiting for as delivered."""
        before = {k for k in self._owed if k[0] == app}
        delivered = before - owed - self._given_up
        for keys, text in (
            (owed - before, "from {switch:.3f} on, the hub's windows wait for {site}'s last records of"),
            (delivered, "{ago:.1f} s after the switch, the hub's windows have {site}'s last records of"),
        ):
            groups: dict[tuple[float, str], list[str]] = {}
            for key in sorted(keys):
                groups.setdefault((key[2], key[3]), []).append(key[1])
            for (switch, site), replicas in groups.items():
                start = min(self._starts.get((app, r, switch, site), switch) for r in replicas)
                line = text.format(switch=start, site=site, ago=now - switch)
                log.info("app %s: %s %s", app, line, ", ".join(replicas))
        self._owed = (self._owed - before) | owed

    def hold_from(self, plan: Plan, mark: Mark, gone: Callable[[str], bool]) -> float | None:
        """The event time from which ``plan``'s hub windows wait (the earliest owed switch, or recovery start), or None."""
        start = min((start_of(h) for h in self.owed(plan, mark, gone)), default=math.inf)
        return None if math.isinf(start) else start
