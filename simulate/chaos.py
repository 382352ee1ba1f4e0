"""A seeded random schedule of faults for a chaos run (``spanedge simulate --chaos SEED``).

:func:`chaos_faults` spreads faults over the run, one starting every
:data:`GAP_S` seconds on average, each drawn from the mix of
:data:`KINDS`: partitions, agent kills, broker restarts, latency drift
(a site's links slowed, then put back to what ``sites.yaml`` declares),
overloads, and the hub's leader killed or paused. Every fault heals before
the last :data:`QUIET_S` seconds, so that the run ends with every part up
and the results can be checked exactly; no spoke has two faults at once
and the hub at most one at a time. The same seed, sites and duration give
the same schedule, as ``--fault`` specifications the run then applies.
"""

from __future__ import annotations

import random

from spanedge.sites import Sites

#: The fault kinds of the mix and their weights (how often each is drawn).
KINDS: dict[str, int] = {
    "partition": 3,
    "kill-agent": 3,
    "restart-broker": 2,
    "latency": 3,
    "overload": 2,
    "kill-hub": 1,
    "pause-hub": 1,
}
#: Seconds between the starts of two faults, on average.
GAP_S = 20.0
#: Seconds before the first fault (the warm-up) and after the last one heals.
WARMUP_S = 30.0
QUIET_S = 45.0
#: The longest a fault lasts, in seconds.
LONGEST_S = 25.0


def chaos_faults(seed: int, sites: Sites, duration: float) -> list[str]:
    """The ``--fault`` specifications of chaos run ``seed`` over ``sites`` for ``duration`` seconds.

    Raises:
        ValueError: the run is too short for any fault (under warm-up + quiet + one fault), or has no spoke.
    """
    spokes = sorted(s.name for s in sites.spokes)
    if not spokes:
        msg = "a chaos run needs at least one spoke in sites.yaml"
        raise ValueError(msg)
    end = duration - QUIET_S
    if end - WARMUP_S < LONGEST_S:
        msg = f"a chaos run needs --duration of at least {WARMUP_S + LONGEST_S + QUIET_S:.0f}s (got {duration:g}s)"
        raise ValueError(msg)
    rng = random.Random(seed)
    busy_until = dict.fromkeys([*spokes, "hub"], 0.0)
    specs: list[str] = []
    at = WARMUP_S + rng.uniform(0, GAP_S / 2)
    while at < end - 5:
        kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        target = "hub" if kind in ("kill-hub", "pause-hub") else rng.choice(spokes)
        last = min(LONGEST_S, end - at)
        if busy_until[target] <= at and last >= 5:
            length = round(rng.uniform(5, last), 1)
            specs.extend(_fault(kind, target, at, length, sites))
            busy_until[target] = at + length + 5  # a part heals and settles before its next fault
        at += rng.uniform(GAP_S / 2, GAP_S * 1.5)
    return specs


def _fault(kind: str, site: str, at: float, length: float, sites: Sites) -> list[str]:
    """The specifications of one fault of ``kind`` at ``site`` from ``at`` for ``length`` seconds."""
    when = f"@{at:.1f}s"
    if kind in ("partition", "overload"):
        middle = "4:" if kind == "overload" else ""
        return [f"{kind}:{site}:{middle}{length:g}s{when}"]
    if kind == "kill-agent":
        return [f"kill-agent:{site}:{length:g}s{when}"]
    if kind == "restart-broker":
        return [f"restart-broker:{site}{when}"]
    if kind == "latency":
        declared = sites.default_link.latency_ms
        return [f"latency:{site}:{declared * 4:g}{when}", f"latency:{site}:{declared:g}@{at + length:.1f}s"]
    if kind == "kill-hub":
        return [f"kill-hub:{min(length, 10.0):g}s{when}"]
    return [f"pause-hub:{min(length, 10.0):g}s{when}"]
