"""Reading an app's plan history: re-plans that left the placement unchanged, folded into one counted entry.

The hub records every re-plan, also one that keeps the placement (its entry
has ``changed`` false and the reason ends in :data:`UNCHANGED`): noisy links
re-plan an app often without moving anything. The simulator's report, the
dashboard and ``spanedge status`` show each run of such entries as one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

#: The end of the reason of a re-plan that kept the placement (:func:`hub.control.plan_history.replanned`).
UNCHANGED = "; placement unchanged"


def get(entry: Any, name: str, default: Any = None) -> Any:
    """A field of a history entry, given as a mapping (the REST answer) or an object (the hub's record)."""
    if isinstance(entry, Mapping):
        return entry.get(name, default)
    return getattr(entry, name, default)


ROLLOUT_REASON = "rollout: "
"""How the reason of a rollout's step starts in the plan history (its stage, gates, the sites it changed)."""


def unchanged(entry: Any) -> bool:
    """Whether ``entry`` is a re-plan that kept the placement."""
    return not get(entry, "changed", True)


def quiet(entry: Any) -> bool:
    """Whether ``entry`` is a re-plan that changed nothing worth showing alone: placement kept, not a rollout step.

    A rollout's step keeps the placement but gives sites another version, so it is shown on its own.
    """
    return unchanged(entry) and not str(get(entry, "reason", "")).startswith(ROLLOUT_REASON)


def fold(entries: Iterable[T], is_unchanged: Callable[[T], bool] = unchanged) -> list[list[T]]:
    """The entries in order, in groups: each entry alone, except runs of unchanged re-plans of one version together."""
    groups: list[list[T]] = []
    for entry in entries:
        last = groups[-1] if groups else None
        if (
            last is not None
            and is_unchanged(entry)
            and is_unchanged(last[-1])
            and get(last[-1], "version") == get(entry, "version")
        ):
            last.append(entry)
        else:
            groups.append([entry])
    return groups


def summary(group: list[Any]) -> str:
    """What a group of :func:`fold` says, without times: the reason of one entry, or the count of unchanged re-plans."""
    reason = str(get(group[-1], "reason", ""))
    if len(group) == 1:
        return reason
    return f"re-planned {len(group)} times, placement unchanged (the last for: {reason.removesuffix(UNCHANGED)})"
