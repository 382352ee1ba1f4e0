"""The ``spanedge agent`` command (heavy modules are imported only when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def agent(
    site: Annotated[str, typer.Option(help="the site this agent serves")],
    sites: Annotated[Path, typer.Option(help="sites.yaml")],
    plan: Annotated[
        Path | None, typer.Option(help="standalone: run this plan.json; without it, take plans from the hub")
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option(help="outbox and checkpoints [default: ./.spanedge/agent-<site>]")
    ] = None,
    heartbeat_interval: Annotated[float, typer.Option(help="seconds between heartbeats")] = 5.0,
    outbox_max_bytes: Annotated[int, typer.Option(help="bound of the on-disk outbox")] = 256 * 2**20,
    drop_policy: Annotated[str, typer.Option(help="when the outbox is full: oldest or newest")] = "oldest",
    drain_rate: Annotated[float, typer.Option(help="max records/s sent to the hub")] = 20_000.0,
    max_future_skew: Annotated[
        float, typer.Option(help="events further ahead of the agent clock (s) go to the DLQ")
    ] = 300.0,
    out_of_orderness: Annotated[float, typer.Option(help="seconds the watermark stays behind")] = 1.0,
    idle_timeout: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="seconds without records after which the watermark follows the agent clock, "
            "so the last windows close (0 or unset: off)",
        ),
    ] = None,
    checkpoint_interval: Annotated[float, typer.Option(help="seconds between checkpoints")] = 1.0,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
) -> None:
    """Run the edge agent of a spoke site."""
    from edge_agent.main import run_agent

    code = run_agent(
        site=site,
        sites_file=sites,
        plan_file=plan,
        state_dir=state_dir,
        heartbeat_interval=heartbeat_interval,
        outbox_max_bytes=outbox_max_bytes,
        drop_policy=drop_policy,
        drain_rate=drain_rate,
        max_future_skew=max_future_skew,
        out_of_orderness=out_of_orderness,
        idle_timeout=idle_timeout,
        checkpoint_interval=checkpoint_interval,
        log_level=log_level,
    )
    if code:
        raise typer.Exit(code)
