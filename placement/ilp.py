"""The integer program (HiGHS through highspy by default, CBC through PuLP as a fallback).

The model is built as plain arrays (columns, rows in compressed form) and
handed to HiGHS in one call each; CBC gets the same model through PuLP.

With several hubs the program is solved once per hub, with that hub the
only one among the candidates (see :func:`solve_ilp`); the one program over
all hubs remains as a baseline.

Variables: a binary ``x[r, a]`` per replica ``r`` and candidate site ``a``
(none for replicas with one candidate); in the one program over several
hubs, a binary ``y[h]`` per hub with ``Σ y = 1`` and ``x[r, h] <= y[h]``
(all hub-placed replicas share one hub); a binary ``w[s, p]`` per source site ``s`` and spoke ``p``
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
from dataclasses import dataclass, replace
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

#: Row senses of :meth:`_Model.add`.
EQ, LE = "==", "<="

#: Objective added per replica placed away from its source site (far below any real difference).
TIE_BREAK = 1e-7


@dataclass(frozen=True)
class IlpResult:
    """What the solver found: a complete placement (or ``None``), its hub, status, gap, time, lower bound and objective."""

    placement: dict[str, str] | None
    hub: str | None
    status: str
    optimal: bool
    gap: float | None
    seconds: float
    solver: str
    infeasible: bool = False
    bound: float | None = None
    value: float | None = None


class _Col(int):
    """A column (variable) of the model, told apart from the constants 0 and 1 that fixed choices give."""

    __slots__ = ()


class _Model:
    """Builds the model as arrays: the objective per column, and rows in compressed form with bounds."""

    def __init__(self, problem: Problem, weights: Weights, previous: Previous | None = None) -> None:
        self.p = problem
        self.w = weights
        self.previous = previous
        self.x: dict[str, dict[str, Any]] = {}
        self.costs: list[float] = []
        self.integer: list[bool] = []
        self.starts: list[int] = []
        self.index: list[int] = []
        self.values: list[float] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []
        self.constant = 0.0
        self.capacity_rows = 0
        self.y: dict[str, Any] = {}

    def var(self, integer: bool = True) -> _Col:
        self.costs.append(0.0)
        self.integer.append(integer)
        return _Col(len(self.costs) - 1)

    def add(self, terms: Iterable[_Term], sense: str, rhs: float) -> None:
        """Add the row ``Σ terms (sense) rhs``; ``sense`` is ``==`` or ``<=``."""
        expr: dict[int, float] = {}
        constant = 0.0
        for v, c in terms:
            if isinstance(v, _Col):
                expr[v] = expr.get(v, 0.0) + c
            else:
                constant += v * c
        expr = {v: c for v, c in expr.items() if c != 0}
        if not expr:
            return
        self.starts.append(len(self.index))
        self.index.extend(expr)
        self.values.extend(expr.values())
        self.row_lower.append(rhs - constant if sense == EQ else -math.inf)
        self.row_upper.append(rhs - constant)

    def at(self, r: Replica, site: str) -> Any:
        """The indicator of ``r`` at ``site``: a column, or the constant 0 or 1."""
        if r.is_source:
            return 1 if site == r.home else 0
        host = r if r.colocate is None else self.p.replicas[r.colocate]
        if len(host.candidates) == 1:
            return 1 if site == host.candidates[0] else 0
        return self.x[host.id].get(site, 0)

    def cost(self, v: Any, c: float) -> None:
        if c == 0:
            return
        if isinstance(v, _Col):
            self.costs[v] += c
        else:
            self.constant += v * c

    def build(self) -> None:
        p = self.p
        decisions = p.decisions()
        for r in decisions:
            if len(r.candidates) > 1:
                self.x[r.id] = {c: self.var() for c in r.candidates}
                self.add(((v, 1.0) for v in self.x[r.id].values()), EQ, 1.0)
        if len(p.hubs) > 1:
            self.y = {h: self.var() for h in p.hubs}
            self.add(((v, 1.0) for v in self.y.values()), EQ, 1.0)
            for r in decisions:
                for h, v in self.x.get(r.id, {}).items():
                    if p.is_hub(h):
                        self.add(((v, 1.0), (self.y[h], -1.0)), LE, 0.0)
                if len(r.candidates) == 1 and p.is_hub(r.candidates[0]):
                    self.add(((self.y[r.candidates[0]], 1.0),), EQ, 1.0)
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
            w = {s: self.var() for s in spokes}
            self.add(((v, 1.0) for v in w.values()), LE, 1.0)
            for s in fixed & set(spokes):
                self.add(((w[s], 1.0),), EQ, 1.0)
            for r in group:
                for s, v in self.x[r.id].items():
                    if s in w:
                        self.add(((v, 1.0), (w[s], -1.0)), LE, 0.0)

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
                self.add(row, LE, self.p.cpu(site))
                self.capacity_rows += 1

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
                z = self.var(integer=False)
                rows_u[a].append((z, 1.0))
                rows_v[b].append((z, 1.0))
                self.cost(z, edge_cost(p, self.w, e, a, b))
        for row in (*rows_u.values(), *rows_v.values()):
            self.add(row, EQ, 0.0)

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
                self.add(((self.at(v, b), 1.0), (self.at(u, b), -1.0)), LE, 0.0)
        if len(hubs) == 1:
            for a in spokes:
                c = edge_cost(p, self.w, e, a, hubs[0])
                self.cost(self.at(u, a), c)
                self.cost(self.at(v, a), -c)
            return
        z = {(a, b): self.var(integer=False) for a in spokes for b in hubs}
        for a in spokes:
            row = [(z[a, b], 1.0) for b in hubs]
            self.add([*row, (self.at(u, a), -1.0), (self.at(v, a), 1.0)], EQ, 0.0)
        for b in hubs:
            row = [(z[a, b], 1.0) for a in spokes]
            self.add([*row, (self.at(v, b), -1.0), (self.at(u, b), 1.0)], EQ, 0.0)
        for (a, b), var in z.items():
            self.cost(var, edge_cost(p, self.w, e, a, b))


class _QuietHighs(highspy.Highs):
    """A HiGHS instance whose logging is off before its first call.

    HiGHS writes its "Running HiGHS ... Copyright" banner to the process's
    stdout on the first call that may log, unless ``output_flag`` is already
    false; ``highspy.Highs()`` makes that call (``setCallback``) in its
    constructor, which would corrupt ``spanedge deploy --json``.
    """

    def enableCallbacks(self) -> None:
        """Turn logging off, then enable the callbacks as ``highspy.Highs`` does."""
        self.setOptionValue("output_flag", False)
        super().enableCallbacks()  # type: ignore[no-untyped-call]


class _SolverFailed(Exception):
    """HiGHS failed on a model (not: found it infeasible or ran out of time); CBC is tried next."""


#: HiGHS outcomes that are failures of the solver, not answers about the model.
_HIGHS_FAILED = frozenset(
    {
        highspy.HighsModelStatus.kLoadError,
        highspy.HighsModelStatus.kModelError,
        highspy.HighsModelStatus.kPresolveError,
        highspy.HighsModelStatus.kSolveError,
        highspy.HighsModelStatus.kPostsolveError,
    }
)


@dataclass(frozen=True)
class _Solved:
    """A back-end's answer: column values (``None`` without a solution), whether proven optimal, gap and bound."""

    values: list[float] | None
    optimal: bool
    infeasible: bool
    status: str
    gap: float | None
    bound: float | None


def _highs(model: _Model, time_limit: float) -> _Solved:
    """Solve ``model`` with HiGHS, passing columns, integrality and rows in bulk."""
    if not model.costs:  # every choice is fixed
        return _Solved([], True, False, "", 0.0, model.constant)
    h = _QuietHighs()  # type: ignore[no-untyped-call]
    # Without capacity rows HiGHS presolve reduces the model to (almost) nothing; with them
    # its probing costs more than it saves, as the LP relaxation is already tight.
    presolve = "on" if not model.capacity_rows else "off"
    for key, value in (("mip_rel_gap", GAP), ("time_limit", float(time_limit)), ("presolve", presolve)):
        h.setOptionValue(key, value)
    n = len(model.costs)
    empty_i = np.zeros(0, dtype=np.int32)
    h.addCols(n, np.array(model.costs), np.zeros(n), np.ones(n), 0, empty_i, empty_i, np.zeros(0))
    integer = np.flatnonzero(np.array(model.integer, dtype=bool)).astype(np.int32)
    if len(integer):
        kinds = np.full(len(integer), int(highspy.HighsVarType.kInteger), dtype=np.uint8)
        h.changeColsIntegrality(len(integer), integer, kinds)
    h.addRows(
        len(model.row_lower),
        np.array(model.row_lower),
        np.array(model.row_upper),
        len(model.index),
        np.array(model.starts, dtype=np.int32),
        np.array(model.index, dtype=np.int32),
        np.array(model.values),
    )
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    if status in _HIGHS_FAILED:
        msg = f"highs: {h.modelStatusToString(status)}"
        raise _SolverFailed(msg)
    if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
        return _Solved(None, False, True, "infeasible", None, None)
    if info.primal_solution_status != highspy.SolutionStatus.kSolutionStatusFeasible:
        return _Solved(
            None, False, False, f"{h.modelStatusToString(status)}, no solution within {time_limit:g} s", None, None
        )
    values = list(h.getSolution().col_value)
    gap, bound = float(info.mip_gap), float(info.mip_dual_bound) + model.constant
    optimal = status == highspy.HighsModelStatus.kOptimal
    if not math.isfinite(gap):
        return _Solved(values, optimal, False, "", 0.0 if optimal else None, None)
    return _Solved(values, optimal, False, "", max(gap, 0.0), bound if math.isfinite(bound) else None)


def _cbc(model: _Model, time_limit: float) -> _Solved:
    """Solve ``model`` with CBC through PuLP."""
    prob = pulp.LpProblem("placement", pulp.LpMinimize)
    cols = [
        prob.add_variable(f"v{i}", lowBound=0, upBound=1, cat=pulp.LpBinary if integer else pulp.LpContinuous)
        for i, integer in enumerate(model.integer)
    ]
    prob.setObjective(pulp.LpAffineExpression(zip(cols, model.costs, strict=True), constant=model.constant))
    ends = [*model.starts[1:], len(model.index)]
    for i, (start, end) in enumerate(zip(model.starts, ends, strict=True)):
        row = zip(model.index[start:end], model.values[start:end], strict=True)
        expr = pulp.LpAffineExpression((cols[j], c) for j, c in row)
        lower, upper = model.row_lower[i], model.row_upper[i]
        sense = pulp.LpConstraintEQ if lower == upper else pulp.LpConstraintLE
        prob.addConstraint(pulp.LpConstraint(expr, sense, f"c{i}", upper))
    seconds = max(1, round(time_limit))
    coin = pulp.COIN_CMD(msg=False, timeLimit=seconds, gapRel=GAP)
    if not coin.available():
        with warnings.catch_warnings():
            # PuLP 3.3 deprecates its bundled CBC in favour of COIN_CMD with a separately installed CBC.
            warnings.simplefilter("ignore", DeprecationWarning)
            coin = pulp.PULP_CBC_CMD(msg=False, timeLimit=seconds, gapRel=GAP)
    prob.solve(coin)
    sol = prob.sol_status
    if sol in (pulp.LpSolutionInfeasible, pulp.LpSolutionUnbounded) or prob.status == pulp.LpStatusInfeasible:
        return _Solved(None, False, True, "infeasible", None, None)
    if sol not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return _Solved(
            None, False, False, f"{pulp.LpStatus[prob.status]}, no solution within {time_limit:g} s", None, None
        )
    optimal = sol == pulp.LpSolutionOptimal
    values = [v.value() or 0.0 for v in cols]
    return _Solved(
        values, optimal, False, "", 0.0 if optimal else None, pulp.value(prob.objective) if optimal else None
    )


def solve_ilp(
    problem: Problem,
    weights: Weights,
    time_limit: float = 10.0,
    solver: str = "highs",
    previous: Previous | None = None,
    *,
    per_hub: bool = True,
) -> IlpResult:
    """Build and solve the integer program.

    ``solver`` is ``highs`` (CBC is used only if HiGHS is missing or fails) or
    ``cbc``. A time limit that leaves no solution is reported, not retried.
    With a ``previous`` plan the objective includes the migration term (see
    :mod:`placement.cost`) and ties go to the previous sites.

    With several hubs, the program is solved once per hub with only that hub
    among the candidates (every hub-placed replica shares one hub, so these
    parts cover every placement) and the best part wins: the same optimum as
    one program with a hub choice, whose hub-to-replica pairs make its LP
    many times larger. The parts share ``time_limit``; ties go to the
    previous hub, then to the first in ``problem.hubs``. ``per_hub=False``
    solves the one program instead.
    """
    start = time.perf_counter()
    if len(problem.hubs) == 1 or not per_hub:
        return _solve_one(problem, weights, time_limit, solver, previous)
    first = [previous.hub] if previous is not None and previous.hub in problem.hubs else []
    results: list[IlpResult] = []
    for hub in dict.fromkeys([*first, *problem.hubs]):
        left = time_limit - (time.perf_counter() - start)
        if left <= 0:
            break
        part = problem.at_hub(hub)
        if part is None:
            results.append(IlpResult(None, None, f"no candidates at hub {hub}", False, None, 0.0, solver, True))
            continue
        results.append(_solve_one(part, weights, left, solver, previous))
    return _best(results, len(problem.hubs), time_limit, time.perf_counter() - start, solver)


def _best(results: list[IlpResult], hubs: int, time_limit: float, seconds: float, solver: str) -> IlpResult:
    """The best of the parts solved per hub, with the bound and gap over all of them."""
    found = [(r.value, r) for r in results if r.placement is not None and r.value is not None]
    if not found:
        if len(results) == hubs and all(r.infeasible for r in results):
            return IlpResult(None, None, "infeasible", False, None, seconds, solver, infeasible=True)
        failed = [r.status for r in results if not r.infeasible] or [f"no solution within {time_limit:g} s"]
        return IlpResult(None, None, failed[0], False, None, seconds, results[0].solver if results else solver)
    value, best = found[0]
    for v, r in found[1:]:
        if v < value - 1e-9 * max(1.0, abs(value)):
            value, best = v, r
    complete = len(results) == hubs and all(r.optimal or r.infeasible for r in results)
    bounds = [r.bound for _, r in found]
    bound = min(b for b in bounds if b is not None) if all(b is not None for b in bounds) and complete else None
    gap = None if bound is None else max(0.0, (value - bound) / max(abs(value), 1e-12))
    label = "optimal" if complete else "feasible (time limit)"
    return replace(best, status=label, optimal=complete, gap=gap, seconds=seconds, bound=bound)


def _solve_one(
    problem: Problem, weights: Weights, time_limit: float, solver: str, previous: Previous | None
) -> IlpResult:
    """Build and solve one integer program over ``problem`` as it is."""
    start = time.perf_counter()
    model = _Model(problem, weights, previous)
    model.build()
    names = [solver] if solver == "cbc" else ["highs", "cbc"]
    last = "not run"
    for name in names:
        try:
            solved = _highs(model, time_limit) if name == "highs" else _cbc(model, time_limit)
        except (pulp.PulpSolverError, _SolverFailed) as exc:
            last = f"{name}: {exc}"
            continue
        seconds = time.perf_counter() - start
        if solved.values is None:
            return IlpResult(None, None, solved.status, False, None, seconds, name, infeasible=solved.infeasible)
        # A time limit reached after the gap closed still proves optimality (within the tolerance).
        optimal = solved.optimal or (solved.gap is not None and solved.gap <= GAP)
        placement, hub = _extract(model, solved.values)
        label = "optimal" if optimal else "feasible (time limit)"
        value = model.constant + sum(c * x for c, x in zip(model.costs, solved.values, strict=True))
        return IlpResult(placement, hub, label, optimal, solved.gap, seconds, name, bound=solved.bound, value=value)
    return IlpResult(None, None, last, False, None, time.perf_counter() - start, solver)


def _extract(model: _Model, values: list[float]) -> tuple[dict[str, str], str]:
    p = model.p
    chosen: dict[str, str] = {}
    for r in p.decisions():
        if r.id in model.x:
            cols = model.x[r.id]
            chosen[r.id] = max(cols, key=lambda c: values[cols[c]])
        else:
            chosen[r.id] = r.candidates[0]
    full = p.resolve(chosen)
    used = [s for rid, s in chosen.items() if p.is_hub(s)]
    if used:
        hub = used[0]
    elif model.y:
        hub = max(model.y, key=lambda h: values[model.y[h]])
    else:
        hub = p.hubs[0]
    return full, hub
