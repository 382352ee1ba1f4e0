"""The rules a placement must obey, a checker for them and a diagnosis of infeasible problems.

A placement is valid when every replica runs at one of its candidate sites,
no site's CPU is exceeded, all hub-placed replicas share one hub, the
spoke-placed replicas of one source site share one spoke, everything
downstream of a hub-placed replica is hub-placed, a sink shares its
input's site, and a sink that writes to a device binding (``"device:NAME"``)
runs at a spoke that declares that device.
"""

from __future__ import annotations

from placement.cost import site_loads
from placement.devices import device_sites
from placement.problem import OFFLOAD_MS, Problem, Replica
from spanedge.errors import InfeasiblePlacement

#: Slack allowed on capacity constraints, in cores.
EPS = 1e-6


def violations(problem: Problem, placement: dict[str, str], hub: str | None = None) -> list[str]:
    """Return every rule a complete placement breaks (empty if it is valid)."""
    out: list[str] = []
    for r in problem.replicas.values():
        site = placement.get(r.id)
        if site not in r.candidates and not (r.is_source and site == r.home):
            out.append(f"{r.id} at {site}, not one of {', '.join(r.candidates)}")
        if r.colocate is not None and site != placement.get(r.colocate):
            out.append(f"sink {r.id} at {site}, its input {r.colocate} at {placement.get(r.colocate)}")
        allowed = device_sites(r.op, problem.sites) if r.op.sink is not None else None
        if allowed is not None and site not in allowed and any(c in allowed for c in r.candidates):
            out.append(f"sink {r.id} at {site}, which lacks its device; sites declaring it: {', '.join(allowed)}")
    for site, load in site_loads(problem, placement).items():
        if load > problem.cpu(site) + EPS:
            out.append(f"{site} uses {load:.3f} cores of {problem.cpu(site)}")
    hubs_used = {
        placement[r.id] for r in problem.replicas.values() if not r.is_source and problem.is_hub(placement[r.id])
    }
    if len(hubs_used) > 1 or (hub is not None and hubs_used - {hub}):
        out.append(f"replicas at several hubs: {', '.join(sorted(hubs_used))}")
    spoke_of: dict[str, set[str]] = {}
    for r in problem.replicas.values():
        site = placement[r.id]
        if not r.is_source and r.home is not None and not problem.is_hub(site):
            spoke_of.setdefault(r.home, set()).add(site)
    for home, used in spoke_of.items():
        if len(used) > 1:
            out.append(f"replicas of {home} at several spokes: {', '.join(sorted(used))}")
    for e in problem.edges:
        if problem.replicas[e.src].is_source:
            continue
        if problem.is_hub(placement[e.src]) and not problem.is_hub(placement[e.dst]):
            out.append(f"{e.dst} at spoke {placement[e.dst]} after {e.src} at hub {placement[e.src]}")
    return out


def _fmt_ops(replicas: list[Replica]) -> str:
    heavy = sorted(replicas, key=lambda r: -r.load)[:3]
    return ", ".join(f"'{r.op.name}' {r.load:.3g}" for r in heavy)


def diagnose(problem: Problem) -> None:
    """Raise :class:`InfeasiblePlacement` naming the binding constraint of an obviously infeasible problem."""
    decisions = problem.decisions()
    hub_only = [r for r in decisions if all(problem.is_hub(c) for c in r.candidates)]
    need = sum(problem.load(r.id) for r in hub_only)
    best = max(problem.hubs, key=problem.cpu)
    if need > problem.cpu(best) + EPS:
        msg = (
            f"the operators that must run at a hub need {need:.3g} cores but the largest hub, "
            f"{best}, has {problem.cpu(best):.3g} (heaviest, cores: {_fmt_ops(hub_only)}); raise its cpu "
            "in sites.yaml or lower those operators' cost estimates"
        )
        raise InfeasiblePlacement(msg)
    by_home: dict[str, list[Replica]] = {}
    for r in decisions:
        if r.home is not None and not any(problem.is_hub(c) for c in r.candidates):
            by_home.setdefault(r.home, []).append(r)
    total = 0.0
    for home, group in by_home.items():
        need = sum(problem.load(r.id) for r in group)
        total += need
        common = set(group[0].candidates).intersection(*(r.candidates for r in group[1:]))
        if any(problem.cpu(c) + EPS >= need for c in common):
            continue
        heaviest = max(group, key=lambda r: r.load).op.name
        others = sorted((c for c in common if c != home), key=lambda c: problem.latency.latency(home, c))
        nearby = (
            "; the spokes within reach have "
            + ", ".join(f"{c} {problem.cpu(c):.3g} cores at {problem.latency.latency(home, c):.0f} ms" for c in others)
            if others
            else f"; no other spoke is within {OFFLOAD_MS:.0f} ms"
        )
        msg = (
            f"site {home} needs {need:.3g} cores for its local operators but has {problem.cpu(home):.3g}"
            f"{nearby}; raise its capacity or let '{heaviest}' run at a nearby spoke "
            f"(one with {need:.3g} free cores within {OFFLOAD_MS:.0f} ms) or at the hub (drop @local)"
        )
        raise InfeasiblePlacement(msg)
    spoke_cpu = sum(problem.cpu(s) for s in problem.spokes)
    if total > spoke_cpu + EPS:
        msg = (
            f"the local operators of all sites need {total:.3g} cores but the spokes have {spoke_cpu:.3g} "
            "in total; raise the spokes' cpu in sites.yaml or drop @local from heavy operators"
        )
        raise InfeasiblePlacement(msg)


def explain_infeasible(problem: Problem, status: str) -> InfeasiblePlacement:
    """An error for a problem the solver proved infeasible although no single site is overloaded."""
    demand: dict[str, float] = {}
    for r in problem.decisions():
        if r.home is not None and not any(problem.is_hub(c) for c in r.candidates):
            demand[r.home] = demand.get(r.home, 0.0) + problem.load(r.id)
    tight = sorted(demand, key=lambda s: problem.cpu(s) - demand[s])[:3]
    listing = ", ".join(f"{s} needs {demand[s]:.3g} of {problem.cpu(s):.3g} cores" for s in tight)
    msg = (
        f"no placement fits every site's capacity at once (solver: {status}); the tightest local groups: "
        f"{listing or 'none'}; sites that offload to the same spoke overload it: raise the spokes' cpu in "
        "sites.yaml or drop @local from heavy operators"
    )
    return InfeasiblePlacement(msg)
