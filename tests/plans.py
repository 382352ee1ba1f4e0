"""Plans for the handover tests: a source at each spoke, a chain of its replicas placed by the test, a hub sink."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spanedge.plan import Assignment, Flow, Handover, Plan, SolverInfo, Totals

#: One replica of a chain: (operator, the site it runs at, the plan version since which it runs there).
Placed = tuple[str, str, int]


def chain_plan(
    app: str,
    version: int,
    chains: Mapping[str, Sequence[Placed]],
    *,
    source: str = "readings",
    handovers: tuple[Handover, ...] = (),
    hub: str = "cloud",
    sink: str = "out",
) -> Plan:
    """The plan of ``app`` at ``version``: per source site of ``chains``, ``<source>@<site>`` there, then its chain.

    Each chain's replicas (``<operator>@<site>``) read the one before, the
    first reads the source, the last feeds ``sink``, which runs at ``hub``
    and merges them all: 10 records/s of 1 kB along a chain, 1 record/s of
    100 B into the sink. ``handovers`` are the plan's as given.
    """
    assignments = []
    flows = []
    for home, chain in chains.items():
        previous = f"{source}@{home}"
        assignments.append(Assignment(previous, source, home, home, "source"))
        for operator, site, since in chain:
            replica = f"{operator}@{home}"
            assignments.append(Assignment(replica, operator, home, site, "test", since))
            flows.append(Flow(previous, replica, 10.0, 1000.0))
            previous = replica
        flows.append(Flow(previous, sink, 1.0, 100.0))
    assignments.append(Assignment(sink, sink, None, hub, "@global_"))
    return Plan(
        app=app,
        version=version,
        hub=hub,
        assignments=tuple(assignments),
        flows=tuple(flows),
        totals=Totals(100.0, 5.0, 5.0, 1.0),
        solver=SolverInfo("test", "optimal", 0.0),
        handovers=handovers,
    )
