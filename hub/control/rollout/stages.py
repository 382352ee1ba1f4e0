"""The stage spec of a staged rollout: ``"kind=truck:1, kind=truck:25%, *"``.

The grammar (:data:`GRAMMAR`)::

    stages   = stage { "," stage }
    stage    = selector [ ":" amount ] | amount | "*"
    selector = label { "+" label }            every label must match
    label    = key "=" value                  the site label rule (spanedge.names)
    amount   = count | percent
    count    = digits                         at least 1
    percent  = number "%"                     more than 0, at most 100

A stage's amount counts the sites its selector matches, the ones earlier
stages changed included: ``kind=truck:25%`` after ``kind=truck:1`` brings the
new version to a quarter of the trucks in all, not to a quarter more. A
selector without an amount means all of its sites, an amount without a
selector counts every site, and ``*`` is every site left. The last stage is
``*`` and only the last is, so every rollout ends with the whole fleet on the
new version. Spaces around the parts are ignored.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from spanedge.errors import InvalidRollout
from spanedge.names import label_problem
from spanedge.sites import Sites

#: The fleet a rollout selects from: each site's name and its labels.
Fleet = Mapping[str, Mapping[str, str]]

GRAMMAR = (
    "stages separated by ',', each SELECTOR[:AMOUNT], AMOUNT or '*' (the last stage, and only it); "
    "SELECTOR is KEY=VALUE, several joined by '+' (all must match); AMOUNT is a count (3) or a percentage (25%) "
    "of the sites SELECTOR matches, the earlier stages' included; e.g. 'kind=truck:1, kind=truck:25%, *'"
)

_COUNT = re.compile(r"[0-9]+")
_PERCENT = re.compile(r"([0-9]+(?:\.[0-9]+)?)%")


@dataclass(frozen=True)
class Stage:
    """One stage: which sites it selects and how many of them run the new version once it is done.

    Attributes:
        selector: the ``(key, value)`` labels a site must all have, by key (empty: every site).
        count: how many of the matching sites (None: see ``percent``).
        percent: which share of the matching sites, in percent, rounded up (None with no ``count``: all).
        rest: the stage is ``*``: every site left.
    """

    selector: tuple[tuple[str, str], ...] = ()
    count: int | None = None
    percent: Fraction | None = None
    rest: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a site with ``labels`` is one this stage selects from."""
        return all(labels.get(key) == value for key, value in self.selector)

    def target(self, matching: int) -> int:
        """How many of the ``matching`` sites run the new version after this stage.

        A percentage is rounded up, so a stage whose selector matches a site
        brings the new version to at least one; a count above ``matching``
        takes them all.
        """
        if self.count is not None:
            return min(self.count, matching)
        if self.percent is not None:
            return min(matching, math.ceil(self.percent * matching / 100))
        return matching

    def __str__(self) -> str:
        """The stage as the grammar writes it."""
        if self.rest:
            return "*"
        selector = "+".join(f"{k}={v}" for k, v in self.selector)
        amount = str(self.count) if self.count is not None else _percent_text(self.percent)
        return f"{selector}:{amount}" if selector and amount else selector or amount


def fleet_of(sites: Sites, only: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    """The spokes of ``sites`` with their labels: those in ``only`` if given (the sites an app runs on)."""
    wanted = None if only is None else set(only)
    return {s.name: dict(s.labels) for s in sites.spokes if wanted is None or s.name in wanted}


def format_stages(stages: Iterable[Stage]) -> str:
    """The stages as :func:`parse_stages` reads them back."""
    return ", ".join(str(s) for s in stages)


def parse_stages(text: str, fleet: Fleet | None = None, where: str = "rollout stages") -> tuple[Stage, ...]:
    """Parse a stage spec; with ``fleet``, check that every selector matches one of its sites.

    Args:
        text: the spec, e.g. ``"kind=truck:1, kind=truck:25%, *"``.
        fleet: the sites the rollout changes, with their labels (None: the syntax only).
        where: what the spec is, for messages (``--rollout``).

    Raises:
        InvalidRollout: a stage is malformed, ``*`` is not the last stage, or a selector matches no site of
            ``fleet``; the message names the stage, the labels the fleet has and the grammar.
    """
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        msg = f"{where} {text!r} is empty; give {GRAMMAR}"
        raise InvalidRollout(msg)
    stages = tuple(_stage(part, i, len(parts), text, where) for i, part in enumerate(parts, 1))
    if fleet is not None:
        if not fleet:
            msg = f"{where} {text!r}: the rollout has no site to change (the app runs on no spoke)"
            raise InvalidRollout(msg)
        for i, (stage, part) in enumerate(zip(stages, parts, strict=True), 1):
            if stage.selector and not any(stage.matches(labels) for labels in fleet.values()):
                wanted = " and ".join(f"{k}={v}" for k, v in stage.selector)
                msg = f"{where} {text!r}: stage {i} {part!r}: no site has {wanted}; {_known_labels(fleet)}"
                raise InvalidRollout(msg)
    return stages


def _stage(part: str, i: int, n: int, text: str, where: str) -> Stage:
    def bad(why: str) -> InvalidRollout:
        shown = f"stage {i} {part!r}" if part else f"stage {i}"
        return InvalidRollout(f"{where} {text!r}: {shown} {why}; give {GRAMMAR}")

    if not part:
        msg = "is empty"
        raise bad(msg)
    if part == "*":
        if i != n:
            msg = "is '*' (every site left) but is not the last stage"
            raise bad(msg)
        return Stage(rest=True)
    if i == n:
        msg = "is the last stage but is not '*'; end the stages with '*' so that every site gets the version"
        raise bad(msg)
    selector_text, colon, amount_text = part.rpartition(":") if ":" in part else ("", "", part)
    if "=" not in amount_text and not colon:
        return _amount(amount_text.strip(), bad)
    if not colon:
        selector_text, amount_text = amount_text, ""
    selector = _selector(selector_text.strip(), bad)
    if not colon:
        return Stage(selector=selector)
    amount = _amount(amount_text.strip(), bad)
    return Stage(selector=selector, count=amount.count, percent=amount.percent)


def _selector(text: str, bad: Callable[[str], InvalidRollout]) -> tuple[tuple[str, str], ...]:
    if not text:
        msg = "has ':' but no selector before it"
        raise bad(msg)
    pairs: dict[str, str] = {}
    for term in (t.strip() for t in text.split("+")):
        key, eq, value = term.partition("=")
        key, value = key.strip(), value.strip()
        if not eq:
            raise bad(f"has {term!r}, not a KEY=VALUE label" if term else "has an empty label around '+'")
        problem = label_problem(key, value)
        if problem is not None:
            msg = f"has an invalid label: {problem}"
            raise bad(msg)
        if key in pairs and pairs[key] != value:
            msg = f"asks for {key}={pairs[key]} and {key}={value}; a site has one value per label"
            raise bad(msg)
        pairs[key] = value
    return tuple(sorted(pairs.items()))


def _amount(text: str, bad: Callable[[str], InvalidRollout]) -> Stage:
    if _COUNT.fullmatch(text):
        if int(text) < 1:
            msg = "asks for 0 sites; a count is at least 1"
            raise bad(msg)
        return Stage(count=int(text))
    match = _PERCENT.fullmatch(text)
    if match is None:
        raise bad(f"has amount {text!r}, neither a count (3) nor a percentage (25%)" if text else "has no amount")
    percent = Fraction(match.group(1))
    if not 0 < percent <= 100:
        msg = f"asks for {text}; a percentage is more than 0% and at most 100%"
        raise bad(msg)
    return Stage(percent=percent)


def _percent_text(percent: Fraction | None) -> str:
    if percent is None:
        return ""
    if percent.denominator == 1:
        return f"{percent.numerator}%"
    digits = 1
    while percent * 10**digits != int(percent * 10**digits):
        digits += 1
    return f"{float(percent):.{digits}f}%"


def _known_labels(fleet: Fleet) -> str:
    """The labels the sites of ``fleet`` have, with how many sites have each, for a message."""
    counts = Counter(f"{k}={v}" for labels in fleet.values() for k, v in labels.items())
    if not counts:
        return f"none of its {len(fleet)} sites has a label (spanedge site add --labels, or labels: in sites.yaml)"
    shown = ", ".join(f"{label} ({n} site{'s' if n > 1 else ''})" for label, n in sorted(counts.items()))
    return f"the sites have the labels {shown}"
