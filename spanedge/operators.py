"""Operators: frozen dataclasses, one per node of the dataflow DAG.

The runtime core is small: record-level operators (``map``, ``filter``,
``flat_map`` and ``predict`` all run as a flat-map), windows, unions, hub-only transforms,
sources and sinks.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spanedge.aggregations import Agg
from spanedge.models.spec import ModelSpec
from spanedge.scope import Scope


class Kind(enum.StrEnum):
    """The kind of an operator."""

    SOURCE = "source"
    MAP = "map"
    FILTER = "filter"
    FLAT_MAP = "flat_map"
    PREDICT = "predict"
    WINDOW = "window"
    UNION = "union"
    TRANSFORM = "transform"
    SINK = "sink"


RECORD_LEVEL = frozenset({Kind.MAP, Kind.FILTER, Kind.FLAT_MAP, Kind.PREDICT})


class WindowKind(enum.StrEnum):
    """The shape of a window over event time."""

    TUMBLING = "tumbling"
    SLIDING = "sliding"
    SESSION = "session"


@dataclass(frozen=True)
class WindowSpec:
    """A keyed event-time window and its aggregations.

    ``key`` is a record field; ``size`` the window length (tumbling, sliding),
    ``slide`` the hop (sliding), ``gap`` the inactivity gap (session); all in
    seconds. ``aggs`` maps output field names to aggregations.
    """

    key: str
    kind: WindowKind
    size: float | None
    slide: float | None
    gap: float | None
    aggs: tuple[tuple[str, Agg], ...]
    allowed_lateness: float = 0.0
    keys: int = 100

    @property
    def period(self) -> float:
        """Seconds between two results per key (the slide, size or gap)."""
        return self.slide or self.size or self.gap or 1.0


HUB_SINK_KINDS = frozenset({"postgres", "parquet"})
"""The sink kinds only the hub writes (:attr:`SinkSpec.hub_only`)."""


@dataclass(frozen=True)
class SinkSpec:
    """Where a stream's records end: ``mqtt`` topic, ``file`` path, ``console``, ``memory``, ``parquet`` path, ``postgres``."""

    kind: str
    target: str = ""

    @property
    def hub_only(self) -> bool:
        """True for the sinks only the hub writes: PostgreSQL and Parquet datasets."""
        return self.kind in HUB_SINK_KINDS


@dataclass(frozen=True)
class PostgresSinkSpec(SinkSpec):
    """A PostgreSQL table (``target``), its upsert key and where the hub finds the connection string.

    ``dsn_env`` names the environment variable of the hub that holds the
    libpq connection string; ``key`` the columns to upsert on (None: the
    table's primary key, or plain inserts if it has none).
    """

    dsn_env: str = "SPANEDGE_PG_DSN"
    key: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Operator:
    """One node of the dataflow.

    ``inputs`` names upstream operators; ``func`` is the user's function for
    record-level operators and transforms; ``location`` is ``file:line`` of
    the user's code that defined it, for error messages. ``cost`` is CPU
    core-seconds per input record, ``selectivity`` output records per input
    record, ``record_bytes`` the estimated size of an output record (``None``:
    same as the input). ``schema`` is a Spark DDL string describing the
    output records' fields, if declared. A ``predict`` operator's ``model``
    is the model it scores with and ``output`` the field it adds.
    """

    name: str
    kind: Kind
    inputs: tuple[str, ...] = ()
    scope: Scope = Scope.ANY
    location: str = "<unknown>"
    func: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    cost: float = 2e-5
    selectivity: float = 1.0
    record_bytes: float | None = None
    schema: str | None = None
    window: WindowSpec | None = None
    sink: SinkSpec | None = None
    stream: str | None = None
    time_field: str | None = None
    model: ModelSpec | None = None
    output: str | None = None

    @property
    def hub_only(self) -> bool:
        """True if the operator can only run at a hub."""
        return self.scope is Scope.GLOBAL or self.kind is Kind.TRANSFORM

    @property
    def record_level(self) -> bool:
        """True for map, filter, flat_map and predict."""
        return self.kind in RECORD_LEVEL

    @property
    def stream_name(self) -> str:
        """The sensor stream a source reads (its ``stream``, else its name); other operators: their name."""
        return self.stream or self.name if self.kind is Kind.SOURCE else self.name

    def describe(self) -> str:
        """Return ``'name' (file:line)`` for messages."""
        return f"'{self.name}' ({self.location})"

    def output_rate(self, input_rate: float) -> float:
        """Estimated output records/s given the input records/s."""
        if self.window is not None:
            return min(input_rate * self.selectivity, self.window.keys / self.window.period)
        return input_rate * self.selectivity
