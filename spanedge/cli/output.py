"""Printing reports: rich tables with colour on a terminal, plain aligned text when piped."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from spanedge.report import Block, Table, to_text


def show(blocks: Sequence[Block]) -> None:
    """Print a report to stdout: coloured tables on a terminal, :func:`spanedge.report.to_text` otherwise."""
    if not sys.stdout.isatty():
        typer.echo(to_text(blocks))
        return
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(highlight=False)
    for block in blocks:
        if not isinstance(block, Table):
            style = "bold red" if block.startswith(("warning:", "error:")) or "INFEASIBLE" in block else None
            console.print(block, style=style, markup=False)
            continue
        table = RichTable(header_style="bold cyan", show_edge=False, pad_edge=False)
        for name in block.header:
            table.add_column(name, overflow="fold")
        for i, row in enumerate(block.rows, start=1):
            table.add_row(*row, style="red" if i in block.alarm else None)
        console.print(table)
