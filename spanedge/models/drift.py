"""How far the records a process scores have drifted from those its model version was trained on.

Each ``predict`` at a site adds the features of every record it scores to
the :class:`DriftWindow` of its model (:data:`SCORED`): the bins of the
version's training statistics (:class:`spanedge.models.stats.FeatureStats`)
the newest :data:`WINDOW_RECORDS` records fall in. :meth:`DriftWindow.report`
gives, once :data:`MIN_RECORDS` were scored, the population stability index
of each feature against its training shares and the largest of them.

A record that carries the model's label when it is scored (a label that
arrived with it, or a replay of labelled records) also counts towards the
live error over the same window: for a classifier the share of records on
the wrong side of 0.5, for a regression the mean absolute error. A new
version starts a new window, measured against its own statistics.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence

from spanedge.models.stats import psi
from spanedge.models.version import ModelVersion

#: The sliding window: drift is measured over the newest this many records scored.
WINDOW_RECORDS = 1000
#: Drift is reported once at least this many records were scored by the version.
MIN_RECORDS = 100


class DriftWindow:
    """The bins of the newest records one version scored, and their errors where labels came."""

    def __init__(self, version: ModelVersion, size: int = WINDOW_RECORDS) -> None:
        """Measure against ``version``'s training statistics over the newest ``size`` records."""
        self.version = version.version
        self.classifier = version.algorithm in ("logistic_regression", "random_forest")
        self.supervised = version.label is not None and version.algorithm != "kmeans"
        index = {name: i for i, name in enumerate(version.features)}
        self._stats = [(index[s.field], s) for s in version.stats if s.field in index and s.shares]
        self._counts = [[0] * len(s.shares) for _, s in self._stats]
        self._edges = [(i, list(s.edges)) for i, s in self._stats]  # bin i holds values up to edges[i]
        self._recent: deque[tuple[int, ...]] = deque()
        self._errors: deque[float] = deque()
        self._error_sum = 0.0
        self.size = size
        self.scored = 0

    def add(self, x: Sequence[float], score: float, label: object = None) -> None:
        """Count one scored record (its features ``x``, its ``score``, its ``label`` if it carries one)."""
        self.scored += 1
        recent, counts = self._recent, self._counts
        if len(recent) == self.size:
            for c, b in zip(counts, recent.popleft(), strict=True):
                c[b] -= 1
        bins = tuple([bisect_left(edges, x[i]) for i, edges in self._edges])
        recent.append(bins)
        for c, b in zip(counts, bins, strict=True):
            c[b] += 1
        if label is not None and self.supervised:
            self._add_error(score, label)

    def _add_error(self, score: float, label: object) -> None:
        if isinstance(label, bool) or not isinstance(label, int | float) or label != label:
            return
        error = float((score > 0.5) != (label > 0.5)) if self.classifier else abs(score - float(label))
        if len(self._errors) == self.size:
            self._error_sum -= self._errors.popleft()
        self._errors.append(error)
        self._error_sum += error

    def report(self) -> dict[str, float]:
        """``version``, ``records`` in the window, ``psi`` (the largest), ``psi.<feature>``, ``error`` and ``labelled``.

        ``psi`` is left out under :data:`MIN_RECORDS` records, ``error`` under as many labelled ones.
        """
        n = len(self._recent)
        out: dict[str, float] = {"version": float(self.version), "records": float(n)}
        if n >= MIN_RECORDS and self._stats:
            each = {
                s.field: psi(s.shares, [c / n for c in counts])
                for (_, s), counts in zip(self._stats, self._counts, strict=True)
            }
            out["psi"] = max(each.values())
            out.update({f"psi.{name}": value for name, value in each.items()})
        if len(self._errors) >= MIN_RECORDS:
            out["error"] = self._error_sum / len(self._errors)
            out["labelled"] = float(len(self._errors))
        return out


class DriftBook:
    """The :class:`DriftWindow` of each ``(app, model)`` this process scores with."""

    def __init__(self, size: int = WINDOW_RECORDS) -> None:
        """Keep windows of ``size`` records."""
        self.size = size
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], DriftWindow] = {}

    def observe(self, version: ModelVersion, x: Sequence[float], score: float, label: object = None) -> None:
        """Count a record ``version`` scored; a version other than the window's starts a new window."""
        key = (version.app, version.model)
        with self._lock:
            window = self._windows.get(key)
            if window is None or window.version != version.version:
                window = self._windows[key] = DriftWindow(version, self.size)
            window.add(x, score, label)

    def report(self) -> dict[str, dict[str, dict[str, float]]]:
        """Per app, per model, :meth:`DriftWindow.report`."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        with self._lock:
            for (app, model), window in sorted(self._windows.items()):
                out.setdefault(app, {})[model] = window.report()
        return out

    def remove(self, app: str) -> None:
        """Forget the windows of ``app``'s models."""
        with self._lock:
            for key in [k for k in self._windows if k[0] == app]:
                del self._windows[key]


SCORED = DriftBook()
"""The drift windows of the models this process scores with at a site."""

__all__ = ["MIN_RECORDS", "SCORED", "WINDOW_RECORDS", "DriftBook", "DriftWindow"]
