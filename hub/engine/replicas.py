"""An app's plan as the hub reads it: each replica's place, its operator and its inputs."""

from __future__ import annotations

from spanedge.app import App
from spanedge.dag import OperatorGraph
from spanedge.errors import InvalidPlan
from spanedge.operators import Operator
from spanedge.plan import Assignment, Plan


class Replicas:
    """The replicas of one plan of ``app``, with the operator of each and the replicas feeding it."""

    def __init__(self, app: App, plan: Plan, graph: OperatorGraph) -> None:
        """Read ``plan``; ``graph`` is ``app.graph()``."""
        self.app = app
        self.plan = plan
        self.graph = graph
        self.hub = plan.hub
        self.where = {a.replica: a for a in plan.assignments}

    def op(self, a: Assignment) -> Operator:
        """The operator ``a`` is a replica of."""
        return self.graph.op(a.operator)

    def upstream(self, replica: str) -> list[Assignment]:
        """The replicas feeding ``replica``: from the plan's flows, else from the DAG.

        Raises:
            InvalidPlan: a flow into ``replica`` starts at a replica the plan does not place.
        """
        flows = self.plan.inputs(replica)
        if flows:
            ups = []
            for f in flows:
                if f.src not in self.where:
                    msg = f"plan of app '{self.app.name}': flow {f.src} -> {f.dst} starts at an unknown replica"
                    raise InvalidPlan(msg)
                ups.append(self.where[f.src])
            return ups
        a = self.where[replica]
        found = []
        for name in self.op(a).inputs:
            candidates = [b for b in self.plan.assignments if b.operator == name]
            if a.group is not None and any(b.group == a.group for b in candidates):
                candidates = [b for b in candidates if b.group == a.group]
            found.extend(candidates)
        return found
