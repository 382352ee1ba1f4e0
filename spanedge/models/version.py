"""One trained version of a model: its parameters and what it was trained on (:class:`ModelVersion`)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from spanedge.models.portable import Model
from spanedge.models.spec import MAX_FEATURES
from spanedge.models.stats import FeatureStats
from spanedge.numbers import Finite

FORMAT = 1
"""The format version of :class:`ModelVersion`."""


class ModelVersion(msgspec.Struct, kw_only=True, frozen=True):
    """A trained version of model ``model`` of app ``app``.

    ``version`` grows by one per training; ``reason`` says why it was
    trained (``on demand``, ``scheduled``, ...); ``rows`` how many records it
    learnt from (``held_out`` more were kept for ``metrics``); ``time_from``
    and ``time_to`` the range of their event times; ``stats`` the statistics of
    each feature; ``params`` the portable parameters. ``switch_at`` is the
    event time from which it scores records, set by the hub when it sends the
    version out (None: not sent yet); records before it keep the older version.
    """

    format: int = FORMAT
    app: str
    model: str
    version: Annotated[int, msgspec.Meta(ge=1)]
    algorithm: str
    features: Annotated[list[str], msgspec.Meta(min_length=1, max_length=MAX_FEATURES)]
    label: str | None
    trained_at: Finite
    reason: Annotated[str, msgspec.Meta(max_length=500)]
    rows: Annotated[int, msgspec.Meta(ge=0)]
    held_out: Annotated[int, msgspec.Meta(ge=0)]
    time_from: Finite | None
    time_to: Finite | None
    metrics: dict[str, Finite]
    stats: Annotated[list[FeatureStats], msgspec.Meta(max_length=MAX_FEATURES)]
    params: Model
    switch_at: Finite | None = None

    def score(self, value: object) -> float:
        """Score one record (a mapping holding every feature as a number).

        Raises:
            ValueError: a feature is missing or not a number; the message names it.
        """
        return self.params.score(features_of(value, self.features, self.model))


def features_of(value: object, features: list[str] | tuple[str, ...], model: str) -> list[float]:
    """The features of record ``value`` in order, as floats.

    Raises:
        ValueError: ``value`` is not a mapping, or a feature is missing or not a finite number.
    """
    if not isinstance(value, dict):
        msg = f"model '{model}' scores records that are JSON objects, got {type(value).__name__}"
        raise ValueError(msg)
    out: list[float] = []
    for name in features:
        v = value.get(name)
        if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v in (float("inf"), float("-inf")):
            got = "missing" if name not in value else repr(v)[:40]
            msg = f"model '{model}' needs feature '{name}' as a finite number, got {got}"
            raise ValueError(msg)
        out.append(float(v))
    return out
