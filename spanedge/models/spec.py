"""The declaration of a model: what it learns, from which stream, how often (``app.model(...)``)."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spanedge.durations import parse_duration
from spanedge.errors import InvalidDataflow
from spanedge.names import NAME_PATTERN

#: A feature or label: a record field name.
FIELD_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
_MODEL_NAME = re.compile(NAME_PATTERN)
#: At most this many features per model (each is a record field the operator reads).
MAX_FEATURES = 256
#: At most this many trees in a forest, and this deep.
MAX_TREES = 500
MAX_DEPTH = 20
#: At most this many clusters.
MAX_CLUSTERS = 1000
#: ``min_rows`` is at most this (a training reads at most :data:`MAX_TRAINING_ROWS` records).
MAX_TRAINING_ROWS = 10_000_000
#: By default the hub keeps (and trains on) the labelled records of the last 7 days, the newest 100 000 at most.
DEFAULT_HISTORY_S = 7 * 86400.0
DEFAULT_HISTORY_ROWS = 100_000


class Algorithm(enum.StrEnum):
    """What a model learns; each is trained with ``pyspark.ml`` at the hub."""

    LOGISTIC_REGRESSION = "logistic_regression"
    LINEAR_REGRESSION = "linear_regression"
    KMEANS = "kmeans"
    RANDOM_FOREST = "random_forest"
    RANDOM_FOREST_REGRESSION = "random_forest_regression"

    @property
    def supervised(self) -> bool:
        """True if training needs a label field."""
        return self is not Algorithm.KMEANS

    @property
    def classifier(self) -> bool:
        """True for the kinds that predict the probability of label 1."""
        return self in (Algorithm.LOGISTIC_REGRESSION, Algorithm.RANDOM_FOREST)


#: The parameters each algorithm takes, with their defaults and largest values.
PARAMETERS: dict[Algorithm, dict[str, tuple[int, int]]] = {
    Algorithm.LOGISTIC_REGRESSION: {"max_iter": (100, 10_000)},
    Algorithm.LINEAR_REGRESSION: {"max_iter": (100, 10_000)},
    Algorithm.KMEANS: {"k": (2, MAX_CLUSTERS), "max_iter": (20, 10_000)},
    Algorithm.RANDOM_FOREST: {"trees": (20, MAX_TREES), "depth": (5, MAX_DEPTH)},
    Algorithm.RANDOM_FOREST_REGRESSION: {"trees": (20, MAX_TREES), "depth": (5, MAX_DEPTH)},
}


@dataclass(frozen=True)
class ModelSpec:
    """A model of an app: its ``name``, ``algorithm``, input ``features`` and ``label`` (record fields).

    ``train_on`` names the stream of labelled records the hub trains on;
    ``every`` is the seconds between scheduled trainings (None: on demand
    only); a training needs at least ``min_rows`` records. ``params`` holds the
    algorithm's parameters (:data:`PARAMETERS`); ``location`` is ``file:line``
    of the declaration. The hub trains a new version when a site reports a
    population stability index over ``max_psi`` or a live error over
    ``max_error`` (None: the error triggers nothing) for the version in force.
    The hub keeps the records of ``train_on`` with an event time in the last
    ``history`` seconds, the newest ``history_rows`` at most, and trains on
    them (:mod:`hub.models.history`).
    """

    name: str
    algorithm: Algorithm
    features: tuple[str, ...]
    train_on: str
    label: str | None = None
    every: float | None = None
    min_rows: int = 100
    params: tuple[tuple[str, int], ...] = ()
    location: str = "<unknown>"
    max_psi: float = 0.25
    max_error: float | None = None
    history: float = DEFAULT_HISTORY_S
    history_rows: int = DEFAULT_HISTORY_ROWS
    _param_map: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Index the parameters, filled with their defaults."""
        given = dict(self.params)
        full = {name: given.get(name, default) for name, (default, _) in PARAMETERS[self.algorithm].items()}
        object.__setattr__(self, "_param_map", full)

    def param(self, name: str) -> int:
        """The value of parameter ``name`` (given or default)."""
        return self._param_map[name]

    def describe(self) -> str:
        """Return ``model 'name' (file:line)`` for messages."""
        return f"model '{self.name}' ({self.location})"

    @property
    def cost_per_record(self) -> float:
        """Estimated CPU core-seconds to score one record in plain Python, for placement."""
        n = len(self.features)
        if self.algorithm is Algorithm.KMEANS:
            work = self.param("k") * n
        elif self.algorithm in (Algorithm.RANDOM_FOREST, Algorithm.RANDOM_FOREST_REGRESSION):
            work = self.param("trees") * self.param("depth")
        else:
            work = n
        return 2e-6 + 1e-7 * (n + work)

    @property
    def size_bytes(self) -> int:
        """Estimated bytes of a trained version in memory (the most its parameters can hold), for placement."""
        n = len(self.features)
        if self.algorithm is Algorithm.KMEANS:
            numbers = self.param("k") * n
        elif self.algorithm in (Algorithm.RANDOM_FOREST, Algorithm.RANDOM_FOREST_REGRESSION):
            numbers = self.param("trees") * (2 ** (self.param("depth") + 1)) * 5
        else:
            numbers = n + 1
        return 1024 + 24 * numbers

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "name": self.name,
            "algorithm": self.algorithm.value,
            "features": list(self.features),
            "label": self.label,
            "train_on": self.train_on,
            "every_s": self.every,
            "min_rows": self.min_rows,
            "params": dict(self._param_map),
            "location": self.location,
            "max_psi": self.max_psi,
            "max_error": self.max_error,
            "history_s": self.history,
            "history_rows": self.history_rows,
        }


def _fail(where: str, problem: str) -> InvalidDataflow:
    return InvalidDataflow(f"{where}: {problem}")


def _check_field(where: str, role: str, value: object) -> str:
    if not isinstance(value, str) or not FIELD_PATTERN.match(value):
        msg = f"{role} must be a record field name (letters, digits and _, not starting with a digit), got {value!r}"
        raise _fail(where, msg)
    return value


def check_model(
    *,
    name: object,
    algorithm: object,
    features: object,
    label: object,
    train_on: str,
    every: object,
    min_rows: object,
    params: Mapping[str, object],
    location: str,
    max_psi: object = 0.25,
    max_error: object = None,
    history: object = None,
    history_rows: object = None,
) -> ModelSpec:
    """Validate the arguments of ``app.model(...)`` and return the spec.

    Raises:
        InvalidDataflow: an unknown algorithm, no features, a bad ``every`` or ``min_rows``, a label missing for
            a supervised algorithm (or given to k-means), an unknown or out-of-range parameter, a bad
            ``history`` or ``history_rows``.
    """
    where = f"model {name!r} ({location})"
    if not isinstance(name, str) or not _MODEL_NAME.match(name):
        msg = "a model's name is part of REST paths: use lowercase letters, digits, _ and -, e.g. 'wear'"
        raise _fail(where, msg)
    known = ", ".join(a.value for a in Algorithm)
    if not isinstance(algorithm, str) or algorithm not in {a.value for a in Algorithm}:
        raise _fail(where, f"unknown algorithm {algorithm!r}; use one of {known}")
    algo = Algorithm(algorithm)
    if isinstance(features, str) or not isinstance(features, Sequence) or not features:
        msg = f"features must be a non-empty list of record fields, e.g. features=['rms', 'peak'], got {features!r}"
        raise _fail(where, msg)
    if len(features) > MAX_FEATURES:
        raise _fail(where, f"has {len(features)} features; at most {MAX_FEATURES} are allowed")
    names = tuple(_check_field(where, "each feature", f) for f in features)
    if len(set(names)) != len(names):
        dup = next(f for f in names if names.count(f) > 1)
        raise _fail(where, f"feature {dup!r} is listed twice; list each field once")
    if algo.supervised and label is None:
        raise _fail(where, f"{algo.value} learns from labelled records: pass label='<field>' (e.g. label='failed')")
    if not algo.supervised and label is not None:
        raise _fail(where, f"{algo.value} learns without labels: drop label={label!r}")
    if label is not None:
        _check_field(where, "label", label)
        if label in names:
            raise _fail(where, f"label {label!r} is also a feature; a model cannot learn a field from itself")
    seconds = None if every is None else _duration(where, "every", every)
    if seconds is not None and seconds < 60:
        raise _fail(where, f"every={every!r} is under a minute; train at most once a minute (e.g. every='10m')")
    if isinstance(min_rows, bool) or not isinstance(min_rows, int) or not 1 <= min_rows <= MAX_TRAINING_ROWS:
        raise _fail(where, f"min_rows must be a whole number from 1 to {MAX_TRAINING_ROWS}, got {min_rows!r}")
    allowed = PARAMETERS[algo]
    checked: list[tuple[str, int]] = []
    for key, value in params.items():
        if key not in allowed:
            names_ok = ", ".join(allowed) or "none"
            raise _fail(where, f"{algo.value} has no parameter {key!r}; it takes: {names_ok}")
        top = allowed[key][1]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise _fail(where, f"parameter {key} must be a whole number from 1 to {top}, got {value!r}")
        checked.append((key, value))
    if algo is Algorithm.KMEANS and dict(checked).get("k", 2) < 2:
        raise _fail(where, "k-means needs k >= 2 clusters")
    keep_s, keep_rows = _history(where, history, history_rows, min_rows)
    psi_limit = _threshold(where, "max_psi", max_psi)
    error_limit = None if max_error is None else _threshold(where, "max_error", max_error)
    if error_limit is not None and not algo.supervised:
        raise _fail(where, f"{algo.value} has no label to measure an error against: drop max_error={max_error!r}")
    return ModelSpec(
        name=name,
        algorithm=algo,
        features=names,
        train_on=train_on,
        label=label if isinstance(label, str) else None,
        every=seconds,
        min_rows=min_rows,
        params=tuple(sorted(checked)),
        location=location,
        max_psi=psi_limit,
        max_error=error_limit,
        history=keep_s,
        history_rows=keep_rows,
    )


def _duration(where: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _fail(where, f"bad {name}: expected a duration such as '1h' or 3600, got {value!r}")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise _fail(where, f"bad {name}: {exc}") from None


def _history(where: str, history: object, rows: object, min_rows: int) -> tuple[float, int]:
    """The checked ``history`` (seconds) and ``history_rows``; the row cap defaults to at least ``min_rows``."""
    seconds = DEFAULT_HISTORY_S if history is None else _duration(where, "history", history)
    if seconds < 60:
        raise _fail(where, f"history={history!r} is under a minute; keep at least a minute of records (e.g. '7d')")
    if rows is None:
        return seconds, max(DEFAULT_HISTORY_ROWS, min_rows)
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= MAX_TRAINING_ROWS:
        raise _fail(where, f"history_rows must be a whole number from 1 to {MAX_TRAINING_ROWS}, got {rows!r}")
    if rows < min_rows:
        msg = f"history_rows={rows} keeps fewer records than min_rows={min_rows} needs; raise it or lower min_rows"
        raise _fail(where, msg)
    return seconds, rows


def _threshold(where: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1e6:
        raise _fail(where, f"{name} must be a number over 0 (e.g. {name}=0.25), got {value!r}")
    return float(value)
