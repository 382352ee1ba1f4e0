"""Start an agent: load its files, install signal handlers, run (the ``spanedge agent`` command calls this)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
import sys
from typing import Any

from edge_agent.agent import Agent
from edge_agent.config import AgentLaunch
from edge_agent.mqtt.select import transport_factory
from edge_agent.mqtt.transport import TransportFactory
from spanedge.errors import SpanEdgeError

log = logging.getLogger(__name__)


def run_agent(launch: AgentLaunch, *, connect: TransportFactory | None = None, **options: Any) -> int:
    """Run an agent until SIGTERM/SIGINT; return the exit code (0 after a clean stop, 2 on bad input).

    Args:
        launch: the site, the files to read and the log level (logging is the caller's to set up).
        connect: builds the MQTT connections (default: the one ``launch.transport`` names).
        options: :class:`~edge_agent.config.AgentConfig` fields.
    """
    try:
        config, plans = launch.load(**options)
        agent = Agent(config, plans, connect=connect or transport_factory(launch.transport))
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
