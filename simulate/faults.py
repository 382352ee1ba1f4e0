"""Fault specifications: ``partition:<site>:<dur>@<t>``, ``kill-agent:<site>@<t>`` and the rest."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from spanedge.durations import parse_duration
from spanedge.errors import SpanEdgeError
from spanedge.sites import Sites, Tier

FORMS = (
    "partition:<site>:<duration>@<t>",
    "kill-agent:<spoke>@<t>",
    "restart-hub@<t>",
    "restart-broker:<site>@<t>",
    "latency:<site>:<ms>@<t>",
)


class InvalidFault(SpanEdgeError, ValueError):
    """A ``--fault`` specification is malformed or names an unknown site."""


class FaultKind(enum.StrEnum):
    """What a fault does."""

    PARTITION = "partition"
    KILL_AGENT = "kill-agent"
    RESTART_HUB = "restart-hub"
    RESTART_BROKER = "restart-broker"
    LATENCY = "latency"


@dataclass(frozen=True)
class Fault:
    """One fault: its kind, the site it hits, when (seconds after the sensors start) and its argument."""

    kind: FaultKind
    at: float
    site: str | None = None
    duration: float | None = None
    latency_ms: float | None = None
    text: str = ""

    def describe(self) -> str:
        """The specification it was parsed from."""
        return self.text or f"{self.kind}@{self.at}s"


def _bad(spec: str, why: str) -> InvalidFault:
    forms = "\n  ".join(FORMS)
    return InvalidFault(f"bad fault {spec!r}: {why}; the forms are:\n  {forms}\n(times like 15s, 500ms or 2m)")


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
    at = 0.0 if when.strip() in ("0", "0s") else _seconds(spec, "time", when)
    parts = head.split(":")
    try:
        kind = FaultKind(parts[0])
    except ValueError:
        raise _bad(spec, f"unknown fault {parts[0]!r}") from None
    expected = {
        FaultKind.PARTITION: 3,
        FaultKind.KILL_AGENT: 2,
        FaultKind.RESTART_HUB: 1,
        FaultKind.RESTART_BROKER: 2,
        FaultKind.LATENCY: 3,
    }[kind]
    if len(parts) != expected:
        form = next(f for f in FORMS if f.startswith(kind.value))
        raise _bad(spec, f"{kind.value} takes the form {form}")
    site = parts[1] if expected > 1 else None
    if site is not None and not site:
        raise _bad(spec, "empty site name")
    fault = Fault(kind=kind, at=at, site=site, text=spec.strip())
    if kind is FaultKind.PARTITION:
        fault = Fault(kind, at, site, duration=_seconds(spec, "duration", parts[2]), text=fault.text)
    elif kind is FaultKind.LATENCY:
        try:
            ms = float(parts[2].removesuffix("ms"))
        except ValueError:
            raise _bad(spec, f"latency must be milliseconds such as 150 or 150ms, got {parts[2]!r}") from None
        if ms < 0:
            raise _bad(spec, "latency must not be negative")
        fault = Fault(kind, at, site, latency_ms=ms, text=fault.text)
    if sites is not None and site is not None:
        if site not in sites.sites:
            raise _bad(spec, f"unknown site {site!r}; sites.yaml defines: {', '.join(sites.sites)}")
        if kind is FaultKind.KILL_AGENT and sites.sites[site].tier is not Tier.SPOKE:
            raise _bad(spec, f"site {site!r} is a hub and runs no agent; use restart-hub@<t>")
    return fault


def parse_faults(specs: Iterable[str], sites: Sites | None = None) -> list[Fault]:
    """Parse several faults, ordered by time."""
    return sorted((parse_fault(s, sites) for s in specs), key=lambda f: f.at)
