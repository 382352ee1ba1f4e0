"""Waiting until a simulated topology is ready: the hub answers, its queries run, agents run the app, everyone subscribed.

Each wait polls what the :class:`~simulate.results.Collector` observed on the
brokers (or the hub's ``/healthz``) and calls ``check`` between polls, which
raises if a process died, so a crash is reported at once instead of at the
deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from hub.api.client import HubClient
from simulate.errors import SimulationError
from simulate.results import Collector
from spanedge.errors import SpanEdgeError

Check = Callable[[], None]
"""Raises :class:`SimulationError` if a process of the topology exited."""

DATAPLANE_READY = b"dataplane ready"
"""What ``python -m hub.dataplane`` prints once the app's queries run (:mod:`hub.dataplane`)."""
START_MARK = b"\n=== start "
"""The line :class:`simulate.processes.Child` writes to a process's log at each start."""


def runs_app(collector: Collector, site: str, app: str) -> bool:
    """True once ``site`` sent a heartbeat that lists ``app`` (or lists no apps at all)."""
    beat = collector.heartbeats.get(site)
    if beat is None:
        return False
    apps = beat.get("apps")
    return not isinstance(apps, list) or app in apps


async def wait_healthy(client: HubClient, timeout: float, check: Check, log: Path, poll: float = 0.5) -> None:
    """Poll the hub's ``/healthz`` until it answers.

    Raises:
        SimulationError: it did not answer within ``timeout`` seconds (the message has its last error).
    """
    deadline = time.monotonic() + timeout
    loop = asyncio.get_running_loop()
    last = "no answer"
    while time.monotonic() < deadline:
        check()
        try:
            await loop.run_in_executor(None, lambda: client.health(timeout=2))
            return
        except (SpanEdgeError, ValueError) as exc:
            last = str(exc)
        await asyncio.sleep(poll)
    msg = f"the hub did not answer /healthz within {timeout:.0f}s (last: {last}); see {log}"
    raise SimulationError(msg)


def dataplane_ready(log: Path) -> bool:
    """Whether the data plane logging to ``log`` said, since its latest start, that the app's queries run."""
    try:
        text = log.read_bytes()
    except FileNotFoundError:
        return False
    return DATAPLANE_READY in text[text.rfind(START_MARK) + 1 :]


async def wait_dataplane(log: Path, timeout: float, check: Check, poll: float = 0.25) -> None:
    """Wait until the standalone hub's data plane runs the app's queries (it says so in ``log``).

    Spark takes many seconds to start a query on a loaded machine; records sent
    before would wait for it, and the first results' latency would measure
    Spark's start, not the placement.

    Raises:
        SimulationError: it did not within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check()
        if dataplane_ready(log):
            return
        await asyncio.sleep(poll)
    msg = f"the hub's data plane did not start the app's queries within {timeout:.0f}s; see {log}"
    raise SimulationError(msg)


def plan_sites(plan: Any, spokes: Iterable[str]) -> list[str]:
    """The spokes a plan gives at least one replica to, in ``spokes`` order.

    ``plan`` is a plan as a dictionary (:meth:`spanedge.plan.Plan.to_dict`, or the
    hub's deploy answer that holds one under ``plan``). The hub sends an app only
    to the sites that run part of it, so only those report it in their
    heartbeats. Without a readable plan, every spoke is expected to run the app.
    """
    spokes = list(spokes)
    if isinstance(plan, dict) and isinstance(plan.get("plan"), dict):
        plan = plan["plan"]
    assignments = plan.get("assignments") if isinstance(plan, dict) else None
    if not isinstance(assignments, list):
        return spokes
    sites = {a.get("site") for a in assignments if isinstance(a, dict)}
    return [s for s in spokes if s in sites]


async def wait_heartbeats(
    collector: Collector,
    spokes: Iterable[str],
    app: str,
    timeout: float,
    check: Check,
    logs: Path,
    running: Iterable[str] | None = None,
) -> None:
    """Wait until every spoke's agent sent a heartbeat, and those of ``running`` one that lists ``app``.

    ``running`` (default: every spoke) are the spokes the plan gives replicas
    of ``app`` to (see :func:`plan_sites`); the other agents only need to be alive.

    Raises:
        SimulationError: some did not within ``timeout`` seconds.
    """
    spokes = list(spokes)
    runs = set(spokes if running is None else running)

    def ready(site: str) -> bool:
        return runs_app(collector, site, app) if site in runs else site in collector.heartbeats

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check()
        if all(ready(s) for s in spokes):
            return
        await asyncio.sleep(0.25)
    parts = []
    without_app = [s for s in spokes if s in runs and not ready(s)]
    if without_app:
        parts.append(f"no heartbeat running app '{app}' from {', '.join(without_app)}")
    silent = [s for s in spokes if s not in runs and not ready(s)]
    if silent:
        parts.append(f"no heartbeat from {', '.join(silent)} (it runs no part of '{app}')")
    msg = f"{'; '.join(parts)} within {timeout:.0f}s; see {logs}"
    raise SimulationError(msg)


async def subscription_baseline(collector: Collector, broker_kind: str, sites: int) -> dict[str, int]:
    """Subscription counts before any SpanEdge process runs (Mosquitto publishes them every second).

    Other brokers publish no count: the baseline is empty.
    """
    if broker_kind != "mosquitto":
        return {}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(collector.subscriptions) < sites:
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.2)
    return dict(collector.subscriptions)


async def wait_subscribed(
    collector: Collector,
    broker_kind: str,
    sites: Iterable[str],
    baseline: dict[str, int],
    timeout: float,
    check: Check,
    what: str,
) -> None:
    """Wait until the broker of each of ``sites`` counts more subscriptions than in ``baseline``.

    Without a subscription count to watch (not Mosquitto), wait two seconds.

    Raises:
        SimulationError: some broker did not within ``timeout`` seconds; ``what`` names who should have subscribed.
    """
    if broker_kind != "mosquitto":
        await asyncio.sleep(2.0)
        return
    deadline = time.monotonic() + timeout
    pending = set(sites)
    while pending and time.monotonic() < deadline:
        check()
        for site in list(pending):
            if collector.subscriptions.get(site, 0) > baseline.get(site, 0):
                pending.discard(site)
        await asyncio.sleep(0.25)
    if pending:
        msg = f"{what} did not subscribe on the broker of {', '.join(sorted(pending))} within {timeout:.0f}s"
        raise SimulationError(msg)
