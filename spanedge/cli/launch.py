"""Running an agent from the command line: ``spanedge agent`` and ``spanedge agent join``."""

from __future__ import annotations

import logging
from typing import Any

import click

from spanedge.cli.errors import fail


def start(launch: Any, **values: Any) -> None:
    """Run the agent of ``launch`` (an ``AgentLaunch``) with ``values`` (``AgentConfig`` options); exit with its code."""
    from edge_agent.main import run_agent
    from spanedge.errors import SpanEdgeError

    logging.basicConfig(level=launch.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        code = run_agent(launch, **values)
    except SpanEdgeError as exc:
        raise fail(exc) from None
    if code:
        raise click.exceptions.Exit(code)
