"""A spoke that joins mid-run (``join:<spoke>@<t>``): enrolled at the managed hub as a gateway would be.

The spoke is in the topology's ``sites.yaml`` (its broker, WAN links and
sensors exist from the start) but in no process's sites file, the hub's
included, until it joins. At ``<t>`` the simulator

1. adds it at the hub's REST API (``POST /sites``, as ``spanedge site add``) with its
   streams, labels and CPU, and its broker as the hub reaches it; the answer holds
   its one-time join token;
2. runs ``spanedge agent join`` as a process of the spoke (in its namespace under
   ``--hosts netns``), which reaches the hub's REST API over the spoke's WAN link
   (a relay like those of its brokers), enrols and writes its key, certificate,
   the hub CA, the plan key and its ``sites.yaml``;
3. points each broker of that ``sites.yaml`` at its address as seen from the spoke
   (:meth:`simulate.topology.Topology.rebase_sites_file`: the hub names them as it
   reaches them) and starts ``spanedge agent`` with those files.

The hub plans the spoke in at its agent's first heartbeat ("site <spoke> joined")
and counts its data from the join's switch time (:class:`spanedge.plan.Join`):
its sensors start sending then (:func:`first_offset`), once its agent is
subscribed, so every record they send counts and nothing is excused.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from hub.api.client import HubClient
from simulate.config import SensorSpec
from simulate.errors import SimulationError
from simulate.processes import Child, spanedge_command
from simulate.topology import Topology
from spanedge.errors import SpanEdgeError
from spanedge.sites import Site

#: Seconds ``spanedge agent join`` may take (a Python start and two requests on a busy machine).
JOIN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Enrolled:
    """What the join of a spoke wrote, and a line for each step."""

    site: str
    state_dir: Path
    sites_file: Path
    plan_key_file: Path
    lines: list[str]


def site_request(site: Site) -> dict[str, Any]:
    """The body of ``POST /sites`` for ``site`` (without its broker): its labels, CPU and streams."""
    streams = {name: msgspec.to_builtins(binding) for name, binding in site.streams.items()}
    return {"labels": dict(site.labels), "cpu": site.cpu, "streams": streams}


async def enrol(
    topology: Topology, client: HubClient, site: str, hub: str, rest_port: int, run_dir: Path, logs: Path
) -> Enrolled:
    """Steps 1 to 3 above; the join's output goes to ``logs/agent-<site>.log``, the hub's answer to ``joins/<site>.json``.

    Raises:
        SimulationError: the hub refused the site, or ``spanedge agent join`` failed.
    """
    loop = asyncio.get_running_loop()
    request = site_request(topology.sites.site(site))
    broker = topology.broker_url(hub, site)
    try:
        answer = await loop.run_in_executor(None, lambda: client.add_site(site, broker=broker, **request))
    except SpanEdgeError as exc:
        msg = f"the hub did not add {site}: {exc}"
        raise SimulationError(msg) from None
    record = run_dir / "joins" / f"{site}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({k: v for k, v in answer.items() if k != "token"}, indent=2))
    address = await topology.relay(site, hub, rest_port)
    url = f"https://{address}"
    state_dir = run_dir / "agents" / site
    argv = topology.wrap(site, spanedge_command("agent", "join", url, "--state-dir", str(state_dir), "--no-run"))
    # the token goes in the environment, not on the command line the log shows
    join = Child(f"join-{site}", argv, logs / f"agent-{site}.log", {"SPANEDGE_JOIN_TOKEN": str(answer["token"])})
    code = await loop.run_in_executor(None, _wait, join.start())
    if code != 0:
        msg = f"spanedge agent join for {site} exited with code {code}; last lines of {join.log}:\n{join.tail()}"
        raise SimulationError(msg)
    sites_file = state_dir / "sites.yaml"
    topology.rebase_sites_file(sites_file, site)
    labels = ",".join(f"{k}={v}" for k, v in sorted(answer.get("labels", {}).items())) or "none"
    lines = [
        f"site add: a join token for {site} (labels {labels}; streams {', '.join(answer.get('streams', {})) or 'none'})",
        f"spanedge agent join at {url}, over {site}'s WAN link: enrolled",
    ]
    return Enrolled(site, state_dir, sites_file, state_dir / "plan-key.pub", lines)


def _wait(child: Child) -> int | None:
    """Wait for ``child`` to exit (SIGKILL after :data:`JOIN_TIMEOUT_S`); its exit code."""
    assert child.proc is not None
    try:
        return child.proc.wait(timeout=JOIN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        return None


def join_switch(placement: Any, site: str) -> float | None:
    """The switch time of ``site``'s join in the hub's placement answer (None: not planned in yet)."""
    joins = placement.get("joins") if isinstance(placement, dict) else None
    for join in joins or []:
        if isinstance(join, dict) and join.get("site") == site and isinstance(join.get("switch_at"), int | float):
            return float(join["switch_at"])
    return None


def first_offset(switch: float, t0: float, specs: Iterable[SensorSpec]) -> float:
    """Seconds after ``t0`` from which a joined site's sensors send so that every event time is at or after ``switch``.

    An event time is the send time less up to ``disorder``, plus ``clock_skew``.
    """
    lag = max((max(spec.disorder, 0.0) - spec.clock_skew for spec in specs), default=0.0)
    return switch - t0 + max(lag, 0.0)


def counted(site: str, event_time: float, joined: Mapping[str, float]) -> bool:
    """Whether the hub counts a record of ``site`` at ``event_time``: from its join's switch on, if it joined."""
    switch = joined.get(site)
    return switch is None or event_time >= switch
