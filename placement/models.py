"""Models at placement: a ``predict`` runs only where its model fits the site's model budget.

A site may declare ``model_budget_bytes`` in ``sites.yaml``, the most memory
one model version may take there. A predict replica loses the candidate sites
whose budget is under its model's estimated size
(:attr:`spanedge.models.spec.ModelSpec.size_bytes`); when none is left, the
placement is refused with the model, its size and the sites' budgets. Its CPU
cost per record is the model's estimate (:attr:`~spanedge.models.spec.ModelSpec.cost_per_record`,
set on the operator by ``Stream.predict``), counted like any operator's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from spanedge.errors import InfeasiblePlacement
from spanedge.models.spec import ModelSpec
from spanedge.operators import Kind, Operator
from spanedge.sites import Sites


class Placed(Protocol):
    """A replica with its operator and candidate sites (:class:`placement.problem.Replica`)."""

    id: str
    op: Operator
    candidates: tuple[str, ...]


def fit_models(replicas: Mapping[str, Placed], order: Sequence[str], sites: Sites) -> None:
    """Drop the sites too small for its model from each predict replica's candidates.

    Raises:
        InfeasiblePlacement: a predict has no candidate site left; the message names the model, its size and
            the budgets of the sites it could have run at.
    """
    for rid in order:
        r = replicas[rid]
        spec = r.op.model
        if r.op.kind is not Kind.PREDICT or spec is None:
            continue
        kept = tuple(c for c in r.candidates if _fits(spec, sites, c))
        if kept:
            r.candidates = kept
            continue
        budgets = ", ".join(f"{c} has {sites.sites[c].model_budget_bytes} bytes" for c in r.candidates)
        msg = (
            f"operator {r.op.describe()} (replica {r.id}) has nowhere to run: {spec.describe()} takes an "
            f"estimated {spec.size_bytes} bytes, over the model budget of every site it may run at ({budgets}); "
            "raise model_budget_bytes in sites.yaml, let it run at the hub (scope='global' or no scope), or "
            "make the model smaller (fewer trees, less depth, fewer clusters)"
        )
        raise InfeasiblePlacement(msg)


def _fits(spec: ModelSpec, sites: Sites, site: str) -> bool:
    budget = sites.sites[site].model_budget_bytes
    return budget is None or spec.size_bytes <= budget
