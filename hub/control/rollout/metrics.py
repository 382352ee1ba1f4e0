"""What a gate measures: one value per site from the heartbeats it sent in a stage's hold window.

* ``dead_letter_rate``: the app's dead letters (``counters[app].dlq``) per record
  the app's sources took in; the limit a fraction (``0.01``) or a percentage (``1%``).
* ``late_rate``: the app's late records (``counters[app].late``) per record taken in; the same limits.
* ``errors``: the app's operator errors (``counters[app].errors``: records a
  user's function raised on) per minute; ``5`` or ``5/min``.
* ``hub_errors``: the records from the site that the app's operators at the
  hub raised on (:class:`HubErrors`), per minute; ``5`` or ``5/min``.
* ``cpu``: the agent's mean CPU use (``cpu_percent``) as a share of the site's
  CPU budget; ``0.8`` or ``80%``.
* ``rss``: the agent's largest resident memory (``rss_bytes``); ``200MB``,
  ``1.5GiB`` or a number of bytes (kB, MB, GB are powers of 1000, KiB, MiB, GiB of 1024).
* ``outbox_backlog``: the most records waiting in the outbox (``outbox.records``).
* ``watermark_lag``: the largest watermark lag (``watermark_lag_s``); ``5s``,
  ``500ms`` or a number of seconds (:func:`spanedge.durations.parse_duration`).

A rate divides counter increases between the first and the last heartbeat of
the window (a counter that went down, its agent restarted, counts from zero
again), never one heartbeat's numbers; it needs two heartbeats, and is 0 when
the site took no record in and dead-lettered none. A heartbeat of an agent that
counts no app on its own (one older than ``counters``) gives the site's
counters (``dlq``, ``late``) instead, every app's together. ``errors`` divides
the increase by the minutes between the first and the last heartbeat
reporting it (the hub's clock); it has no site-wide fallback. The records taken in are
the ``in`` counts of the app's source replicas at the site (``<stream>@<site>``,
``<app>/<stream>@<site>`` when the site runs several apps). The CPU budget is
the one the site reports (``cpu_budget``), else its declared ``cpu``. A gauge
no heartbeat of the window reports (no watermark yet) has no value and passes.

``hub_errors`` reads no heartbeat: the rollout runner samples the hub's own
counts by origin site (:attr:`Context.hub_errors`) as it ticks, and the metric
divides their increase by the minutes between the first and the last sample
of the window, as ``errors`` does with heartbeats.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from spanedge.durations import parse_duration
from spanedge.wire.heartbeat import Heartbeat


@dataclass(frozen=True)
class Beat:
    """A heartbeat as the hub received it: its site, the hub's clock then, and the heartbeat."""

    site: str
    at: float
    heartbeat: Heartbeat


@dataclass(frozen=True)
class Context:
    """What the gates of an app need besides heartbeats.

    Attributes:
        app: the app's name.
        sources: the app's source streams (their replicas' ``in`` counts are the records taken in).
        cpu: each site's declared CPU cores (``sites.yaml``), for a site that reports no budget.
        hub_errors: per site, the hub's count of the app's operator errors on its records, sampled
            ``(the hub's clock, count)`` in order (None: the hub counts none).
    """

    app: str
    sources: frozenset[str] = frozenset()
    cpu: Mapping[str, float] = field(default_factory=dict)
    hub_errors: Mapping[str, Sequence[tuple[float, float]]] | None = None

    def window(self, start: float, end: float) -> Context:
        """This context with only the hub's samples taken from ``start`` to ``end``."""
        if self.hub_errors is None:
            return self
        kept = {site: [s for s in got if start <= s[0] <= end] for site, got in self.hub_errors.items()}
        return dataclasses.replace(self, hub_errors=kept)


class HubErrors(Protocol):
    """The hub's counts of the records its operators raised on (:data:`hub.engine.dead_letters.OPERATOR_ERRORS`)."""

    def counts(self, app: str) -> Mapping[str, int]:
        """``app``'s counts so far by origin site; they only grow, but start from zero when the hub does."""
        ...


@dataclass(frozen=True)
class Reading:
    """One site's value of a metric over a window.

    Attributes:
        value: the value (None: none could be measured).
        note: why there is no value, or what qualifies it, for people.
        fails: no value, and the gate fails for it whatever its limit.
    """

    value: float | None
    note: str = ""
    fails: bool = False


class Kind(enum.StrEnum):
    """How a metric's limit is written and its values are shown."""

    RATIO = "ratio"  # 0.01 or 1%
    SHARE = "share"  # of the CPU budget: 0.8 or 80%
    BYTES = "bytes"
    RECORDS = "records"
    SECONDS = "seconds"
    PER_MINUTE = "per minute"


@dataclass(frozen=True)
class Metric:
    """A gate's metric: its name, how its limit is written and how a site's value is measured."""

    name: str
    kind: Kind
    measure: Callable[[Sequence[Beat], str, Context], Reading]
    doc: str

    def limit(self, text: str) -> float:
        """The limit ``text`` means for this metric; raise ``ValueError`` saying how to write one."""
        return _LIMITS[self.kind](text)

    def show(self, value: float | None, *, short: bool = False) -> str:
        """A value of this metric for people (``short``: a share without what it is a share of)."""
        if value is None:
            return "none"
        if self.kind is Kind.RATIO or (self.kind is Kind.SHARE and short):
            return f"{100 * value:.3g}%"
        if self.kind is Kind.SHARE:
            return f"{100 * value:.3g}% of the CPU budget"
        if self.kind is Kind.BYTES:
            return _show_bytes(value)
        if self.kind is Kind.RECORDS:
            return f"{value:g} records"
        if self.kind is Kind.PER_MINUTE:
            return f"{round(value, 2):g}/min"
        return f"{value:.3g} s"


def increase(values: Sequence[float]) -> float:
    """How much a counter grew over ``values``, in order; a drop (a restart) counts from zero again."""
    return sum(b - a if b >= a else b for a, b in itertools.pairwise(values))


def records_in(beat: Heartbeat, site: str, context: Context) -> int:
    """The records the app's sources at ``site`` took in, as ``beat`` counts them."""
    total = 0
    for stream in context.sources:
        for replica in (f"{stream}@{site}", f"{context.app}/{stream}@{site}"):
            total += int(beat.operators.get(replica, {}).get("in", 0))
    return total


def app_count(beat: Heartbeat, counter: str, app: str) -> int | None:
    """``app``'s own ``counter`` in ``beat`` (None: the heartbeat does not count it for the app)."""
    return beat.counters.get(app, {}).get(counter)


def _counted(beats: Sequence[Beat], counter: str, app: str) -> tuple[list[tuple[Heartbeat, float]], str]:
    """The heartbeats with the app's ``counter``, else (an older agent's) with the site's, and a note saying which."""
    own = [(b.heartbeat, float(n)) for b in beats if (n := app_count(b.heartbeat, counter, app)) is not None]
    if own:
        return own, ""
    site = [(b.heartbeat, float(n)) for b in beats if (n := getattr(b.heartbeat, counter)) is not None]
    return site, "every app's at the site: the agent counts none per app" if site else ""


def _rate(counter: str, what: str) -> Callable[[Sequence[Beat], str, Context], Reading]:
    def measure(beats: Sequence[Beat], site: str, context: Context) -> Reading:
        counted, note = _counted(beats, counter, context.app)
        if len(counted) < 2:
            why = "one heartbeat" if counted else f"no heartbeat reporting {counter!r}"
            return Reading(None, f"{why} in the window: no counter increase to divide", fails=True)
        bad = increase([n for _, n in counted])
        taken = increase([float(records_in(h, site, context)) for h, _ in counted])
        if taken > 0:
            return Reading(bad / taken, note)
        if bad > 0:
            return Reading(None, f"{bad:g} {what} but no record taken in", fails=True)
        return Reading(0.0, "; ".join(n for n in ("no record taken in", note) if n))

    return measure


def _per_minute(counter: str) -> Callable[[Sequence[Beat], str, Context], Reading]:
    def measure(beats: Sequence[Beat], site: str, context: Context) -> Reading:
        counted = [(b.at, float(n)) for b in beats if (n := app_count(b.heartbeat, counter, context.app)) is not None]
        minutes = (counted[-1][0] - counted[0][0]) / 60 if counted else 0.0
        if minutes <= 0:
            if not counted:
                why = f"no heartbeat counting app {context.app!r}'s {counter!r}"
                tail = " (an agent older than the hub counts none; upgrade it or drop the gate)"
            else:
                why, tail = "one heartbeat" if len(counted) == 1 else "heartbeats received at one time only", ""
            return Reading(None, f"{why} in the window: no counter increase per minute{tail}", fails=True)
        return Reading(increase([n for _, n in counted]) / minutes)

    return measure


def _hub_errors(beats: Sequence[Beat], site: str, context: Context) -> Reading:
    if context.hub_errors is None:
        why = "the hub counts no operator errors: it runs without Spark (--no-spark); drop the gate"
        return Reading(None, why, fails=True)
    samples = context.hub_errors.get(site, ())
    minutes = (samples[-1][0] - samples[0][0]) / 60 if samples else 0.0
    if minutes <= 0:
        why = "one sample" if len(samples) == 1 else "no sample" if not samples else "samples at one time only"
        return Reading(None, f"{why} of the hub's counts in the window: no increase per minute", fails=True)
    return Reading(increase([n for _, n in samples]) / minutes)


def _cpu(beats: Sequence[Beat], site: str, context: Context) -> Reading:
    shares = []
    for b in beats:
        h = b.heartbeat
        if h.cpu_percent is None:
            continue
        budget = h.cpu_budget if h.cpu_budget else context.cpu.get(site, 1.0)
        shares.append(h.cpu_percent / 100 / budget)
    return Reading(sum(shares) / len(shares)) if shares else Reading(None, "not reported")


def _largest(read: Callable[[Heartbeat], float | None]) -> Callable[[Sequence[Beat], str, Context], Reading]:
    def measure(beats: Sequence[Beat], site: str, context: Context) -> Reading:
        values = [v for b in beats if (v := read(b.heartbeat)) is not None]
        return Reading(float(max(values))) if values else Reading(None, "not reported")

    return measure


def _backlog(h: Heartbeat) -> float | None:
    records = h.outbox.get("records")
    return None if records is None else float(records)


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("dead_letter_rate", Kind.RATIO, _rate("dlq", "dead letters"), "dead letters per record taken in"),
        Metric("late_rate", Kind.RATIO, _rate("late", "late records"), "late records per record taken in"),
        Metric("errors", Kind.PER_MINUTE, _per_minute("errors"), "operator errors per minute"),
        Metric("hub_errors", Kind.PER_MINUTE, _hub_errors, "hub operator errors on the site's records per minute"),
        Metric("cpu", Kind.SHARE, _cpu, "the agent's mean CPU use as a share of the site's CPU budget"),
        Metric("rss", Kind.BYTES, _largest(lambda h: h.rss_bytes), "the agent's largest resident memory"),
        Metric("outbox_backlog", Kind.RECORDS, _largest(_backlog), "the most records waiting in the outbox"),
        Metric("watermark_lag", Kind.SECONDS, _largest(lambda h: h.watermark_lag_s), "the largest watermark lag"),
    )
}
"""The metrics a gate can name."""


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        msg = f"expected a number at least 0, got {text!r}"
        raise ValueError(msg)
    return value


def _fraction(text: str) -> float:
    percent = text.endswith("%")
    try:
        value = _number(text[:-1].strip() if percent else text)
    except ValueError:
        msg = f"expected a fraction such as 0.01 or a percentage such as 1%, got {text!r}"
        raise ValueError(msg) from None
    return value / 100 if percent else value


_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_BYTES = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)")


def _bytes(text: str) -> float:
    match = _BYTES.fullmatch(text)
    unit = match.group(2).lower() if match is not None else None
    if match is None or unit not in _BYTE_UNITS:
        msg = f"expected a size such as 200MB, 1.5GiB or a number of bytes, got {text!r}"
        raise ValueError(msg)
    return float(match.group(1)) * _BYTE_UNITS[unit]


def _records(text: str) -> float:
    try:
        return _number(text)
    except ValueError:
        msg = f"expected a number of records such as 1000, got {text!r}"
        raise ValueError(msg) from None


def _per_minute_limit(text: str) -> float:
    number = text[: -len("/min")].strip() if text.endswith("/min") else text
    try:
        return _number(number)
    except ValueError:
        msg = f"expected a number per minute such as 5 or 5/min, got {text!r}"
        raise ValueError(msg) from None


_LIMITS: dict[Kind, Callable[[str], float]] = {
    Kind.RATIO: _fraction,
    Kind.SHARE: _fraction,
    Kind.BYTES: _bytes,
    Kind.RECORDS: _records,
    Kind.SECONDS: parse_duration,
    Kind.PER_MINUTE: _per_minute_limit,
}


def _show_bytes(value: float) -> str:
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:g} B"
