"""A watermark per site: the hub's windows wait for the slowest live site that feeds them.

Spark keeps one watermark per query, moved by every site's records. A site
held up (cut off, restarting, or its outbox draining a backlog) sends its
records after the other sites' later ones have moved that watermark past
their windows, and Spark would drop them as late.

So each agent announces, per app, its frontier: the event time below which
it sends the app nothing more (:meth:`spanedge.runtime.Pipeline.frontier`,
lowered to its oldest record still in the outbox). Its batches carry it
(``complete``, taken by the ingest once their records are in the log), and
so do its heartbeats (``complete``: ``{app: frontier}``, ``null`` for an app
whose input has been idle for :data:`edge_agent.telemetry.IDLE_AFTER_S`;
such a site holds nothing back until it sends again). The hub keeps the
highest frontier of each (app, site). While a site's latest heartbeat lists
an app, the app's hub windows do not read past that site's frontier: the
ingest holds back the sealed segments with a record at or after the lowest
one (:class:`hub.ingest.log.Hold`), so Spark's watermark stays below every record a
live site still owes. Once a site counts as gone (silent for the grace
period), it holds nothing back, with a warning: what it still owes comes late.

A site that never announces a frontier (an agent of an older release, or a
publisher of its own) holds nothing back, as before.

Heartbeats also say, per app, how far the site has delivered every result,
its local sinks' included (``delivered``): a site that dies for good takes
the results from there on with it (:func:`hub.control.plan_history.at_risk`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from functools import reduce
from typing import TYPE_CHECKING, Any

from spanedge.numbers import is_number

if TYPE_CHECKING:
    from spanedge.app import App
    from spanedge.operators import WindowSpec
    from spanedge.plan import Plan

log = logging.getLogger(__name__)

REPORT_FIELD = "complete"
"""The heartbeat and batch field with the sending site's frontier."""
DELIVERED_FIELD = "delivered"
"""The heartbeat field with the event time below which the site delivered every result of an app, sinks included."""
BEHIND_LOG_S = 5.0
"""A site whose frontier trails another's of the same app by more than this is logged as holding the app back."""


def window_grid(app: App, plan: Plan) -> float:
    """The grid every end of ``app``'s hub windows lies on, in seconds (0: none at the hub).

    Windows are aligned to the epoch, so a window's ends are its size past a
    multiple of its slide; a session's end lies a gap past a record, which
    the gap bounds as well. The grid is the greatest common divisor of
    those, to the millisecond.
    """
    spans = set()
    for spec in hub_windows(app, plan):
        for span in (spec.gap,) if spec.gap else (spec.size, spec.slide):
            if span:
                spans.add(max(1, round(span * 1000)))
    return reduce(math.gcd, spans) / 1000 if spans else 0.0


def hub_windows(app: App, plan: Plan) -> list[WindowSpec]:
    """The windows of ``app``'s operators that ``plan`` runs at the hub."""
    graph = app.graph()
    specs = (graph.op(a.operator).window for a in plan.assignments if a.site == plan.hub)
    return [spec for spec in specs if spec is not None]


def parse_report(beat: Mapping[str, Any], name: str = REPORT_FIELD) -> dict[str, float | None]:
    """The frontiers a heartbeat's field ``name`` lists: ``{app: frontier}``, None for an idle app; malformed skipped."""
    entries = beat.get(name)
    out: dict[str, float | None] = {}
    if not isinstance(entries, Mapping):
        return out
    for app, value in entries.items():
        if value is None:
            out[str(app)] = None
        elif is_number(value):
            out[str(app)] = float(value)
    return out


class SiteFrontiers:
    """Each site's frontier per app, and the event time from which an app's hub windows wait."""

    def __init__(self) -> None:
        """Start with no site known: nothing is held back."""
        self._lock = threading.Lock()
        self._complete: dict[tuple[str, str], float] = {}
        self._delivered: dict[tuple[str, str], float] = {}
        self._listed: dict[str, dict[str, bool]] = {}  # site -> {app: idle} from its latest heartbeat
        self._behind: set[tuple[str, str]] = set()  # (app, site) logged as holding the app's windows back
        self._gone: set[tuple[str, str]] = set()  # (app, site) logged as no longer waited for

    def advance(self, app: str, site: str, complete: float) -> None:
        """Take the frontier of a batch ``site`` sent for ``app`` (the highest one counts)."""
        with self._lock:
            key = (app, site)
            if complete > self._complete.get(key, -math.inf):
                self._complete[key] = complete
            apps = self._listed.get(site)
            if apps is not None and app in apps:
                apps[app] = False  # it sends again: no longer idle

    def observe(self, site: str, beat: Mapping[str, Any]) -> None:
        """Take the frontiers a heartbeat of ``site`` lists; an app it no longer lists is no longer waited for."""
        report = parse_report(beat)
        with self._lock:
            self._listed[site] = {app: value is None for app, value in report.items()}
            for app, value in report.items():
                if value is not None and value > self._complete.get((app, site), -math.inf):
                    self._complete[(app, site)] = value
            for app, value in parse_report(beat, DELIVERED_FIELD).items():
                if value is not None and value > self._delivered.get((app, site), -math.inf):
                    self._delivered[(app, site)] = value

    def delivered(self, app: str, site: str) -> float | None:
        """The event time below which ``site`` delivered every result of ``app``, its sinks' included.

        The highest it announced, or, from a site that announces none (an older
        agent), the highest frontier it announced; None if it announced neither.
        """
        with self._lock:
            return self._delivered.get((app, site), self._complete.get((app, site)))

    def frontiers(self, app: str) -> dict[str, float]:
        """The frontier of every site that holds ``app``'s windows back now (listed, not idle), gone or not."""
        with self._lock:
            return {
                site: self._complete[(app, site)]
                for site, apps in self._listed.items()
                if apps.get(app) is False and (app, site) in self._complete
            }

    def hold_from(self, app: str, gone: Callable[[str], bool]) -> float | None:
        """The event time from which ``app``'s hub windows wait for a site (the lowest live frontier), or None."""
        live = self.live(app, gone)
        return min(live.values()) if live else None

    def live(self, app: str, gone: Callable[[str], bool]) -> dict[str, float]:
        """The frontier of every site that holds ``app``'s hub windows back now and is not ``gone``.

        Which of the app's windows each one holds is :mod:`hub.handover.scope`'s question.
        """
        known = self.frontiers(app)
        live = {site: f for site, f in known.items() if not gone(site)}
        self._log_changes(app, known, live)
        return live

    def _log_changes(self, app: str, known: dict[str, float], live: dict[str, float]) -> None:
        """Log a site starting or ceasing to hold ``app``'s windows back, and one no longer waited for as gone."""
        for site in sorted(known.keys() - live.keys()):
            if (app, site) not in self._gone:
                self._gone.add((app, site))
                log.warning(
                    "app %s: the hub's windows stop waiting for %s (gone): its records before %.3f not yet "
                    "received will come late",
                    app,
                    site,
                    known[site],
                )
        self._gone -= {(a, s) for a, s in self._gone if a == app and s in live}
        lead = max(live.values(), default=-math.inf)
        for site, f in sorted(live.items()):
            behind = lead - f
            if behind > BEHIND_LOG_S and (app, site) not in self._behind:
                self._behind.add((app, site))
                log.info(
                    "app %s: the hub's windows wait for %s: its records are complete up to %.3f, %.1f s behind",
                    app,
                    site,
                    f,
                    behind,
                )
            elif behind <= BEHIND_LOG_S / 2 and (app, site) in self._behind:
                self._behind.discard((app, site))
                log.info("app %s: %s has caught up with the other sites", app, site)
        self._behind -= {(a, s) for a, s in self._behind if a == app and s not in live}
