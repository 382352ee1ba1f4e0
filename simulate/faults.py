"""Fault specifications: ``partition:<site>:<dur>@<t>``, ``kill-agent:<site>@<t>`` and the rest.

``<t>`` is seconds after the sensors start, or a time relative to the first
re-plan that moves something: ``replan+3s`` (the hub's re-plan) or
``switch-2s`` / ``switch+2s`` (the switch time of the handovers it stamped).
With such a time the site may be ``old-owner`` or ``new-owner``: the source
or target of that re-plan's first handover. ``join:<spoke>@<t>`` enrols a spoke
of ``sites.yaml`` that the hub is not told of at the start (:mod:`simulate.joins`).
``drift:<spoke>:<field>:<shift>@<t>`` shifts a field of a spoke's sensor values
from ``t`` on (:mod:`simulate.drift`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from simulate.drift import Drift, parse_shift
from simulate.rollout_fault import FORM as DEPLOY_FORM
from simulate.rollout_fault import parse_deploy
from spanedge.durations import parse_duration
from spanedge.errors import SpanEdgeError
from spanedge.sites import Sites, Tier

FORMS = (
    "partition:<site>:<duration>@<t>",
    "kill-agent:<spoke>[:<downtime>]@<t>",
    "restart-hub@<t>",
    "kill-hub[:<downtime>]@<t>",
    "pause-hub:<duration>@<t>",
    "restart-broker:<site>@<t>",
    "latency:<site>:<ms>@<t>",
    "overload:<spoke>[:<factor>][:<duration>]@<t>",
    "kill-site:<spoke>@<t>",
    "revoke:<spoke>@<t>",
    "join:<spoke>@<t>",
    DEPLOY_FORM,
    "drift:<spoke>:<field>:<shift>@<t>",
)

#: Site names that stand for the source or target of the first handover (with a relative time only).
OLD_OWNER, NEW_OWNER = "old-owner", "new-owner"

#: How many times the CPU its agent uses an ``overload`` fault shrinks a spoke's budget to, by default.
DEFAULT_OVERLOAD_FACTOR = 4.0


class InvalidFault(SpanEdgeError, ValueError):
    """A ``--fault`` specification is malformed or names an unknown site."""


class Anchor(enum.StrEnum):
    """What a relative fault time counts from."""

    REPLAN = "replan"  # the hub's first re-plan after the sensors start that changed the placement
    SWITCH = "switch"  # the switch time (event time) of the handovers that re-plan stamped


class FaultKind(enum.StrEnum):
    """What a fault does."""

    PARTITION = "partition"
    KILL_AGENT = "kill-agent"
    RESTART_HUB = "restart-hub"
    KILL_HUB = "kill-hub"  # SIGKILL of the (leading) hub's process group, Spark included; started again
    PAUSE_HUB = "pause-hub"  # SIGSTOP of the (leading) hub's process group, SIGCONT after the duration
    RESTART_BROKER = "restart-broker"
    LATENCY = "latency"
    OVERLOAD = "overload"
    KILL_SITE = "kill-site"
    REVOKE = "revoke"
    JOIN = "join"
    DEPLOY = "deploy"
    DRIFT = "drift"


@dataclass(frozen=True)
class Fault:
    """One fault: its kind, the site it hits, when and its argument.

    ``at`` is seconds after the sensors start, or, with an ``anchor``, seconds
    after (negative: before) that moment of the run.
    """

    kind: FaultKind
    at: float
    site: str | None = None
    duration: float | None = None
    latency_ms: float | None = None
    factor: float | None = None
    anchor: Anchor | None = None
    text: str = ""
    field: str | None = None
    shift: float | None = None

    def describe(self) -> str:
        """The specification it was parsed from."""
        if self.text:
            return self.text
        return f"{self.kind}@{self.anchor}{self.at:+g}s" if self.anchor else f"{self.kind}@{self.at}s"


def _bad(spec: str, why: str) -> InvalidFault:
    forms = "\n  ".join(FORMS)
    return InvalidFault(
        f"bad fault {spec!r}: {why}; the forms are:\n  {forms}\n"
        "(times like 15s, 500ms or 2m after the sensors start, or replan+3s, switch-2s, switch+2s)"
    )


def _seconds(spec: str, label: str, value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise _bad(spec, f"{label}: {exc}") from None


def parse_fault(spec: str, sites: Sites | None = None) -> Fault:
    """Parse one fault; with ``sites``, check that the site exists and fits the fault."""
    head, sep, when = spec.strip().rpartition("@")
    if not sep or not head:
        raise _bad(spec, "missing '@<time>' (when the fault happens, after the sensors start)")
    at, anchor = _when(spec, when.strip())
    if head.startswith(f"{FaultKind.DEPLOY}:") or head == FaultKind.DEPLOY:
        return _deploy(spec, head, at, anchor)
    parts = head.split(":")
    try:
        kind = FaultKind(parts[0])
    except ValueError:
        raise _bad(spec, f"unknown fault {parts[0]!r}") from None
    expected = {
        FaultKind.PARTITION: 3,
        FaultKind.KILL_AGENT: 2,
        FaultKind.RESTART_HUB: 1,
        FaultKind.KILL_HUB: 1,
        FaultKind.PAUSE_HUB: 2,
        FaultKind.RESTART_BROKER: 2,
        FaultKind.LATENCY: 3,
        FaultKind.OVERLOAD: 2,
        FaultKind.KILL_SITE: 2,
        FaultKind.REVOKE: 2,
        FaultKind.JOIN: 2,
        FaultKind.DEPLOY: 2,
        FaultKind.DRIFT: 4,
    }[kind]
    fits = (
        len(parts) == expected
        or (kind is FaultKind.OVERLOAD and 2 <= len(parts) <= 4)
        or (kind is FaultKind.KILL_AGENT and len(parts) == 3)
        or (kind is FaultKind.KILL_HUB and len(parts) == 2)
    )
    if not fits:
        form = next(f for f in FORMS if f.startswith(kind.value))
        raise _bad(spec, f"{kind.value} takes the form {form}")
    site = parts[1] if len(parts) > 1 and kind not in _HUB_FAULTS else None
    if site is not None and not site:
        raise _bad(spec, "empty site name")
    if kind in (FaultKind.JOIN, FaultKind.DRIFT) and anchor is not None:
        raise _bad(spec, f"a {kind.value} happens at a time after the sensors start, such as {kind.value}:...@30s")
    if site in (OLD_OWNER, NEW_OWNER) and anchor is None:
        raise _bad(spec, f"{site!r} stands for a site of the first handover: give a time like switch+2s or replan+3s")
    fault = Fault(kind=kind, at=at, site=site, anchor=anchor, text=spec.strip())
    if kind in _HUB_FAULTS and len(parts) == 2:
        label = "duration" if kind is FaultKind.PAUSE_HUB else "downtime"
        fault = Fault(kind, at, None, duration=_seconds(spec, label, parts[1]), anchor=anchor, text=fault.text)
    elif kind is FaultKind.PARTITION or (kind is FaultKind.KILL_AGENT and len(parts) == 3):
        label = "duration" if kind is FaultKind.PARTITION else "downtime"
        fault = Fault(kind, at, site, duration=_seconds(spec, label, parts[2]), anchor=anchor, text=fault.text)
    elif kind is FaultKind.LATENCY:
        try:
            ms = float(parts[2].removesuffix("ms"))
        except ValueError:
            raise _bad(spec, f"latency must be milliseconds such as 150 or 150ms, got {parts[2]!r}") from None
        if ms < 0:
            raise _bad(spec, "latency must not be negative")
        fault = Fault(kind, at, site, latency_ms=ms, anchor=anchor, text=fault.text)
    elif kind is FaultKind.OVERLOAD:
        factor, duration = _overload(spec, parts[2:])
        fault = Fault(kind, at, site, duration=duration, factor=factor, anchor=anchor, text=fault.text)
    elif kind is FaultKind.DRIFT:
        try:
            name, shift = parse_shift(parts[2], parts[3])
        except ValueError as exc:
            raise _bad(spec, str(exc)) from None
        fault = Fault(kind, at, site, field=name, shift=shift, text=fault.text)
    if sites is not None and site is not None and not (anchor is not None and site in (OLD_OWNER, NEW_OWNER)):
        if site not in sites.sites:
            raise _bad(spec, f"unknown site {site!r}; sites.yaml defines: {', '.join(sites.sites)}")
        if kind in _AGENT_FAULTS and sites.sites[site].tier is not Tier.SPOKE:
            raise _bad(spec, f"site {site!r} is a hub and runs no agent; use restart-hub@<t>")
    return fault


def _deploy(spec: str, head: str, at: float, anchor: Anchor | None) -> Fault:
    """A ``deploy`` fault (:mod:`simulate.rollout_fault`): its text is parsed again when it is applied."""
    if anchor is not None:
        raise _bad(spec, "a deploy happens at a time after the sensors start, such as deploy:app_v2.py@20s")
    try:
        parse_deploy(head)
    except ValueError as exc:
        raise _bad(spec, str(exc)) from None
    return Fault(kind=FaultKind.DEPLOY, at=at, text=spec.strip())


_RELATIVE = re.compile(r"(?P<anchor>[a-z]+)\s*(?:(?P<sign>[+-])\s*(?P<offset>.+))?")


def _when(spec: str, when: str) -> tuple[float, Anchor | None]:
    """The time of a fault: seconds after the sensors start, or an offset from an :class:`Anchor`."""
    relative = _RELATIVE.fullmatch(when)
    if relative is None or relative["anchor"] not in tuple(Anchor):
        return (0.0 if when in ("0", "0s") else _seconds(spec, "time", when)), None
    offset = _seconds(spec, "offset", relative["offset"]) if relative["offset"] else 0.0
    return (-offset if relative["sign"] == "-" else offset), Anchor(relative["anchor"])


#: The faults of the hub's process: they take a duration, not a site.
_HUB_FAULTS = (FaultKind.KILL_HUB, FaultKind.PAUSE_HUB)

_AGENT_FAULTS = (
    FaultKind.KILL_AGENT,
    FaultKind.KILL_SITE,
    FaultKind.OVERLOAD,
    FaultKind.REVOKE,
    FaultKind.JOIN,
    FaultKind.DRIFT,
)


def _overload(spec: str, args: list[str]) -> tuple[float, float | None]:
    """The factor and duration of ``overload:<spoke>[:<factor>][:<duration>]``.

    A bare number is the factor; a number with a unit (``30s``) the duration.
    """
    factor, duration = DEFAULT_OVERLOAD_FACTOR, None
    for i, arg in enumerate(args):
        if arg.strip() and arg.strip()[-1].isalpha():
            if i != len(args) - 1:
                raise _bad(spec, "the duration comes last: overload:<spoke>:<factor>:<duration>@<t>")
            duration = _seconds(spec, "duration", arg)
            continue
        if i != 0:
            raise _bad(spec, f"{arg!r} after the factor must be a duration with a unit, such as 30s")
        try:
            factor = float(arg)
        except ValueError:
            raise _bad(spec, f"the factor must be a number such as 4, got {arg!r}") from None
        if not factor > 1:
            raise _bad(spec, f"the factor must be above 1 (the budget becomes 1/factor of the use), got {arg!r}")
    return factor, duration


def parse_faults(specs: Iterable[str], sites: Sites | None = None) -> list[Fault]:
    """Parse several faults, ordered by time: those after the sensors start, then those after a re-plan, a switch.

    Raises:
        InvalidFault: one is malformed, or a fault hits a spoke before it joins (see :func:`check_joins`).
    """
    faults = sorted((parse_fault(s, sites) for s in specs), key=fault_order)
    check_joins(faults)
    return faults


#: The faults plain anonymous brokers cannot show, and why.
NEED_SECURE_BROKERS = {
    FaultKind.REVOKE: "shows the brokers refusing a revoked site",
    FaultKind.JOIN: "enrols a site that logs in with the certificate the hub issues it",
}


def insecure_refusal(faults: Iterable[Fault]) -> str | None:
    """Why a run with ``--insecure-brokers`` cannot have ``faults`` (a ``revoke`` or a ``join``), or None."""
    faults = list(faults)
    for kind, why in NEED_SECURE_BROKERS.items():
        named = [f.describe() for f in faults if f.kind is kind]
        if named:
            return f"{', '.join(named)} {why}, which plain anonymous brokers cannot: drop --insecure-brokers"
    return None


def drifts(faults: Iterable[Fault]) -> list[Drift]:
    """The sensor drifts of ``drift`` faults."""
    return [
        Drift(f.site, f.field, f.shift, f.at)
        for f in faults
        if f.kind is FaultKind.DRIFT and f.site is not None and f.field is not None and f.shift is not None
    ]


def joining(faults: Iterable[Fault]) -> dict[str, float]:
    """The spokes that join mid-run (``join`` faults), with the time of their join."""
    return {f.site: f.at for f in faults if f.kind is FaultKind.JOIN and f.site is not None}


def check_joins(faults: Sequence[Fault]) -> None:
    """Refuse a spoke joining twice, and a fault that hits a joining spoke before its join or without a known time.

    Raises:
        InvalidFault: the message names both faults.
    """
    joins: dict[str, Fault] = {}
    for fault in faults:
        site = fault.site
        if fault.kind is not FaultKind.JOIN or site is None:
            continue
        if site in joins:
            raise _bad(fault.describe(), f"{site} already joins with {joins[site].describe()!r}")
        joins[site] = fault
    for fault in faults:
        join = joins.get(fault.site or "")
        if join is None or fault is join:
            continue
        if fault.anchor is not None or fault.at <= join.at:
            raise _bad(
                fault.describe(),
                f"{fault.site} joins only at {join.at:g}s ({join.describe()!r}); time this fault after it",
            )


def fault_order(fault: Fault) -> tuple[int, float]:
    """The sort key of a fault: its anchor (none, re-plan, switch), then its time."""
    rank = {None: 0, Anchor.REPLAN: 1, Anchor.SWITCH: 2}[fault.anchor]
    return rank, fault.at
