r"""Which sites each stage of a rollout changes: deterministic, cumulative, varied between versions.

The sites are taken in the order of the SHA-256 of ``<app>\0<version>\0<site>``
(:func:`site_order`), ``version`` being the new version's: the same fleet, stages
and version always select the same sites, and another version picks other
canaries. Each stage keeps every site the stages before it changed and adds,
in that order, the sites its selector matches until its amount of them runs the
new version (:meth:`hub.control.rollout.stages.Stage.target`); a stage whose
amount the earlier ones already reached adds none. The last stage, ``*``,
takes every site.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence

from hub.control.rollout.stages import Fleet, Stage


def site_order(app: str, version: str, sites: Iterable[str]) -> list[str]:
    """``sites`` in the order a rollout of ``version`` of ``app`` takes them (ties, never seen, by name)."""

    def rank(site: str) -> tuple[str, str]:
        return hashlib.sha256(f"{app}\0{version}\0{site}".encode()).hexdigest(), site

    return sorted(set(sites), key=rank)


def select(stages: Sequence[Stage], fleet: Fleet, app: str, version: str) -> tuple[tuple[str, ...], ...]:
    """The sites on the new version once each stage is done, by name: each stage's includes the earlier ones.

    Args:
        stages: the parsed stages (:func:`hub.control.rollout.stages.parse_stages`).
        fleet: the sites the rollout changes, with their labels.
        app: the app's name.
        version: the new version (the hub uses its source's SHA-256).
    """
    order = site_order(app, version, fleet)
    chosen: set[str] = set()
    out: list[tuple[str, ...]] = []
    for stage in stages:
        matching = [site for site in order if stage.rest or stage.matches(fleet[site])]
        missing = stage.target(len(matching)) - sum(1 for site in matching if site in chosen)
        if missing > 0:
            chosen.update([site for site in matching if site not in chosen][:missing])
        out.append(tuple(sorted(chosen)))
    return tuple(out)


def increments(selected: Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """The sites each stage adds to the ones before it, by name (empty for a stage that adds none)."""
    before: set[str] = set()
    out = []
    for sites in selected:
        out.append(tuple(sorted(set(sites) - before)))
        before.update(sites)
    return tuple(out)


def names(sites: Collection[str], most: int = 5) -> str:
    """Site names for a message, by name: the first ``most`` and how many more."""
    shown = sorted(sites)
    more = f" and {len(shown) - most} more" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more
