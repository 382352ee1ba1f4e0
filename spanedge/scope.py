"""The ``@local`` and ``@global_`` decorators that give a function its scope."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])

ATTRIBUTE = "__spanedge_hints__"


class Scope(enum.StrEnum):
    """Where an operator may run."""

    LOCAL = "local"
    GLOBAL = "global"
    ANY = "any"


@dataclass(frozen=True)
class Hints:
    """What a decorator says about a function: scope, name and estimates.

    ``cost`` is CPU core-seconds per input record; ``selectivity`` is the
    number of output records per input record.
    """

    scope: Scope = Scope.ANY
    name: str | None = None
    cost: float | None = None
    selectivity: float | None = None


def hints_of(func: Callable[..., Any]) -> Hints:
    """Return the hints attached to ``func`` (an unscoped default if none)."""
    found = getattr(func, ATTRIBUTE, None)
    return found if isinstance(found, Hints) else Hints()


def _decorate(
    scope: Scope,
    func: F | None,
    name: str | None,
    cost: float | None,
    selectivity: float | None,
) -> F | Callable[[F], F]:
    for label, number in (("cost", cost), ("selectivity", selectivity)):
        if number is not None and number < 0:
            msg = f"@{scope.value}: {label} must be >= 0, got {number!r}"
            raise ValueError(msg)

    def attach(target: F) -> F:
        setattr(target, ATTRIBUTE, Hints(scope, name, cost, selectivity))
        return target

    return attach(func) if func is not None else attach


@overload
def local(func: F, /) -> F: ...
@overload
def local(
    *, name: str | None = None, cost: float | None = None, selectivity: float | None = None
) -> Callable[[F], F]: ...
def local(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    cost: float | None = None,
    selectivity: float | None = None,
) -> F | Callable[[F], F]:
    """Mark a function as local: it runs at an edge site, one replica per source site."""
    return _decorate(Scope.LOCAL, func, name, cost, selectivity)


@overload
def global_(func: F, /) -> F: ...
@overload
def global_(
    *, name: str | None = None, cost: float | None = None, selectivity: float | None = None
) -> Callable[[F], F]: ...
def global_(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    cost: float | None = None,
    selectivity: float | None = None,
) -> F | Callable[[F], F]:
    """Mark a function as global: it runs once, at a hub, over all sites' data."""
    return _decorate(Scope.GLOBAL, func, name, cost, selectivity)
