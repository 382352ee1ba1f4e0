"""Charts of a run as inline SVG: pure functions from series to an ``<svg>`` element.

Each function takes plain numbers and returns the text of one ``<svg>``
element, ready to be pasted into an HTML page: no XML prolog, no namespace
URLs, text kept as text (small, searchable, no embedded glyphs). Several runs
overlay in one chart: a series keeps its colour across runs and each run has
its own line style. The reports of ``spanedge simulate`` and the benchmarks
use the same functions.

matplotlib comes with the ``sim`` extra and is imported only when a chart is drawn.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spanedge.errors import MissingExtra

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Line styles of the first, second, ... run in an overlay.
RUN_STYLES = ("-", "--", ":", "-.")
#: Colours of the series (mostly colour-blind safe), assigned in order of first appearance.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#8c564b", "#000000", "#999999")
#: Colours of the vertical markers by kind.
MARK_COLOURS = {"fault": "#c0392b", "replan": "#7d3c98"}

#: Characters of a marker's label drawn along its line (the page lists them whole).
MARK_CHARS = 36

WIDTH_IN, HEIGHT_IN = 9.0, 3.4


@dataclass(frozen=True)
class Line:
    """One series of a chart: ``name`` picks the colour, ``run`` (0, 1, ...) the line style."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    run: int = 0


@dataclass(frozen=True)
class Mark:
    """Something that happened at ``t`` seconds (a fault or a re-plan), drawn as a labelled vertical line.

    With ``until``, the span up to it is shaded too (a partition until its heal).
    """

    t: float
    kind: str
    label: str
    until: float | None = None


def require() -> None:
    """Raise :class:`~spanedge.errors.MissingExtra` now if matplotlib is not installed."""
    _matplotlib()


def latency_cdf(title: str, series: Mapping[str, Sequence[float]]) -> str:
    """The cumulative distribution of latencies in milliseconds, one line per series (e.g. per run).

    The x axis turns logarithmic when the latencies span more than two decades.
    A series without values is left out; with none at all, the chart says so.
    """
    with _figure(title) as (fig, ax):
        drawn = [(name, sorted(v for v in values if math.isfinite(v))) for name, values in series.items()]
        drawn = [(name, values) for name, values in drawn if values]
        for run, (name, values) in enumerate(drawn):
            n = len(values)
            ys = [0.0] + [100.0 * (i + 1) / n for i in range(n)]
            style = RUN_STYLES[run % len(RUN_STYLES)]
            ax.step([values[0], *values], ys, where="post", linestyle=style, color=PALETTE[run % len(PALETTE)])
            label = f"{_text(name)} ({n} results)"
            ax.plot([], [], linestyle=RUN_STYLES[run % len(RUN_STYLES)], color=PALETTE[run], label=label)
        low = min((v[0] for _, v in drawn), default=0.0)
        high = max((v[-1] for _, v in drawn), default=0.0)
        if low > 0 and high / low > 100:
            ax.set_xscale("log")
        elif drawn and high - low < 0.05 * max(abs(high), 1.0):  # (nearly) one value: show it from 0
            ax.set_xlim(min(0.0, low * 1.1), max(high * 1.1, 1.0))
        elif 0 <= low < high / 2:
            ax.set_xlim(left=0)
        ax.set_xlabel("latency (ms)")
        ax.set_ylabel("% of results")
        ax.set_ylim(0, 102)
        if drawn:
            ax.legend(loc="lower right", fontsize=8, frameon=False)
        else:
            _empty(ax, "no results")
        return _svg(fig, title)


def time_chart(
    title: str,
    ylabel: str,
    lines: Sequence[Line],
    marks: Sequence[Mark] = (),
    runs: Sequence[str] = (),
    *,
    step: bool = False,
    unit_scale: float = 1.0,
) -> str:
    """Series over time (seconds on the x axis) with faults and re-plans marked as labelled vertical lines.

    Args:
        title: the chart's title.
        ylabel: the y axis label (in the unit after ``unit_scale``).
        lines: the series; ``Line.run`` indexes ``runs``.
        marks: the vertical markers.
        runs: the names of the runs, for the legend of line styles when there are several.
        step: draw each series as steps (a value holds until the next sample).
        unit_scale: every y is divided by it (e.g. 1000 for kB).
    """
    with _figure(title) as (fig, ax):
        colours = _colours(line.name for line in lines)
        for line in lines:
            ys = [y / unit_scale for y in line.ys]
            style = RUN_STYLES[line.run % len(RUN_STYLES)]
            if step:
                ax.step(line.xs, ys, where="post", color=colours[line.name], linestyle=style, linewidth=1.4)
            else:
                ax.plot(line.xs, ys, color=colours[line.name], linestyle=style, linewidth=1.4)
        for name, colour in colours.items():
            ax.plot([], [], color=colour, label=_text(name))
        if len(runs) > 1:
            for run, label in enumerate(runs):
                ax.plot(
                    [], [], color="#555555", linestyle=RUN_STYLES[run % len(RUN_STYLES)], label=f"run: {_text(label)}"
                )
        ax.set_xlabel("seconds since the sensors started")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.set_xlim(left=0)
        _draw_marks(ax, marks)
        if colours:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        else:
            _empty(ax, "nothing measured")
        return _svg(fig, title)


def _draw_marks(ax: Axes, marks: Sequence[Mark]) -> None:
    """Vertical lines with their labels written upwards at the top of the plot, shaded spans for durations."""
    from matplotlib.transforms import blended_transform_factory

    on_top = blended_transform_factory(ax.transData, ax.transAxes)
    for mark in marks:
        colour = MARK_COLOURS.get(mark.kind, "#333333")
        ax.axvline(mark.t, color=colour, linewidth=1.0, linestyle=(0, (4, 2)), alpha=0.9)
        if mark.until is not None and mark.until > mark.t:
            ax.axvspan(mark.t, mark.until, color=colour, alpha=0.08, linewidth=0)
        label = mark.label if len(mark.label) <= MARK_CHARS else mark.label[: MARK_CHARS - 1] + "…"
        ax.text(
            mark.t,
            0.98,
            f" {_text(label)}",
            transform=on_top,
            rotation=90,
            va="top",
            ha="right",
            fontsize=7,
            color=colour,
            clip_on=True,
        )


def _text(text: str) -> str:
    """``text`` as matplotlib shows it literally (it reads ``$...$`` as mathematics)."""
    return text.replace("$", r"\$")


def _colours(names: Iterator[str] | Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in names:
        if name not in out:
            out[name] = PALETTE[len(out) % len(PALETTE)]
    return out


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#777777")
    ax.set_xticks([])
    ax.set_yticks([])


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingExtra(exc.name or "matplotlib", "sim") from None
    return matplotlib


@contextmanager
def _figure(title: str) -> Iterator[tuple[Figure, Axes]]:
    """A figure with one set of axes and the settings for small, text-as-text SVG."""
    matplotlib = _matplotlib()
    from matplotlib.figure import Figure

    settings = {"svg.fonttype": "none", "svg.hashsalt": title, "font.size": 9, "axes.titlesize": 11}
    with matplotlib.rc_context(settings):
        fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")
        ax = fig.add_subplot()
        ax.set_title(_text(title), loc="left")
        ax.grid(True, color="#e5e5e5", linewidth=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        yield fig, ax


_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.S)
_NAMESPACES = re.compile(r'\s+xmlns(?::xlink)?="[^"]*"')


def _svg(fig: Figure, salt: str) -> str:
    """The figure as the text of an inline ``<svg>`` element (no prolog, no namespace URLs, no metadata)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = _PROLOG.sub("", buf.getvalue(), count=1)
    head, sep, body = text.partition(">")
    return _NAMESPACES.sub("", head) + f' role="img" aria-label="{_attr(salt)}"' + sep + body.strip() + "\n"


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def scale_of(peak: float, unit: str) -> tuple[float, str]:
    """A divisor and its unit label for numbers up to ``peak`` (``B`` -> kB or MB)."""
    if peak >= 1e6:
        return 1e6, f"M{unit}"
    if peak >= 1e3:
        return 1e3, f"k{unit}"
    return 1.0, unit
