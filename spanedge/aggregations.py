"""Declarative window aggregations: count, sum, mean, min, max and custom ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BUILTIN = ("count", "sum", "mean", "min", "max")


@dataclass(frozen=True)
class Aggregator:
    """A user-defined aggregation as four functions over an accumulator.

    ``zero()`` makes an empty accumulator, ``add(acc, value)`` folds one field
    value in, ``merge(a, b)`` combines two accumulators and ``result(acc)``
    gives the output value. Accumulators must be JSON-serialisable so window
    state can be checkpointed.
    """

    name: str
    zero: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any]
    result: Callable[[Any], Any]


@dataclass(frozen=True)
class Agg:
    """One aggregation of a window: a function over one field of the records."""

    func: str
    field: str | None = None
    custom: Aggregator | None = dataclasses.field(default=None, compare=False)

    def describe(self) -> str:
        """Return a short text such as ``mean(temp_c)``."""
        return f"{self.func}({self.field or '*'})"


def count() -> Agg:
    """Count the records in the window."""
    return Agg("count")


def sum_(field_name: str) -> Agg:
    """Sum a numeric field."""
    return Agg("sum", field_name)


def mean(field_name: str) -> Agg:
    """Average a numeric field."""
    return Agg("mean", field_name)


def min_(field_name: str) -> Agg:
    """Smallest value of a field."""
    return Agg("min", field_name)


def max_(field_name: str) -> Agg:
    """Largest value of a field."""
    return Agg("max", field_name)


def custom(field_name: str, aggregator: Aggregator) -> Agg:
    """Apply a user-defined :class:`Aggregator` to a field."""
    return Agg(aggregator.name, field_name, aggregator)


# Short aliases so ``from spanedge import agg`` reads well: agg.sum("x").
sum = sum_
min = min_
max = max_
