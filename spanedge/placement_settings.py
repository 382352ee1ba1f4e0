"""The numbers a user gives the placement, checked by one rule wherever they come from.

``spanedge deploy`` checks its ``--slo-ms``, ``--traffic-weight`` and
``--latency-weight`` with it, the hub the ``slo_ms`` and ``weights`` of
``POST /apps``, and :class:`placement.Weights` its fields. Each is a number as
:mod:`spanedge.numbers` defines it (finite, not a bool), within bounds:

* the latency SLO is above 0 and at most :data:`MAX_SLO_MS` milliseconds;
* an objective weight, one of :data:`WEIGHTS`, is from 0 to :data:`MAX_WEIGHT`.
  The objective's terms are normalised (the central baseline scores about 2),
  so weights are relative: a weight a thousand times another already lets its
  term decide, and the bound keeps the solver's costs far below what HiGHS
  takes for infinite (1e20).

A value outside its rule raises :class:`~spanedge.errors.InvalidSettings`,
which the REST API answers as a 422 of that kind.
"""

from __future__ import annotations

from collections.abc import Mapping

from spanedge.errors import InvalidSettings
from spanedge.numbers import require_number

#: The names of the objective's weights: WAN traffic, mean path latency, migration in a re-plan.
WEIGHTS = ("traffic", "latency", "migration")
#: The greatest objective weight.
MAX_WEIGHT = 1e6
#: The greatest latency SLO, in milliseconds (an hour); leave the SLO out for none.
MAX_SLO_MS = 3_600_000.0


def check_slo_ms(value: object, what: str = "slo_ms") -> float | None:
    """The latency SLO ``value`` (None: no SLO) as a float; ``what`` names it in the error.

    Raises:
        InvalidSettings: ``value`` is not a number above 0 and at most :data:`MAX_SLO_MS`.
    """
    if value is None:
        return None
    return require_number(
        value,
        what,
        above=0,
        maximum=MAX_SLO_MS,
        hint="an SLO is in milliseconds, an hour at most; leave it out for no SLO",
        error=InvalidSettings,
    )


def check_weight(value: object, what: str) -> float:
    """An objective weight ``value`` as a float; ``what`` names it in the error.

    Raises:
        InvalidSettings: ``value`` is not a number from 0 to :data:`MAX_WEIGHT`.
    """
    return require_number(
        value, what, minimum=0, maximum=MAX_WEIGHT, hint="weights are relative, 1 by default", error=InvalidSettings
    )


def check_weights(weights: object, what: str = "weights") -> dict[str, float] | None:
    """The objective weights ``weights`` by name (None: the defaults), each checked; ``what`` names them in errors.

    Raises:
        InvalidSettings: ``weights`` is not a mapping, names a weight not in :data:`WEIGHTS`,
            or holds a weight out of :func:`check_weight`'s range; the message lists every problem.
    """
    if weights is None:
        return None
    if not isinstance(weights, Mapping):
        msg = f"{what} must map weight names ({', '.join(WEIGHTS)}) to numbers, got {weights!r}"
        raise InvalidSettings(msg)
    problems = []
    unknown = [str(name) for name in weights if name not in WEIGHTS]
    if unknown:
        kind = "weight" if len(unknown) == 1 else "weights"
        names = ", ".join(repr(n) for n in unknown)
        problems.append(f"{what}: unknown {kind} {names}; the weights are {', '.join(WEIGHTS)}")
    checked: dict[str, float] = {}
    for name, value in weights.items():
        if name in WEIGHTS:
            try:
                checked[name] = check_weight(value, f"{what}.{name}")
            except InvalidSettings as exc:
                problems.append(str(exc))
    if problems:
        raise InvalidSettings("; ".join(problems))
    return checked


__all__ = ["MAX_SLO_MS", "MAX_WEIGHT", "WEIGHTS", "check_slo_ms", "check_weight", "check_weights"]
