"""The steps of a rollout: pure functions from a rollout, a clock value and what the hub saw, to the next rollout.

* :func:`start` gives the first stage's sites the new version (``running``);
* :func:`confirm` records which version sites run: once a stage's sites run
  the new one its hold opens (``holding``), once every changed site runs the
  previous one again a rollback is over (``rolled_back``);
* :func:`check`, called whenever :func:`due` says, evaluates a stage's gates
  at the end of its hold and starts the next stage (the last one passed:
  ``passed``) or rolls back (``failed``); it also rolls back a stage whose
  sites did not run the new version within ``take_up_s``;
* :func:`roll_back` rolls back by hand, at any stage;
* :func:`resume` restarts the clock of a hold (or of a take-up) after a hub restart,
  since the heartbeats received before it are gone.

A step that changes nothing returns its rollout itself. A stage the earlier
stages already covered is recorded as passed and skipped, without a hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from hub.control.rollout.gates import Gate, GateResult, evaluate, format_gates
from hub.control.rollout.metrics import Beat, Context
from hub.control.rollout.model import TAKE_UP_S, Rollout, SiteVersion, StagePlan, Status, Step, validate
from hub.control.rollout.selection import increments, names, select
from hub.control.rollout.stages import Fleet, Stage
from spanedge.errors import InvalidRollout


def plan_stages(stages: Sequence[Stage], fleet: Fleet, app: str, version: str) -> tuple[StagePlan, ...]:
    """Each stage with the sites it brings ``version`` to (:func:`hub.control.rollout.selection.select`)."""
    return tuple(StagePlan(str(s), sites) for s, sites in zip(stages, select(stages, fleet, app, version), strict=True))


def start(
    app: str,
    from_version: str,
    to_version: str,
    stages: Sequence[StagePlan],
    gates: Sequence[Gate],
    hold_s: float,
    at: float,
    *,
    take_up_s: float = TAKE_UP_S,
) -> Rollout:
    """A rollout of ``to_version`` over sites that run ``from_version``, its first stage's sites given it at ``at``.

    Raises:
        InvalidRollout: no stage, stages that are not cumulative, a hold or take-up that is not a positive
            number of seconds, or the same version on both sides.
    """
    sites = {site: SiteVersion(from_version, at, True) for site in (stages[-1].sites if stages else ())}
    first = Step(
        at,
        0,
        Status.RUNNING,
        f"rollout of {_v(to_version)} over {_v(from_version)} on {len(sites)} sites: "
        f"stages {', '.join(s.spec for s in stages)}; gates {format_gates(gates) or 'none'}; hold {hold_s:g} s",
    )
    rollout = Rollout(
        app=app,
        from_version=from_version,
        to_version=to_version,
        stages=tuple(stages),
        gates=tuple(gates),
        hold_s=hold_s,
        take_up_s=take_up_s,
        stage=0,
        status=Status.RUNNING,
        started_at=at,
        sites=sites,
        steps=(first,),
    )
    validate(rollout)
    return _enter(rollout, 0, at)


def confirm(rollout: Rollout, at: float, running: Mapping[str, str]) -> Rollout:
    """Record the version each site of ``running`` runs at ``at``; open the hold or end the rollback if that is all."""
    sites = dict(rollout.sites)
    for site, version in running.items():
        given = sites.get(site)
        if given is not None and given.running != (version == given.version):
            sites[site] = dataclasses.replace(given, running=version == given.version)
    after = rollout if sites == rollout.sites else dataclasses.replace(rollout, sites=sites)
    return _settle(after, at)


def check(rollout: Rollout, at: float, beats: Iterable[Beat], context: Context) -> Rollout:
    """Do what is due at ``at``: judge a hold that is over on ``beats``, or roll back a stage not taken up in time.

    ``beats`` are the heartbeats the hub received (others than the stage's, or
    from other times, are left out); ``context`` says what the gates need of the app.
    """
    n, i = len(rollout.stages), rollout.stage
    if rollout.status is Status.RUNNING and at >= rollout.started_at + rollout.take_up_s:
        late = [s for s in changed_by(rollout, i) if not rollout.sites[s].running]
        if not late:
            return _settle(rollout, at)
        why = f"{names(late)} did not run {_v(rollout.to_version)} within {rollout.take_up_s:g} s"
        return _roll_back(rollout, at, f"stage {i + 1}/{n} {rollout.stages[i].spec}: {why}")
    if rollout.status is not Status.HOLDING or rollout.held_from is None:
        return rollout
    end = rollout.held_from + rollout.hold_s
    if at < end:
        return rollout
    verdict = evaluate(rollout.gates, beats, changed_by(rollout, i), rollout.held_from, end, context)
    reason = f"stage {i + 1}/{n} {rollout.stages[i].spec} {verdict.reason}"
    if not verdict.passed:
        return _roll_back(rollout, at, reason, verdict.gates)
    passed = Step(at, i, Status.PASSED, reason, gates=verdict.gates)
    return _enter(dataclasses.replace(rollout, steps=(*rollout.steps, passed)), i + 1, at)


def roll_back(rollout: Rollout, at: float, reason: str = "rolled back by hand") -> Rollout:
    """Give every changed site the previous version back, at any stage (``failed`` until they run it).

    Raises:
        InvalidRollout: the rollout is rolling back or rolled back already.
    """
    if rollout.status in (Status.FAILED, Status.ROLLED_BACK):
        what = "rolled back" if rollout.status is Status.ROLLED_BACK else "rolling back"
        msg = f"the rollout of app {rollout.app!r} is {what} already: {rollout.steps[-1].reason}"
        raise InvalidRollout(msg)
    return _roll_back(rollout, at, reason)


def resume(rollout: Rollout, at: float) -> Rollout:
    """The rollout after a hub restart at ``at``: a hold, or the time to take a version up, starts again."""
    i, n = rollout.stage, len(rollout.stages)
    if rollout.status is Status.HOLDING:
        why = f"stage {i + 1}/{n}: the hub restarted; the hold starts again (the heartbeats before are gone)"
        step = Step(at, i, Status.HOLDING, why)
        return dataclasses.replace(rollout, held_from=at, steps=(*rollout.steps, step))
    if rollout.status is Status.RUNNING:
        why = f"stage {i + 1}/{n}: the hub restarted; its sites have {rollout.take_up_s:g} s again to run it"
        step = Step(at, i, Status.RUNNING, why)
        return dataclasses.replace(rollout, started_at=at, steps=(*rollout.steps, step))
    return rollout


def due(rollout: Rollout) -> float | None:
    """When :func:`check` has something to do next (None: only :func:`confirm` or :func:`roll_back` can move it)."""
    if rollout.status is Status.RUNNING:
        return rollout.started_at + rollout.take_up_s
    if rollout.status is Status.HOLDING and rollout.held_from is not None:
        return rollout.held_from + rollout.hold_s
    return None


def changed_by(rollout: Rollout, stage: int) -> tuple[str, ...]:
    """The sites stage ``stage`` gives the new version to (not those of earlier stages), by name."""
    return increments([s.sites for s in rollout.stages])[stage]


def _enter(rollout: Rollout, stage: int, at: float) -> Rollout:
    """Start stage ``stage`` at ``at`` (skipping stages that add no site), or end a rollout past its last stage."""
    n, steps, sites = len(rollout.stages), list(rollout.steps), dict(rollout.sites)
    while stage < n and not changed_by(rollout, stage):
        why = f"stage {stage + 1}/{n} {rollout.stages[stage].spec}: no site to change (the stages before reached it)"
        steps.append(Step(at, stage, Status.PASSED, why))
        stage += 1
    if stage == n:
        return dataclasses.replace(rollout, stage=n - 1, status=Status.PASSED, held_from=None, steps=tuple(steps))
    new = changed_by(rollout, stage)
    sites.update({site: SiteVersion(rollout.to_version, at, False) for site in new})
    why = f"stage {stage + 1}/{n} {rollout.stages[stage].spec}: {_v(rollout.to_version)} given to {names(new)}"
    steps.append(Step(at, stage, Status.RUNNING, why, sites=new))
    return dataclasses.replace(
        rollout, stage=stage, status=Status.RUNNING, started_at=at, held_from=None, sites=sites, steps=tuple(steps)
    )


def _settle(rollout: Rollout, at: float) -> Rollout:
    """Open the current stage's hold once its sites run the new version; end a rollback once every site is back."""
    i, n = rollout.stage, len(rollout.stages)
    if rollout.status is Status.RUNNING:
        new = changed_by(rollout, i)
        if all(rollout.sites[s].running for s in new):
            why = f"stage {i + 1}/{n}: {names(new)} on {_v(rollout.to_version)}; holding for {rollout.hold_s:g} s"
            step = Step(at, i, Status.HOLDING, why)
            return dataclasses.replace(rollout, status=Status.HOLDING, held_from=at, steps=(*rollout.steps, step))
    if rollout.status is Status.FAILED and all(v.running for v in rollout.sites.values()):
        why = f"every site runs {_v(rollout.from_version)} again"
        step = Step(at, i, Status.ROLLED_BACK, why)
        return dataclasses.replace(rollout, status=Status.ROLLED_BACK, steps=(*rollout.steps, step))
    return rollout


def _roll_back(rollout: Rollout, at: float, reason: str, gates: Sequence[GateResult] = ()) -> Rollout:
    changed = rollout.on(rollout.to_version)
    sites = {
        site: SiteVersion(rollout.from_version, at, False) if site in changed else v
        for site, v in rollout.sites.items()
    }
    why = f"{reason}; {_v(rollout.from_version)} given back to {names(changed)}" if changed else reason
    step = Step(at, rollout.stage, Status.FAILED, why, sites=changed, gates=tuple(gates))
    failed = dataclasses.replace(
        rollout, status=Status.FAILED, started_at=at, held_from=None, sites=sites, steps=(*rollout.steps, step)
    )
    return _settle(failed, at)


def _v(version: str) -> str:
    """A version for people: its first 12 characters (a source's SHA-256 is 64)."""
    return f"version {version[:12]}"
