"""Health gates: ``"dead_letter_rate<0.01, cpu<0.8, watermark_lag<5s"``, and their verdict on a stage.

The grammar (:data:`GRAMMAR`)::

    gates = gate { "," gate }
    gate  = metric ( "<" | "<=" ) limit

with the metrics and the way each limit is written in
:mod:`hub.control.rollout.metrics`. Each metric appears once; no gate at all
(an empty text) leaves a stage only its heartbeat check.

A stage's verdict (:func:`evaluate`) takes the heartbeats the sites it changed
sent in its hold window (and the hub's own counts sampled in it, for
``hub_errors``). A gate passes when every such site's value is within
its limit; the result names the worst site (the failing one, if any) with its
value and every site that failed. A site that sent no heartbeat in the window
fails the stage, whatever the gates say.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hub.control.rollout.metrics import METRICS, Beat, Context, Reading
from hub.control.rollout.selection import names
from spanedge.errors import InvalidRollout

GRAMMAR = (
    f"gates separated by ',', each METRIC<LIMIT or METRIC<=LIMIT, METRIC one of {', '.join(METRICS)}; "
    "e.g. 'dead_letter_rate<0.01, cpu<0.8, watermark_lag<5s'"
)

_GATE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|==|<|>|=)\s*(.*?)\s*")


@dataclass(frozen=True)
class Gate:
    """An upper limit on one metric.

    Attributes:
        metric: the metric's name (:data:`hub.control.rollout.metrics.METRICS`).
        limit: the limit, in the metric's unit (fraction, bytes, records or seconds).
        inclusive: the value may equal the limit (``<=``).
        text: the limit as written (``5s``), shown back to people.
    """

    metric: str
    limit: float
    inclusive: bool = False
    text: str = ""

    def passes(self, reading: Reading) -> bool:
        """Whether a site's reading is within the limit (a reading without a value passes unless it fails)."""
        if reading.value is None:
            return not reading.fails
        return reading.value <= self.limit if self.inclusive else reading.value < self.limit

    @property
    def op(self) -> str:
        """``<`` or ``<=``."""
        return "<=" if self.inclusive else "<"

    def __str__(self) -> str:
        """The gate as the grammar writes it."""
        return f"{self.metric}{self.op}{self.text or repr(self.limit)}"


def format_gates(gates: Iterable[Gate]) -> str:
    """The gates as :func:`parse_gates` reads them back."""
    return ", ".join(str(g) for g in gates)


def parse_gates(text: str, where: str = "gates") -> tuple[Gate, ...]:
    """Parse a gate spec (an empty one: no gate).

    Raises:
        InvalidRollout: a gate is malformed, names an unknown metric, is not an upper limit, has a limit its
            metric cannot take, or repeats a metric; the message names the gate and the grammar.
    """
    if not text.strip():
        return ()
    gates: list[Gate] = []
    for i, part in enumerate(text.split(","), 1):

        def bad(why: str, i: int = i, part: str = part) -> InvalidRollout:
            return InvalidRollout(f"{where} {text!r}: gate {i} {part.strip()!r} {why}; give {GRAMMAR}")

        match = _GATE.fullmatch(part)
        if match is None:
            raise bad("is not METRIC<LIMIT" if part.strip() else "is empty")
        name, op, limit = match.groups()
        metric = METRICS.get(name)
        if metric is None:
            msg = "names no metric"
            raise bad(msg)
        if op not in ("<", "<="):
            msg = f"uses {op!r}; a gate is an upper limit, written {name}<LIMIT or {name}<=LIMIT"
            raise bad(msg)
        if any(g.metric == name for g in gates):
            msg = f"repeats metric {name}; give each metric once"
            raise bad(msg)
        try:
            value = metric.limit(limit)
        except ValueError as exc:
            msg = f"has a limit {name} cannot take: {exc}"
            raise bad(msg) from None
        gates.append(Gate(name, value, op == "<=", limit))
    return tuple(gates)


@dataclass(frozen=True)
class GateResult:
    """A gate's outcome over the sites of a stage.

    Attributes:
        gate: the gate as written (``cpu<0.8``).
        value: the worst site's value (None: it has none).
        limit: the gate's limit.
        passed: every site's value is within the limit.
        site: the worst site: the one that failed (the highest value first), else the highest value.
        failed: every site that failed the gate, by name.
        note: what qualifies the worst site's value (``no record taken in``), if anything.
    """

    gate: str
    value: float | None
    limit: float
    passed: bool
    site: str | None = None
    failed: tuple[str, ...] = ()
    note: str = ""

    def describe(self) -> str:
        """The result for people: ``cpu 91% of the CPU budget at truck-7 (limit < 80%)``."""
        gate = parse_gates(self.gate)[0]
        metric = METRICS[gate.metric]
        where = f" at {self.site}" if self.site else ""
        more = len(self.failed) - 1
        others = f" and {more} other site{'s' if more > 1 else ''}" if more > 0 else ""
        note = f", {self.note}" if self.note else ""
        limit = f"{gate.op} {metric.show(self.limit, short=True)}"
        return f"{gate.metric} {metric.show(self.value)}{where}{others} (limit {limit}{note})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "gate": self.gate,
            "value": self.value,
            "limit": self.limit,
            "passed": self.passed,
            "site": self.site,
            "failed": list(self.failed),
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateResult:
        """Rebuild a result from :meth:`to_dict` output."""
        value = data.get("value")
        return cls(
            gate=str(data["gate"]),
            value=None if value is None else float(value),
            limit=float(data["limit"]),
            passed=bool(data["passed"]),
            site=None if data.get("site") is None else str(data["site"]),
            failed=tuple(str(s) for s in data.get("failed", ())),
            note=str(data.get("note", "")),
        )


@dataclass(frozen=True)
class Verdict:
    """A stage's verdict: passed or not, each gate's result, the sites silent in the window, and why."""

    passed: bool
    gates: tuple[GateResult, ...]
    silent: tuple[str, ...]
    reason: str


def evaluate(
    gates: Iterable[Gate], beats: Iterable[Beat], sites: Collection[str], start: float, end: float, context: Context
) -> Verdict:
    """The verdict of ``gates`` over the heartbeats ``sites`` sent from ``start`` to ``end`` (the hub's clock).

    ``beats`` may hold other sites' and other times' heartbeats: only those of
    ``sites`` received in ``[start, end]`` count, in the order they arrived.
    """
    mine: dict[str, list[Beat]] = {site: [] for site in sites}
    for beat in sorted((b for b in beats if b.site in mine and start <= b.at <= end), key=lambda b: b.at):
        mine[beat.site].append(beat)
    silent = tuple(sorted(site for site, got in mine.items() if not got))
    heard = {site: got for site, got in sorted(mine.items()) if got}
    window = context.window(start, end)
    results = tuple(_result(gate, heard, window) for gate in gates)
    passed = not silent and all(r.passed for r in results)
    problems = [r.describe() for r in results if not r.passed]
    if silent:
        problems.append(f"{names(silent)} sent no heartbeat in the {end - start:g} s window")
    if problems:
        reason = "failed: " + "; ".join(problems)
    elif results:
        reason = "passed: " + "; ".join(r.describe() for r in results)
    else:
        reason = "passed: every site sent heartbeats (no gate)"
    return Verdict(passed, results, silent, reason)


def _result(gate: Gate, heard: Mapping[str, list[Beat]], context: Context) -> GateResult:
    metric = METRICS[gate.metric]
    readings = {site: metric.measure(got, site, context) for site, got in heard.items()}
    if not readings:
        return GateResult(str(gate), None, gate.limit, False, note="no site sent a heartbeat")
    failed = tuple(site for site, r in readings.items() if not gate.passes(r))
    pool = failed or tuple(readings)

    def badness(site: str) -> tuple[bool, float]:
        r = readings[site]
        return r.value is None and r.fails, -1.0 if r.value is None else r.value

    worst = max(pool, key=badness)  # ties go to the first site by name
    reading = readings[worst]
    return GateResult(str(gate), reading.value, gate.limit, not failed, worst, failed, reading.note)
