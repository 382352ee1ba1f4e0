"""The statistics of the features a version was trained on, and the population stability index against them.

A version keeps, per feature, its mean, standard deviation, range and
quantile bins: ``edges`` are the inner bin edges (deciles by default) and
``shares`` the fraction of training rows in each of the ``len(edges) + 1``
bins. :func:`psi` compares the shares a site sees with these.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Annotated

import msgspec

from spanedge.numbers import Finite

#: At most this many bins per feature.
MAX_BINS = 100
#: A bin's share is at least this in :func:`psi` (an empty bin would make the index infinite).
MIN_SHARE = 1e-4


class FeatureStats(msgspec.Struct, kw_only=True, frozen=True):
    """One feature's training statistics (see the module docstring)."""

    field: str
    mean: Finite
    std: Finite
    min: Finite
    max: Finite
    edges: Annotated[list[Finite], msgspec.Meta(max_length=MAX_BINS - 1)]
    shares: Annotated[list[Finite], msgspec.Meta(max_length=MAX_BINS)]

    def bin_of(self, value: float) -> int:
        """The bin ``value`` falls in (bin ``i`` holds values up to ``edges[i]``)."""
        return bisect.bisect_left(self.edges, value)


def shares_of(values: Sequence[float], edges: Sequence[float]) -> list[float]:
    """The fraction of ``values`` in each bin the ``edges`` make (all zero if there are no values)."""
    counts = [0] * (len(edges) + 1)
    for v in values:
        counts[bisect.bisect_left(edges, v)] += 1
    n = len(values)
    return [c / n if n else 0.0 for c in counts]


def psi(expected: Sequence[float], actual: Sequence[float]) -> float:
    """The population stability index of bin shares ``actual`` against ``expected``.

    ``Σ (a - e) × ln(a / e)`` with each share at least :data:`MIN_SHARE`;
    under 0.1 is usually read as stable, over 0.25 as a shift.

    Raises:
        ValueError: the two have different numbers of bins.
    """
    if len(expected) != len(actual):
        msg = f"cannot compare {len(actual)} bins with {len(expected)}"
        raise ValueError(msg)
    total = 0.0
    for e, a in zip(expected, actual, strict=True):
        e, a = max(e, MIN_SHARE), max(a, MIN_SHARE)
        total += (a - e) * math.log(a / e)
    return total
