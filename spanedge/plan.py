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
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from spanedge.errors import InvalidPlan
from spanedge.keyrange import KEY_SPACE, Share, complement, part_epoch


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
    record-level replica is split by record event time the same way. A
    session belongs to the owner of its start between spokes (both add
    every record, each emits its own sessions; see
    :mod:`spanedge.runtime.windows`) and is split by record time when the
    hub is at one end. ``epoch`` is the old owner's epoch (its ``since``),
    which its records to the hub keep carrying.

    Either end may be the hub (``Plan.hub``). The hub cannot seed or split
    Spark's window state, so it runs the query of the previous placement and
    the query of the new one side by side and each writes only the results
    whose origin (window start or record event time) is on its side of
    ``switch_at`` (:mod:`hub.handover.cutoffs`). When the hub is the old owner, the
    replica's source sites keep sending it the replica's input until a little
    past the switch, for its windows to complete and close.

    When a keyed replica is split or merged (see :class:`KeyPart`), only the
    keys in ``[keys_from, keys_before)`` move; the others stay where they
    were. A move of the whole replica covers every key.

    ``recover_from`` is set when the old owner is gone for good: its part
    is then recomputed by the replica's source site (:attr:`recoverer`)
    from the sensor messages it spooled, for the windows (or records) whose
    origin lies in ``[recover_from, switch_at)``; the old owner, should it
    come back, runs no part (see :mod:`edge_agent.recovery`).
    """

    replica: str
    source: str
    target: str
    switch_at: float
    epoch: int = 0
    keys_from: int = 0
    keys_before: int = KEY_SPACE
    recover_from: float | None = None
    recoverer: str | None = None

    @property
    def keyed(self) -> bool:
        """True if only part of the replica's keys move."""
        return self.keys_from != 0 or self.keys_before != KEY_SPACE


@dataclass(frozen=True)
class Join:
    """A source site new to the app in this plan version, and the event time from which its data counts at the hub.

    The hub cannot add a site's records to the windows it holds open: from
    ``switch_at`` on, its windows (and record-level results) take the site's
    records; before it, the hub's query of the placement without the site
    writes them, so the other sites' results come out as they would have.
    ``switch_at`` is chosen as for a handover to the hub
    (:mod:`hub.handover.switches`).
    """

    site: str
    switch_at: float


@dataclass(frozen=True)
class KeyPart:
    """A share of a keyed replica's keys that runs at another site than its assignment.

    The part at ``site`` owns the window keys whose stable hash
    (:func:`spanedge.keyrange.key_hash`) is in ``[keys_from, keys_before)``;
    the assignment's site owns the rest. ``site`` also runs the record-level
    replicas of the same source site before the part (only to feed it) and
    after it (for its results): see :meth:`Plan.part_chain`. ``since`` is the
    plan version at which ``site`` took the part over; its records to the hub
    carry :func:`spanedge.keyrange.part_epoch` of it. ``share`` is the share
    of the replica's records the plan expects the part to take, as the sites
    measured its keys (None: the range's share of the key space).
    """

    replica: str
    site: str
    keys_from: int
    keys_before: int
    since: int = 0
    reason: str = ""
    share: float | None = None

    @property
    def epoch(self) -> int:
        """The epoch of the records this part sends to the hub."""
        return part_epoch(self.since)

    @property
    def load_share(self) -> float:
        """The share of the replica's records (and load) the part takes."""
        return (self.keys_before - self.keys_from) / KEY_SPACE if self.share is None else self.share


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
    parts: tuple[KeyPart, ...] = ()
    joins: tuple[Join, ...] = ()
    #: the leader epoch of the hub that sent the plan (:mod:`hub.ha.lease`; 0: a hub without ``--ha``)
    hub_epoch: int = 0
    #: the site runs this version on trial, in a staged rollout's stage: it keeps what it needs to go back
    trial: bool = False

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
        after it (with the epoch of its assignment). An old owner whose part
        another site recovers (``Handover.recoverer``) owns nothing.
        """
        owned: dict[str, tuple[float, float, int]] = {}
        keyed = self.keyed()
        for h in self.handovers:
            if h.replica in keyed:
                continue  # see shares()
            if h.source == site and h.recoverer is None:
                owned[h.replica] = (-math.inf, h.switch_at, h.epoch)
            elif h.target == site:
                owned[h.replica] = (h.switch_at, math.inf, self.assignment(h.replica).since)
        return owned

    def recoveries(self, site: str) -> list[Handover]:
        """The handovers whose gone old owner's part ``site`` recomputes (see :attr:`Handover.recover_from`)."""
        return [h for h in self.handovers if h.recoverer == site and h.recover_from is not None]

    def keyed(self) -> set[str]:
        """Replicas whose keys are divided between sites: split in parts, or split or merged by a handover."""
        return {p.replica for p in self.parts} | {h.replica for h in self.handovers if h.keyed}

    def owners(self, replica: str) -> list[tuple[int, int, str, int]]:
        """Who owns the keys of ``replica`` now: ``(keys_from, keys_before, site, epoch)`` ranges in key order.

        The assignment's site owns the keys no part owns (one range of the
        whole key space for a replica that is not split).
        """
        a = self.assignment(replica)
        parts = [(p.keys_from, p.keys_before, p.site, p.epoch) for p in self.parts if p.replica == replica]
        own = [(lo, hi, a.site, a.since) for lo, hi in complement((p[0], p[1]) for p in parts)]
        return sorted(parts + own)

    def shares(self, site: str, retired: Collection[str] = ()) -> dict[str, tuple[Share, ...]]:
        """What ``site`` owns of each keyed replica (:meth:`keyed`) it runs: ``{replica: shares}``.

        The assignment's site owns the keys no part owns, with the
        assignment's epoch; a part's site its range, with the part's epoch.
        Keys a handover brings to ``site`` are its own from the switch time
        on; keys it hands over stay its own before the switch, with the
        handover's epoch, unless the replica is in ``retired`` (that part is
        done).
        """
        out: dict[str, tuple[Share, ...]] = {}
        for replica in sorted(self.keyed()):
            now = [(lo, hi, epoch) for lo, hi, owner, epoch in self.owners(replica) if owner == site]
            moves = [h for h in self.handovers if h.replica == replica]
            owned: list[Share] = []
            for lo, hi, epoch in now:
                for start, (k0, k1) in _cut(lo, hi, [h for h in moves if h.target == site]):
                    owned.append(Share(k0, k1, start, math.inf, epoch))
            if replica not in retired:
                owned += [
                    Share(h.keys_from, h.keys_before, -math.inf, h.switch_at, h.epoch)
                    for h in moves
                    if h.source == site
                ]
            if owned:
                out[replica] = tuple(owned)
        return out

    def part_chain(self, replica: str) -> tuple[list[str], list[str]]:
        """The replicas a part of ``replica`` runs with it, besides its sources: ``(before, after)``.

        ``before`` are the replicas of the same source site that feed it
        (directly or not), ``after`` those it feeds, in plan order; replicas
        at the hub are in neither. A part runs ``before`` only to feed itself
        and ``after`` on its own results.
        """
        group = self.assignment(replica).group
        where = {b.replica: b for b in self.assignments}

        def walk(edges: Callable[[str], list[Flow]], end: Callable[[Flow], str]) -> set[str]:
            found: set[str] = set()
            todo = [replica]
            while todo:
                for f in edges(todo.pop()):
                    b = where.get(end(f))
                    if b is not None and b.replica not in found and b.group == group and b.site != self.hub:
                        found.add(b.replica)
                        todo.append(b.replica)
            return found

        ups = walk(self.inputs, lambda f: f.src)
        downs = walk(self.outputs, lambda f: f.dst)
        order = [b.replica for b in self.assignments]
        return [r for r in order if r in ups], [r for r in order if r in downs]

    def source_sites(self) -> set[str]:
        """The sites whose streams the plan reads: the source sites of its per-site replicas."""
        return {a.group for a in self.assignments if a.group is not None}

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
        """A JSON-ready dictionary; without key parts, joins, hub epoch or trial no ``parts``, ``joins``, ``hub_epoch``, ``trial``.

        A handover of every key has no key range.
        """
        data = _fields(self)  # not dataclasses.asdict: it deep-copies every value, slow for a plan of 1,000 sites
        data["assignments"] = tuple(_fields(a) for a in self.assignments)
        data["flows"] = tuple(_fields(f) for f in self.flows)
        data["totals"] = _fields(self.totals)
        data["solver"] = _fields(self.solver)
        data["baselines"] = {name: _fields(t) for name, t in self.baselines.items()}
        data["handovers"] = tuple(_fields(h) for h in self.handovers)
        data["parts"] = tuple(_fields(p) for p in self.parts)
        data["joins"] = tuple(_fields(j) for j in self.joins)
        if not self.parts:
            del data["parts"]
        if not self.joins:
            del data["joins"]
        if not self.hub_epoch:
            del data["hub_epoch"]
        if not self.trial:
            del data["trial"]
        for p in data.get("parts", ()):
            if p["share"] is None:
                del p["share"]
        for h in data["handovers"]:
            if h["keys_from"] == 0 and h["keys_before"] == KEY_SPACE:
                del h["keys_from"], h["keys_before"]
            if h["recoverer"] is None:
                del h["recover_from"], h["recoverer"]
        return data

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
                parts=tuple(KeyPart(**p) for p in data.get("parts", ())),
                joins=tuple(Join(**j) for j in data.get("joins", ())),
                hub_epoch=int(data.get("hub_epoch", 0)),
                trial=data.get("trial", False) is True,
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


def _fields(obj: Any) -> dict[str, Any]:
    """The fields of dataclass ``obj`` by name, as they are (no copy: every value of a plan is immutable)."""
    return {name: getattr(obj, name) for name in _names(type(obj))}


_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def replica_id(operator: str, group: str | None) -> str:
    """Return the replica id of ``operator`` for source site ``group`` (or the singleton)."""
    return f"{operator}@{group}" if group else operator


def _cut(lo: int, hi: int, moves: list[Handover]) -> list[tuple[float, tuple[int, int]]]:
    """Divide keys ``[lo, hi)`` by the handovers bringing some of them: ``(owned from, range)`` pieces."""
    pieces: list[tuple[float, tuple[int, int]]] = []
    at = lo
    for h in sorted(moves, key=lambda h: h.keys_from):
        k0, k1 = max(lo, h.keys_from), min(hi, h.keys_before)
        if k0 >= k1:
            continue
        if k0 > at:
            pieces.append((-math.inf, (at, k0)))
        pieces.append((h.switch_at, (k0, k1)))
        at = k1
    if at < hi:
        pieces.append((-math.inf, (at, hi)))
    return pieces


def split_replica(replica: str) -> tuple[str, str | None]:
    """Split a replica id into ``(operator, group)``."""
    operator, _, group = replica.partition("@")
    return operator, group or None
