"""The integer program (PuLP; HiGHS by default, CBC as a fallback).

Variables: a binary ``x[r, a]`` per replica ``r`` and candidate site ``a``
(none for replicas with one candidate); with several hubs, a binary ``y[h]``
per hub with ``Σ y = 1`` and ``x[r, h] <= y[h]`` (all hub-placed replicas
share one hub); a binary ``w[s, p]`` per source site ``s`` and spoke ``p``
with ``Σ_p w <= 1`` and ``x[r, p] <= w[s, p]`` (the spoke-placed replicas of
``s`` share one spoke). Capacity: ``Σ_r load(r) x[r, a] <= cpu(a)``, only
where the candidates could exceed it.

Edges: an edge with a fixed end costs a linear term. Otherwise its cost is
``Σ c(a, b) z[e, a, b]`` with continuous ``z >= 0`` in the marginal form
``Σ_b z[e, a, b] = x[u, a]`` and ``Σ_a z[e, a, b] = x[v, b]``, which is tight
(unlike the McCormick form); pairs the runtime forbids (hub to spoke, two
hubs, two spokes for one source site) get no ``z``, which enforces those
rules. Between two replicas of one source site the zero-cost pairs are
eliminated (see :meth:`_Model._same_home_edge`); with one hub such an edge is
linear in ``x``.

Re-plan: moving replica ``r`` from its previous site ``a`` to ``c`` costs
``move_cost(a, c) x[r, c]`` (its state bytes × link cost), linear in ``x``.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from placement.cost import Weights, edge_cost, move_cost, moved_state
from placement.problem import Previous, Problem, Replica
from spanedge.errors import MissingExtra

try:
    import highspy
    import numpy as np
    import pulp
except ModuleNotFoundError as exc:
    # The light core (`pip install spanedge`) has no solver; say which extra brings it.
    raise MissingExtra((exc.name or "pulp").partition(".")[0], "placement") from None

_Term = tuple[Any, float]

#: Relative gap at which the solver stops: the plan is optimal within this fraction.
GAP = 1e-4

#: Objective added per replica placed away from its source site (far below any real difference).
TIE_BREAK = 1e-7


@dataclass(frozen=True)
class IlpResult:
    """What the solver found: a complete placement (or ``None``), its hub, status, gap, time and lower bound."""

    placement: dict[str, str] | None
    hub: str | None
    status: str
    optimal: bool
    gap: float | None
    seconds: float
    solver: str
    infeasible: bool = False
    bound: float | None = None


class _Model:
    """Builds the PuLP problem with plain dictionaries for speed."""

    def __init__(self, problem: Problem, weights: Weights, previous: Previous | None = None) -> None:
        self.p = problem
        self.w = weights
        self.previous = previous
        self.prob = pulp.LpProblem("placement", pulp.LpMinimize)
        self.x: dict[str, dict[str, Any]] = {}
        self.n = 0
        self.rows = 0
        self.objective: dict[Any, float] = {}
        self.constant = 0.0
        self.y: dict[str, Any] = {}

    def var(self, cat: str = pulp.LpBinary, prefix: str = "v") -> Any:
        self.n += 1
        return self.prob.add_variable(f"{prefix}{self.n}", lowBound=0, upBound=1, cat=cat)

    def add(self, terms: Iterable[_Term], sense: int, rhs: float) -> None:
        expr: dict[Any, float] = {}
        constant = 0.0
        for v, c in terms:
            if isinstance(v, (int, float)):
                constant += v * c
            else:
                expr[v] = expr.get(v, 0.0) + c
        self.rows += 1
        if not expr:
            return
        self.prob.addConstraint(
            pulp.LpConstraint(pulp.LpAffineExpression(expr), sense, f"c{self.rows}", rhs - constant)
        )

    def at(self, r: Replica, site: str) -> Any:
        """The indicator of ``r`` at ``site``: a variable, or the constant 0 or 1."""
        if r.is_source:
            return 1 if site == r.home else 0
        host = r if r.colocate is None else self.p.replicas[r.colocate]
        if len(host.candidates) == 1:
            return 1 if site == host.candidates[0] else 0
        return self.x[host.id].get(site, 0)

    def cost(self, v: Any, c: float) -> None:
        if c == 0:
            return
        if isinstance(v, (int, float)):
            self.constant += v * c
        else:
            self.objective[v] = self.objective.get(v, 0.0) + c

    def build(self) -> None:
        p = self.p
        decisions = p.decisions()
        for r in decisions:
            if len(r.candidates) > 1:
                self.x[r.id] = {c: self.var(prefix="x") for c in r.candidates}
                self.add(((v, 1.0) for v in self.x[r.id].values()), pulp.LpConstraintEQ, 1.0)
        if len(p.hubs) > 1:
            self.y = {h: self.var(prefix="y") for h in p.hubs}
            self.add(((v, 1.0) for v in self.y.values()), pulp.LpConstraintEQ, 1.0)
            for r in decisions:
                for h, v in self.x.get(r.id, {}).items():
                    if p.is_hub(h):
                        self.add(((v, 1.0), (self.y[h], -1.0)), pulp.LpConstraintLE, 0.0)
                if len(r.candidates) == 1 and p.is_hub(r.candidates[0]):
                    self.add(((self.y[r.candidates[0]], 1.0),), pulp.LpConstraintEQ, 1.0)
        for r in decisions:
            before = self.previous.placement.get(r.id) if self.previous is not None else None
            for c, v in self.x.get(r.id, {}).items():
                if before in r.candidates:
                    # Break ties towards the previous site, so a re-plan moves nothing without a reason.
                    if c != before:
                        self.cost(v, TIE_BREAK * 2.0)
                elif c != r.home:
                    # Break ties towards the source site, so re-solving an unchanged problem keeps the plan.
                    self.cost(v, TIE_BREAK * (2.0 if not p.is_hub(c) else 1.0))
        self._migration(decisions)
        self._same_spoke(decisions)
        self._capacity(decisions)
        for e in p.edges:
            self._edge(e)
        self.prob.setObjective(pulp.LpAffineExpression(self.objective, constant=self.constant))

    def _migration(self, decisions: list[Replica]) -> None:
        """Moving a replica from where the previous plan ran it ships its state: linear in ``x``."""
        if self.previous is None:
            return
        for r in decisions:
            before = self.previous.placement.get(r.id)
            state = moved_state(self.p, self.previous, r.id)
            if before is None or state <= 0:
                continue
            for c in r.candidates:
                self.cost(self.at(r, c), move_cost(self.p, self.w, state, before, c))

    def _same_spoke(self, decisions: list[Replica]) -> None:
        by_home: dict[str, list[Replica]] = {}
        pinned: dict[str, set[str]] = {}
        for r in decisions:
            if r.home is not None and r.id in self.x:
                by_home.setdefault(r.home, []).append(r)
            elif r.home is not None:
                pinned.setdefault(r.home, set()).add(r.candidates[0])
        for home, group in by_home.items():
            spokes = sorted({c for r in group for c in r.candidates if not self.p.is_hub(c)})
            fixed = pinned.get(home, set())
            if len(spokes) <= 1 or (len(group) < 2 and not fixed):
                continue
            w = {s: self.var(prefix="w") for s in spokes}
            self.add(((v, 1.0) for v in w.values()), pulp.LpConstraintLE, 1.0)
            for s in fixed & set(spokes):
                self.add(((w[s], 1.0),), pulp.LpConstraintEQ, 1.0)
            for r in group:
                for s, v in self.x[r.id].items():
                    if s in w:
                        self.add(((v, 1.0), (w[s], -1.0)), pulp.LpConstraintLE, 0.0)

    def _capacity(self, decisions: list[Replica]) -> None:
        terms: dict[str, list[_Term]] = {}
        peak: dict[str, float] = {}
        fixed = [r for r in self.p.replicas.values() if r.is_source and r.attached]
        for r in [*decisions, *fixed]:
            load = self.p.load(r.id)
            if load <= 0:
                continue
            for c in r.candidates:
                terms.setdefault(c, []).append((self.at(r, c), load))
                peak[c] = peak.get(c, 0.0) + load
        for site, row in terms.items():
            if peak[site] > self.p.cpu(site):
                self.add(row, pulp.LpConstraintLE, self.p.cpu(site))

    def _edge(self, e: Any) -> None:
        p = self.p
        u, v = p.replicas[e.src], p.replicas[e.dst]
        if v.colocate == u.id:
            return
        cu = u.candidates if not u.is_source else (u.home,)
        cv = v.candidates if v.colocate is None else p.replicas[v.colocate].candidates
        if len(cu) == 1 or len(cv) == 1:
            for a in cu:
                for b in cv:
                    c = edge_cost(p, self.w, e, str(a), b)
                    if c:
                        if len(cu) == 1:
                            self.cost(self.at(v, b), c)
                        else:
                            self.cost(self.at(u, str(a)), c)
            return
        if u.home is not None and u.home == v.home:
            self._same_home_edge(e, u, v, cu, cv)
            return
        rows_u: dict[str, list[_Term]] = {str(a): [(self.at(u, str(a)), -1.0)] for a in cu}
        rows_v: dict[str, list[_Term]] = {b: [(self.at(v, b), -1.0)] for b in cv}
        for a in cu:
            a = str(a)
            hub_a = p.is_hub(a)
            for b in cv:
                if a != b:
                    hub_b = p.is_hub(b)
                    if hub_a or (not hub_b and u.home == v.home):
                        continue
                z = self.var(cat=pulp.LpContinuous, prefix="z")
                rows_u[a].append((z, 1.0))
                rows_v[b].append((z, 1.0))
                self.cost(z, edge_cost(p, self.w, e, a, b))
        for row in (*rows_u.values(), *rows_v.values()):
            self.add(row, pulp.LpConstraintEQ, 0.0)

    def _same_home_edge(self, e: Any, u: Replica, v: Replica, cu: tuple[str, ...], cv: tuple[str, ...]) -> None:
        """An edge between two replicas of one source site, in the marginal form with the zero-cost pairs eliminated.

        Both ends sit at the site's spoke ``p`` or at the hub ``h``, and ``v``
        is at the spoke only if ``u`` is: so ``z[p, p] = x[v, p]`` and
        ``z[h, h] = x[u, h]``, leaving ``Σ_h z[p, h] = x[u, p] - x[v, p]`` and
        ``Σ_p z[p, h] = x[v, h] - x[u, h]``. With one hub the edge's cost is
        linear in ``x``.
        """
        p = self.p
        spokes = [a for a in cu if not p.is_hub(a)]
        hubs = [b for b in cv if p.is_hub(b)]
        for b in cv:
            if not p.is_hub(b):
                self.add(((self.at(v, b), 1.0), (self.at(u, b), -1.0)), pulp.LpConstraintLE, 0.0)
        if len(hubs) == 1:
            for a in spokes:
                c = edge_cost(p, self.w, e, a, hubs[0])
                self.cost(self.at(u, a), c)
                self.cost(self.at(v, a), -c)
            return
        z = {(a, b): self.var(cat=pulp.LpContinuous, prefix="z") for a in spokes for b in hubs}
        for a in spokes:
            row = [(z[a, b], 1.0) for b in hubs]
            self.add([*row, (self.at(u, a), -1.0), (self.at(v, a), 1.0)], pulp.LpConstraintEQ, 0.0)
        for b in hubs:
            row = [(z[a, b], 1.0) for a in spokes]
            self.add([*row, (self.at(v, b), -1.0), (self.at(u, b), 1.0)], pulp.LpConstraintEQ, 0.0)
        for (a, b), var in z.items():
            self.cost(var, edge_cost(p, self.w, e, a, b))


class _QuietHighs(highspy.Highs):
    """A HiGHS instance whose logging is off before its first call.

    HiGHS writes its "Running HiGHS ... Copyright" banner to the process's
    stdout on the first call that may log, unless ``output_flag`` is already
    false; ``highspy.Highs()`` makes that call (``setCallback``) in its
    constructor, before PuLP can set the option.
    """

    def enableCallbacks(self) -> None:
        """Turn logging off, then enable the callbacks as ``highspy.Highs`` does."""
        self.setOptionValue("output_flag", False)
        super().enableCallbacks()  # type: ignore[no-untyped-call]


class _HiGHS(pulp.HiGHS):  # type: ignore[misc]
    """PuLP's HiGHS interface, passing columns, integrality and rows in bulk, and silent with ``msg=False``.

    PuLP adds them one call at a time, which costs more than solving these
    models; the result is the same model. PuLP's own instance prints HiGHS's
    banner on stdout even with ``msg=False``, which would corrupt
    ``spanedge deploy --json``; this one prints nothing.
    """

    def createAndConfigureSolver(self, lp: Any) -> None:
        """Create ``lp.solverModel`` (quiet unless ``msg``) and set the options as PuLP does."""
        lp.solverModel = highspy.Highs() if self.msg else _QuietHighs()  # type: ignore[no-untyped-call]
        if self.callbackTuple:
            lp.solverModel.setCallback(*self.callbackTuple)
        for kind in self.callbacksToActivate or ():
            lp.solverModel.startCallback(kind)
        options: dict[str, Any] = {
            "mip_rel_gap": self.gapRel,
            "mip_abs_gap": self.gapAbs,
            "threads": self.threads,
            "time_limit": None if self.timeLimit is None else float(self.timeLimit),
        }
        if not self.msg:
            options["output_flag"] = False
        options.update(self.optionsDict)
        for key, value in options.items():
            if value is not None:
                lp.solverModel.setOptionValue(key, value)

    def buildSolverModel(self, lp: Any) -> None:
        """Load ``lp`` into ``lp.solverModel`` with one call per kind of data."""
        if lp.sense != pulp.LpMinimize:
            super().buildSolverModel(lp)
            return
        inf = highspy.kHighsInf
        variables = lp.variables()
        n = len(variables)
        for i, var in enumerate(variables):
            var.index = i
        lower = np.array([-inf if v.lowBound is None else v.lowBound for v in variables], dtype=np.float64)
        upper = np.array([inf if v.upBound is None else v.upBound for v in variables], dtype=np.float64)
        costs = np.array([lp.objective.get(v, 0.0) for v in variables], dtype=np.float64)
        empty_i = np.zeros(0, dtype=np.int32)
        model = lp.solverModel
        model.addCols(n, costs, lower, upper, 0, empty_i, empty_i, np.zeros(0, dtype=np.float64))
        integer = np.array([v.index for v in variables if v.cat == pulp.LpInteger], dtype=np.int32)
        if self.mip and len(integer):
            kinds = np.full(len(integer), int(highspy.HighsVarType.kInteger), dtype=np.uint8)
            model.changeColsIntegrality(len(integer), integer, kinds)
        starts: list[int] = []
        index: list[int] = []
        values: list[float] = []
        row_lower: list[float] = []
        row_upper: list[float] = []
        for i, constraint in enumerate(lp._constraints.values()):
            constraint.index = i
            starts.append(len(index))
            for var, coefficient in constraint.items():
                if coefficient != 0:
                    index.append(var.index)
                    values.append(coefficient)
            lb, ub = constraint.getLb(), constraint.getUb()
            row_lower.append(-inf if lb is None else lb)
            row_upper.append(inf if ub is None else ub)
        model.addRows(
            len(row_lower),
            np.array(row_lower, dtype=np.float64),
            np.array(row_upper, dtype=np.float64),
            len(index),
            np.array(starts, dtype=np.int32),
            np.array(index, dtype=np.int32),
            np.array(values, dtype=np.float64),
        )


def _solver(name: str, time_limit: float) -> Any:
    if name == "highs":
        # The model is already compact and its LP relaxation tight; HiGHS presolve
        # (probing) costs more than it saves on these models.
        return _HiGHS(msg=False, timeLimit=time_limit, gapRel=GAP, presolve="off")
    seconds = max(1, round(time_limit))
    coin = pulp.COIN_CMD(msg=False, timeLimit=seconds, gapRel=GAP)
    if coin.available():
        return coin
    with warnings.catch_warnings():
        # PuLP 3.3 deprecates its bundled CBC in favour of COIN_CMD with a separately installed CBC.
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=seconds, gapRel=GAP)


def solve_ilp(
    problem: Problem,
    weights: Weights,
    time_limit: float = 10.0,
    solver: str = "highs",
    previous: Previous | None = None,
) -> IlpResult:
    """Build and solve the integer program.

    ``solver`` is ``highs`` (CBC is used only if HiGHS is missing or fails) or
    ``cbc``. A time limit that leaves no solution is reported, not retried.
    With a ``previous`` plan the objective includes the migration term (see
    :mod:`placement.cost`) and ties go to the previous sites.
    """
    start = time.perf_counter()
    model = _Model(problem, weights, previous)
    model.build()
    names = [solver] if solver == "cbc" else ["highs", "cbc"]
    last = "not run"
    for name in names:
        if name == "highs" and not pulp.HiGHS().available():
            last = "highs: highspy is not installed"
            continue
        try:
            model.prob.solve(_solver(name, time_limit))
        except pulp.PulpSolverError as exc:
            last = f"{name}: {exc}"
            continue
        seconds = time.perf_counter() - start
        sol = model.prob.sol_status
        if sol in (pulp.LpSolutionInfeasible, pulp.LpSolutionUnbounded) or model.prob.status == pulp.LpStatusInfeasible:
            return IlpResult(None, None, "infeasible", False, None, seconds, name, infeasible=True)
        if sol not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            status = f"{pulp.LpStatus[model.prob.status]}, no solution within {time_limit:g} s"
            return IlpResult(None, None, status, False, None, seconds, name)
        gap, bound = _bounds(model, name, sol == pulp.LpSolutionOptimal)
        # A time limit reached after the gap closed still proves optimality (within the tolerance).
        optimal = sol == pulp.LpSolutionOptimal or (gap is not None and gap <= GAP)
        placement, hub = _extract(model)
        label = "optimal" if optimal else "feasible (time limit)"
        return IlpResult(placement, hub, label, optimal, gap, seconds, name, bound=bound)
    return IlpResult(None, None, last, False, None, time.perf_counter() - start, solver)


def _bounds(model: _Model, name: str, optimal: bool) -> tuple[float | None, float | None]:
    """The relative gap and the lower bound on the objective the solver proved."""
    value = pulp.value(model.prob.objective)
    if name != "highs":
        return (0.0, value) if optimal else (None, None)
    info = model.prob.solverModel.getInfo()
    gap = float(info.mip_gap)
    bound = float(info.mip_dual_bound) + model.constant
    if not math.isfinite(gap):
        return (0.0, value) if optimal else (None, None)
    return max(gap, 0.0), bound if math.isfinite(bound) else None


def _extract(model: _Model) -> tuple[dict[str, str], str]:
    p = model.p
    chosen: dict[str, str] = {}
    for r in p.decisions():
        if r.id in model.x:
            chosen[r.id] = max(model.x[r.id], key=lambda c: model.x[r.id][c].value() or 0.0)
        else:
            chosen[r.id] = r.candidates[0]
    full = p.resolve(chosen)
    used = [s for rid, s in chosen.items() if p.is_hub(s)]
    if used:
        hub = used[0]
    elif model.y:
        hub = max(model.y, key=lambda h: model.y[h].value() or 0.0)
    else:
        hub = p.hubs[0]
    return full, hub
