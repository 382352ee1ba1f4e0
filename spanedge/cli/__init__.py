"""The ``spanedge`` command line, and the composition root of the project.

This package is the only place that wires the packages together: each
command module imports what it runs (placement, hub, edge agent, simulator)
only when the command runs, so ``spanedge --help`` stays light and the core
(everything else under ``spanedge/``) imports none of them.
"""

from __future__ import annotations

from typing import Annotated

import typer

from spanedge.cli.agent import agent
from spanedge.cli.broker_config import broker_config
from spanedge.cli.deploy import deploy
from spanedge.cli.hub import hub
from spanedge.cli.keys import keys
from spanedge.cli.simulate import simulate
from spanedge.cli.status import status

cli = typer.Typer(
    name="spanedge",
    help="SpanEdge: one Python dataflow across edge sites and a Spark hub.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"spanedge {version('spanedge')}")
        except PackageNotFoundError:
            typer.echo("spanedge (not installed as a package)")
        raise typer.Exit


@cli.callback()
def _root(
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """SpanEdge: one Python dataflow across edge sites and a Spark hub."""


for _command in (deploy, agent, hub, status, simulate):
    cli.command()(_command)
cli.command("broker-config")(broker_config)
cli.add_typer(keys)


def main() -> None:
    """Entry point of the ``spanedge`` script."""
    cli()


__all__ = ["cli", "main"]
