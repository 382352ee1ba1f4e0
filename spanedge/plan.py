"""The plan: where every operator replica runs, why, and what it costs.

Replica ids are ``"<operator>@<site>"`` for operators replicated per source
site (``@local`` operators and unscoped record-level operators fed only by
per-site streams; sources are always ``"<stream>@<site>"``) and the bare
operator name for singletons. ``flows`` are the replica-level edges with
their estimated rates, so agents and the hub can wire themselves from the
plan alone.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from spanedge.errors import InvalidPlan


@dataclass(frozen=True)
class Assignment:
    """One replica, the site it runs at, and why.

    ``since`` is the plan version at which ``site`` took the replica over (0:
    from the first plan). It is the ownership epoch of the records the replica
    sends to the hub, which dedupes per epoch, so a replica that moves keeps a
    sequence the hub accepts.
    """

    replica: str
    operator: str
    group: str | None
    site: str
    reason: str = ""
    since: int = 0


@dataclass(frozen=True)
class Handover:
    """A replica that moves between two sites in this plan version, split at an event time.

    Each window belongs to the owner of its start: the old owner (``source``)
    keeps the replica, adding records only to windows that start before
    ``switch_at``, until its watermark has passed their ends; the new owner
    (``target``) adds records only to windows starting at or after it. A
    record-level replica is split by record event time the same way, and a
    session window by the time of each record (a session open across
    ``switch_at`` comes out as two). ``epoch`` is the old owner's epoch
    (its ``since``), which its records to the hub keep carrying.

    Either end may be the hub (``Plan.hub``). The hub cannot seed or split
    Spark's window state, so it runs the query of the previous placement and
    the query of the new one side by side and each writes only the results
    whose origin (window start or record event time) is on its side of
    ``switch_at`` (:mod:`hub.cutoffs`). When the hub is the old owner, the
    replica's source sites keep sending it the replica's input until a little
    past the switch, for its windows to complete and close.
    """

    replica: str
    source: str
    target: str
    switch_at: float
    epoch: int = 0


@dataclass(frozen=True)
class Flow:
    """A replica-level edge with its estimated records/s and bytes/s."""

    src: str
    dst: str
    rate: float
    bytes_per_s: float


@dataclass(frozen=True)
class Totals:
    """The cost of a placement: WAN traffic and source-to-sink latency."""

    wan_bytes_per_s: float
    worst_latency_ms: float
    mean_latency_ms: float
    objective: float
    hub_cpu: float = 0.0
    violations: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool:
        """False when the placement breaks a rule of the problem (a baseline may: it ignores capacities)."""
        return not self.violations

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Totals:
        """Rebuild from ``dataclasses.asdict`` output (JSON lists become tuples)."""
        return cls(**{**data, "violations": tuple(data.get("violations", ()))})


@dataclass(frozen=True)
class SolverInfo:
    """How the placement was found."""

    method: str
    status: str
    seconds: float
    gap: float | None = None


@dataclass(frozen=True)
class Plan:
    """A placement of an app's replicas on sites."""

    app: str
    version: int
    hub: str
    assignments: tuple[Assignment, ...]
    flows: tuple[Flow, ...]
    totals: Totals
    solver: SolverInfo
    baselines: dict[str, Totals] = field(default_factory=dict)
    slo_ms: float | None = None
    warnings: tuple[str, ...] = ()
    app_file: str = ""
    app_source: str = ""
    handovers: tuple[Handover, ...] = ()

    def site_of(self, replica: str) -> str:
        """Return the site where ``replica`` runs."""
        for a in self.assignments:
            if a.replica == replica:
                return a.site
        msg = f"plan of app '{self.app}' has no replica '{replica}'"
        raise InvalidPlan(msg)

    def site_of_or_none(self, replica: str) -> str | None:
        """Return the site where ``replica`` runs, ``None`` if the plan has no such replica."""
        return next((a.site for a in self.assignments if a.replica == replica), None)

    def assignment(self, replica: str) -> Assignment:
        """Return the assignment of ``replica``."""
        for a in self.assignments:
            if a.replica == replica:
                return a
        msg = f"plan of app '{self.app}' has no replica '{replica}'"
        raise InvalidPlan(msg)

    def handed_over(self, site: str) -> dict[str, tuple[float, float, int]]:
        """Replicas ``site`` runs only for part of event time: ``{replica: (from, before, epoch)}``.

        The old owner of a handover owns the windows starting before the
        switch time (with its old epoch), the new owner those starting at or
        after it (with the epoch of its assignment).
        """
        owned: dict[str, tuple[float, float, int]] = {}
        for h in self.handovers:
            if h.source == site:
                owned[h.replica] = (-math.inf, h.switch_at, h.epoch)
            elif h.target == site:
                owned[h.replica] = (h.switch_at, math.inf, self.assignment(h.replica).since)
        return owned

    def at(self, site: str) -> list[Assignment]:
        """Replicas that run at ``site``, in plan (topological) order."""
        return [a for a in self.assignments if a.site == site]

    def inputs(self, replica: str) -> list[Flow]:
        """Flows into ``replica``."""
        return [f for f in self.flows if f.dst == replica]

    def outputs(self, replica: str) -> list[Flow]:
        """Flows out of ``replica``."""
        return [f for f in self.flows if f.src == replica]

    def crossing(self) -> list[Flow]:
        """Flows whose two ends run at different sites."""
        site = {a.replica: a.site for a in self.assignments}
        return [f for f in self.flows if site[f.src] != site[f.dst]]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The plan as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """Rebuild a plan from :meth:`to_dict` output; raise :class:`InvalidPlan` if malformed."""
        try:
            return cls(
                app=str(data["app"]),
                version=int(data["version"]),
                hub=str(data["hub"]),
                assignments=tuple(Assignment(**a) for a in data["assignments"]),
                flows=tuple(Flow(**f) for f in data["flows"]),
                totals=Totals.from_dict(data["totals"]),
                solver=SolverInfo(**data["solver"]),
                baselines={k: Totals.from_dict(v) for k, v in data.get("baselines", {}).items()},
                slo_ms=data.get("slo_ms"),
                warnings=tuple(data.get("warnings", ())),
                app_file=str(data.get("app_file", "")),
                app_source=str(data.get("app_source", "")),
                handovers=tuple(Handover(**h) for h in data.get("handovers", ())),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            msg = f"malformed plan: {exc!r}; regenerate it with spanedge deploy --dry-run --output plan.json"
            raise InvalidPlan(msg) from None

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """Parse a plan from JSON text."""
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            msg = f"plan is not valid JSON ({exc}); regenerate it with spanedge deploy --dry-run --output plan.json"
            raise InvalidPlan(msg) from None


def replica_id(operator: str, group: str | None) -> str:
    """Return the replica id of ``operator`` for source site ``group`` (or the singleton)."""
    return f"{operator}@{group}" if group else operator


def split_replica(replica: str) -> tuple[str, str | None]:
    """Split a replica id into ``(operator, group)``."""
    operator, _, group = replica.partition("@")
    return operator, group or None
