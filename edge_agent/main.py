"""Start an agent from command-line settings: load files, install signal handlers, run."""

from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
import sys
from pathlib import Path

from edge_agent.agent import Agent, AgentConfig
from spanedge import signing
from spanedge.errors import SpanEdgeError
from spanedge.plan import Plan
from spanedge.sites import load_sites

log = logging.getLogger("spanedge.agent")


def run_agent(
    *,
    site: str,
    sites_file: Path,
    plan_file: Path | None,
    state_dir: Path | None = None,
    heartbeat_interval: float = 5.0,
    outbox_max_bytes: int = 256 * 2**20,
    drop_policy: str = "oldest",
    drain_rate: float = 20_000.0,
    max_future_skew: float = 300.0,
    out_of_orderness: float = 1.0,
    idle_timeout: float | None = None,
    checkpoint_interval: float = 1.0,
    log_level: str = "INFO",
) -> int:
    """Run an agent until SIGTERM/SIGINT; return the exit code (0 after a clean stop, 2 on bad input)."""
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        sites = load_sites(sites_file)
        plans = None
        secret = None
        if plan_file is not None:
            try:
                text = plan_file.read_text()
            except OSError as exc:
                msg = f"cannot read plan file {plan_file}: {exc.strerror}"
                raise SpanEdgeError(msg) from None
            plans = [Plan.from_json(text)]
        else:
            secret = signing.load_secret()
        config = AgentConfig(
            site=site,
            sites=sites,
            state_dir=state_dir or Path(".spanedge") / f"agent-{site}",
            heartbeat_interval=heartbeat_interval,
            outbox_max_bytes=outbox_max_bytes,
            drop_policy=drop_policy,
            drain_rate=drain_rate,
            max_future_skew=max_future_skew,
            out_of_orderness=out_of_orderness,
            idle_timeout=idle_timeout,
            checkpoint_interval=checkpoint_interval,
            secret=secret,
        )
        agent = Agent(config, plans)
    except (SpanEdgeError, ValueError, OSError, sqlite3.Error) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_main(agent))
    return 0


async def _main(agent: Agent) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, agent.stop)
    log.info("agent of site %s starting (%s)", agent.site, "managed" if agent.managed else "standalone")
    await agent.run()
