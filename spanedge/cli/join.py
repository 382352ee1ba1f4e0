"""The ``spanedge agent join`` command: enrol this gateway with a join token, then run its agent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from spanedge.cli.errors import fail
from spanedge.cli.params import PATH, Command, option


@click.command("join", cls=Command)
@click.argument("hub_url", help="the hub's REST API, https://HOST:PORT")
@click.argument("token", envvar="SPANEDGE_JOIN_TOKEN", help="the join token 'spanedge site add' printed")
@option(
    "--state-dir",
    type=PATH,
    help="where the identity, sites.yaml and the agent's state go [default: ./.spanedge/agent-<site>]",
)
@option("--no-run", is_flag=True, help="enrol and write the files, then exit instead of running the agent")
@option("--timeout", default=30.0, type=click.FloatRange(min=0, min_open=True), help="seconds to wait for the hub")
def join(hub_url: str, token: str, state_dir: Path | None, no_run: bool, timeout: float) -> None:
    """Enrol this gateway with the hub's one-time join token, then run its agent.

    The key is made here and never leaves the gateway. The hub's CA must have the SHA-256 the token pins, or nothing is sent.
    The agent runs with the options given before 'join' (spanedge agent --heartbeat-interval 2 join ...) or in
    SPANEDGE_AGENT_<OPTION>; its site, sites.yaml and state directory are the ones the join wrote.
    """
    from edge_agent.enrolment import join as enrol
    from spanedge.errors import SpanEdgeError
    from spanedge.signing import ENV_PUBLIC_KEY_FILE

    given = _agent_options(token)
    try:
        joined = enrol(hub_url, token, state_dir or given.get("state_dir"), timeout)
    except SpanEdgeError as exc:
        raise fail(exc) from None
    click.echo(f"site {joined.site} enrolled: identity, plan key and sites.yaml in {joined.state_dir}")
    command = (
        f"{ENV_PUBLIC_KEY_FILE}={joined.plan_key_file} spanedge agent --site {joined.site} "
        f"--sites {joined.sites_file} --state-dir {joined.state_dir}"
    )
    if no_run:
        click.echo(f"run its agent with: {command}")
        return
    from edge_agent.config import AgentLaunch
    from spanedge.cli.launch import start

    os.environ[ENV_PUBLIC_KEY_FILE] = str(joined.plan_key_file)
    click.echo(f"running its agent (later, start it with: {command})")
    launch = AgentLaunch(
        joined.site,
        joined.sites_file,
        state_dir=joined.state_dir,
        log_level=given.get("log_level") or "INFO",
        transport=given.get("transport") or "asyncio",
    )
    start(launch, **{k: v for k, v in given.items() if k not in _LAUNCH_OPTIONS})


#: The options of ``spanedge agent`` that the join decides (or that a joined agent does not take).
_LAUNCH_OPTIONS = frozenset({"site", "sites", "plan", "state_dir", "log_level", "transport"})


def _agent_options(token: str) -> dict[str, Any]:
    """The options ``spanedge agent`` was given before ``join`` (or from ``SPANEDGE_AGENT_*``).

    Raises:
        click.UsageError: ``--sites`` or ``--plan`` was given (the join writes the sites.yaml, and a joined
            agent takes its plans from the hub), or a ``--site`` other than the one the token enrols.
    """
    from spanedge.errors import InvalidJoinToken
    from spanedge.join_token import parse_join_token

    parent = click.get_current_context().parent
    given = dict(parent.params) if parent is not None else {}
    for name in ("sites", "plan"):
        if given.get(name) is not None:
            msg = f"--{name} does not go with 'agent join': the join writes the sites.yaml and the hub sends the plans"
            raise click.UsageError(msg)
    try:
        enrols = parse_join_token(token).site
    except InvalidJoinToken as exc:
        raise fail(exc) from None
    if given.get("site") not in (None, enrols):
        msg = f"--site {given['site']} (or SPANEDGE_AGENT_SITE) was given, but the token enrols site {enrols}"
        raise click.UsageError(msg)
    return given
