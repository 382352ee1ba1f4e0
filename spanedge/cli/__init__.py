"""The ``spanedge`` command line, and the composition root of the project.

This package is the only place that wires the packages together: each
command module imports what it runs (placement, hub, edge agent, simulator)
only when the command runs, so ``spanedge --help`` stays light and the core
(everything else under ``spanedge/``) imports none of them. The commands are
plain click, so the light core runs them; rich, when installed, colours the
tables, and only ``simulate`` (the ``sim`` extra) needs it. Shell completion is
click's: ``eval "$(_SPANEDGE_COMPLETE=bash_source spanedge)"``.
"""

from __future__ import annotations

import click

from spanedge.cli.agent import agent
from spanedge.cli.broker_config import broker_config
from spanedge.cli.deploy import deploy
from spanedge.cli.hub import hub
from spanedge.cli.keys import keys
from spanedge.cli.params import Group
from spanedge.cli.preview import preview
from spanedge.cli.rollout import rollout
from spanedge.cli.simulate import simulate
from spanedge.cli.site import site
from spanedge.cli.status import status


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        click.echo(f"spanedge {version('spanedge')}")
    except PackageNotFoundError:
        click.echo("spanedge (not installed as a package)")
    ctx.exit()


@click.group(cls=Group, name="spanedge", no_args_is_help=True, context_settings={"max_content_width": 120})
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_version, help="print the version and exit"
)
def cli() -> None:
    """SpanEdge: one Python dataflow across edge sites and a Spark hub."""


for _command in (deploy, preview, rollout, agent, hub, site, status, simulate, broker_config, keys):
    cli.add_command(_command)


def main() -> None:
    """Entry point of the ``spanedge`` script."""
    cli(prog_name="spanedge")


__all__ = ["cli", "main"]
