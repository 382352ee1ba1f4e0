"""The live progress display: records flowing, backlog per site, elapsed and remaining time."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


class EventLog:
    """What happened during a run, each line stamped with the time since setup began or the sensors started."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        """Start the setup clock now."""
        self.clock = clock
        self.began = clock()
        self.t0 = 0.0
        self.lines: list[str] = []

    def start(self, t0: float) -> None:
        """Stamp later lines with the time since ``t0`` (when the sensors started)."""
        self.t0 = t0

    def elapsed(self) -> float:
        """Seconds since the sensors started (0 before)."""
        return self.clock() - self.t0 if self.t0 else 0.0

    def note(self, text: str) -> None:
        """Note something that happened, and log it."""
        if self.t0:
            line = f"t={self.clock() - self.t0:5.1f}s {text}"
        else:
            line = f"setup +{self.clock() - self.began:4.1f}s {text}"
        self.lines.append(line)
        log.info("%s", line)


@dataclass
class SiteStatus:
    """One site's numbers at one moment."""

    site: str
    tier: str
    sent: int = 0
    pending: int = 0
    results: int = 0
    backlog: int | None = None
    dead: int = 0
    wan_bytes: int = 0
    up: bool = True
    note: str = ""


@dataclass
class Status:
    """A snapshot of a running simulation."""

    label: str
    phase: str
    elapsed: float
    duration: float
    sites: list[SiteStatus] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    sent_rate: float = 0.0
    result_rate: float = 0.0


def render_status(status: Status) -> Any:
    """A rich table of the snapshot."""
    from rich.table import Table
    from rich.text import Text

    remaining = max(0.0, status.duration - status.elapsed)
    title = (
        f"{status.label}: {status.phase}, {status.elapsed:.0f}s elapsed, {remaining:.0f}s of sensors left, "
        f"{status.sent_rate:.0f} msg/s in, {status.result_rate:.0f} results/s out"
    )
    table = Table(title=Text(title), title_justify="left")  # text, never markup: names come from the user's files
    for name, justify in (
        ("site", "left"),
        ("tier", "left"),
        ("sensor msgs", "right"),
        ("buffered", "right"),
        ("results", "right"),
        ("outbox backlog", "right"),
        ("dead letters", "right"),
        ("WAN bytes", "right"),
        ("state", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for s in status.sites:
        table.add_row(
            Text(s.site),
            s.tier,
            str(s.sent),
            str(s.pending),
            str(s.results),
            "-" if s.backlog is None else str(s.backlog),
            str(s.dead),
            f"{s.wan_bytes / 1000:.1f} kB",
            Text.assemble(("up", "") if s.up else ("down", "red"), f" {s.note}" if s.note else ""),
        )
    if status.events:
        table.caption = Text("  ".join(status.events[-4:]))
        table.caption_justify = "left"
    return table
