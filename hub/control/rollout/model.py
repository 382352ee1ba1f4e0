"""A rollout as plain data: its stages, where it is, each site's version and every step, in JSON and back.

The hub persists it after every step and resumes it after a restart
(:func:`hub.control.rollout.steps.resume`); the steps themselves are pure
functions in :mod:`hub.control.rollout.steps`.

Statuses:

* ``running``: the current stage's sites were given the new version; the
  rollout waits for them to run it.
* ``holding``: they run it; the stage's hold window is open (``held_from``).
* ``passed``: every stage passed its gates; every site runs the new version.
* ``failed``: a gate failed, a site did not take the new version up in time, or
  someone rolled back; every changed site was given the previous version back,
  and the rollout waits for them to run it.
* ``rolled_back``: every changed site runs the previous version again.

A step's status is what the step made: ``passed`` for a stage that passed
its gates even when others follow.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hub.control.rollout.gates import Gate, GateResult, format_gates, parse_gates
from spanedge.errors import InvalidRollout

#: Seconds the sites of a stage have to run the new version before the rollout rolls back.
TAKE_UP_S = 120.0


class Status(enum.StrEnum):
    """Where a rollout is (see the module docstring)."""

    RUNNING = "running"
    HOLDING = "holding"
    PASSED = "passed"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"

    @property
    def over(self) -> bool:
        """Nothing is left to do: every site runs the version it was given last."""
        return self in (Status.PASSED, Status.ROLLED_BACK)


@dataclass(frozen=True)
class StagePlan:
    """One stage as the rollout runs it: the stage as written and the sites on the new version once it is done."""

    spec: str
    sites: tuple[str, ...]


@dataclass(frozen=True)
class SiteVersion:
    """The version a site was given, since when (the hub's clock), and whether it is known to run it."""

    version: str
    since: float
    running: bool


@dataclass(frozen=True)
class Step:
    """One step of a rollout, as its history shows it.

    Attributes:
        at: when (the hub's clock).
        stage: the stage it concerns (0 for the first).
        status: what the step made of the stage or the rollout.
        reason: why, for people.
        sites: the sites it gave a version to.
        gates: the gates' results, for a step that checked them.
    """

    at: float
    stage: int
    status: Status
    reason: str
    sites: tuple[str, ...] = ()
    gates: tuple[GateResult, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        data: dict[str, Any] = {"at": self.at, "stage": self.stage, "status": str(self.status), "reason": self.reason}
        if self.sites:
            data["sites"] = list(self.sites)
        if self.gates:
            data["gates"] = [g.to_dict() for g in self.gates]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        """Rebuild a step from :meth:`to_dict` output."""
        return cls(
            at=float(data["at"]),
            stage=int(data["stage"]),
            status=Status(data["status"]),
            reason=str(data["reason"]),
            sites=tuple(str(s) for s in data.get("sites", ())),
            gates=tuple(GateResult.from_dict(g) for g in data.get("gates", ())),
        )


@dataclass(frozen=True)
class Rollout:
    """A staged rollout of one app from one version to another.

    Attributes:
        app: the app's name.
        from_version: the version the sites ran before (the hub uses its source's SHA-256).
        to_version: the version rolled out.
        stages: each stage, with the sites on ``to_version`` once it is done (the earlier stages' included).
        gates: the gates every stage is checked against.
        hold_s: how long each stage's sites run the new version before its gates are checked.
        take_up_s: how long a stage's sites have to run the new version once given it.
        stage: the current stage (0 for the first).
        status: where the rollout is.
        started_at: when the current stage (or the rollback) began: its sites were given their version.
        held_from: when the current stage's hold window opened (None: not holding).
        sites: every site of the rollout with the version it was given last.
        steps: every step so far, oldest first.
    """

    app: str
    from_version: str
    to_version: str
    stages: tuple[StagePlan, ...]
    gates: tuple[Gate, ...]
    hold_s: float
    stage: int
    status: Status
    started_at: float
    sites: dict[str, SiteVersion]
    steps: tuple[Step, ...] = ()
    take_up_s: float = TAKE_UP_S
    held_from: float | None = None

    def on(self, version: str) -> tuple[str, ...]:
        """The sites given ``version`` last, by name."""
        return tuple(sorted(site for site, v in self.sites.items() if v.version == version))

    def wanted(self) -> dict[str, str]:
        """The version each site is to run: what its plan message carries for the app."""
        return {site: v.version for site, v in sorted(self.sites.items())}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (:meth:`from_dict` reads it back)."""
        return {
            "app": self.app,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "stages": [{"spec": s.spec, "sites": list(s.sites)} for s in self.stages],
            "gates": format_gates(self.gates),
            "hold_s": self.hold_s,
            "take_up_s": self.take_up_s,
            "stage": self.stage,
            "status": str(self.status),
            "started_at": self.started_at,
            "held_from": self.held_from,
            "sites": {
                site: {"version": v.version, "since": v.since, "running": v.running}
                for site, v in sorted(self.sites.items())
            },
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rollout:
        """Rebuild a rollout from :meth:`to_dict` output.

        Raises:
            InvalidRollout: the data is not a rollout; the message says what is wrong.
        """
        try:
            held = data.get("held_from")
            rollout = cls(
                app=str(data["app"]),
                from_version=str(data["from_version"]),
                to_version=str(data["to_version"]),
                stages=tuple(StagePlan(str(s["spec"]), tuple(str(x) for x in s["sites"])) for s in data["stages"]),
                gates=parse_gates(str(data.get("gates", ""))),
                hold_s=float(data["hold_s"]),
                take_up_s=float(data.get("take_up_s", TAKE_UP_S)),
                stage=int(data["stage"]),
                status=Status(data["status"]),
                started_at=float(data["started_at"]),
                held_from=None if held is None else float(held),
                sites={
                    str(site): SiteVersion(str(v["version"]), float(v["since"]), bool(v["running"]))
                    for site, v in data["sites"].items()
                },
                steps=tuple(Step.from_dict(s) for s in data.get("steps", ())),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            msg = f"not a rollout record: {type(exc).__name__}: {exc}"
            raise InvalidRollout(msg) from None
        validate(rollout)
        return rollout


def validate(rollout: Rollout) -> None:
    """Raise :class:`InvalidRollout` if ``rollout`` is inconsistent (a stage or site out of place)."""
    problems = []
    if not rollout.stages:
        problems.append("it has no stage")
    elif not 0 <= rollout.stage < len(rollout.stages):
        problems.append(f"its stage {rollout.stage} is not one of its {len(rollout.stages)} stages")
    elif set(rollout.stages[-1].sites) != set(rollout.sites):
        problems.append("its last stage does not hold every site it changes")
    for before, after in itertools.pairwise(rollout.stages):
        if not set(before.sites) <= set(after.sites):
            problems.append(f"stage {after.spec!r} leaves out sites of stage {before.spec!r}")
    for name in ("hold_s", "take_up_s"):
        value = getattr(rollout, name)
        if not (math.isfinite(value) and value > 0):
            problems.append(f"its {name} is {value!r}, not a positive number of seconds")
    if rollout.from_version == rollout.to_version:
        problems.append(f"it rolls version {rollout.to_version!r} out over itself")
    unknown = {v.version for v in rollout.sites.values()} - {rollout.from_version, rollout.to_version}
    if unknown:
        problems.append(f"it gives sites versions {sorted(unknown)} of neither side")
    if (rollout.held_from is None) == (rollout.status is Status.HOLDING):
        problems.append(f"it is {rollout.status} with held_from {rollout.held_from!r}")
    if problems:
        msg = f"rollout of app {rollout.app!r}: " + "; ".join(problems)
        raise InvalidRollout(msg)
