"""Staged rollouts of a new app version: stages by site label, health gates, and the rollout's steps.

* :mod:`~hub.control.rollout.stages`: the stage spec ``"kind=truck:1, kind=truck:25%, *"``;
* :mod:`~hub.control.rollout.selection`: which sites each stage changes;
* :mod:`~hub.control.rollout.metrics` and :mod:`~hub.control.rollout.gates`: the gates
  ``"dead_letter_rate<0.01, cpu<0.8"`` and their verdict on a stage's heartbeats;
* :mod:`~hub.control.rollout.model`: a rollout as plain data, in JSON and back;
* :mod:`~hub.control.rollout.steps`: its steps, as pure functions of a clock value and what the hub saw;
* :mod:`~hub.control.rollout.mixing`: whether two versions can run side by side with the hub's results exact;
* :mod:`~hub.control.rollout.records`: a rollout with its new version, as the hub persists it;
* :mod:`~hub.control.rollout.runner`: the hub's runner, which starts rollouts, drives their steps and applies them.

The design, and what is to come, is in ``docs/design/rollouts.md``.
"""

from __future__ import annotations

from hub.control.rollout.gates import Gate, GateResult, Verdict, evaluate, format_gates, parse_gates
from hub.control.rollout.metrics import METRICS, Beat, Context
from hub.control.rollout.model import Rollout, SiteVersion, StagePlan, Status, Step
from hub.control.rollout.selection import select, site_order
from hub.control.rollout.stages import Fleet, Stage, fleet_of, format_stages, parse_stages
from hub.control.rollout.steps import check, confirm, due, plan_stages, resume, roll_back, start

__all__ = [
    "METRICS",
    "Beat",
    "Context",
    "Fleet",
    "Gate",
    "GateResult",
    "Rollout",
    "SiteVersion",
    "Stage",
    "StagePlan",
    "Status",
    "Step",
    "Verdict",
    "check",
    "confirm",
    "due",
    "evaluate",
    "fleet_of",
    "format_gates",
    "format_stages",
    "parse_gates",
    "parse_stages",
    "plan_stages",
    "resume",
    "roll_back",
    "select",
    "site_order",
    "start",
]
