"""Printing reports: rich tables on a terminal when rich is installed, plain aligned text otherwise.

The light core (``pip install spanedge``) has no rich: on a terminal it prints the plain
text with its alarm rows and warnings in red (unless ``NO_COLOR`` is set); piped, the plain text alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from spanedge.report import Block, Table, to_text


def _alarming(block: str) -> bool:
    return block.startswith(("warning:", "error:")) or "INFEASIBLE" in block


def show(blocks: Sequence[Block]) -> None:
    """Print a report to stdout: coloured tables on a terminal, :func:`spanedge.report.to_text` otherwise."""
    if not sys.stdout.isatty():
        click.echo(to_text(blocks))
        return
    try:
        from rich.console import Console
        from rich.table import Table as RichTable
        from rich.text import Text
    except ImportError:  # the light core: plain text, coloured where it matters (not with NO_COLOR set)
        click.echo(_coloured_text(blocks), color=False if os.environ.get("NO_COLOR") else None)
        return
    console = Console(highlight=False)
    for block in blocks:
        if not isinstance(block, Table):
            console.print(block, style="bold red" if _alarming(block) else None, markup=False)
            continue
        table = RichTable(header_style="bold cyan", show_edge=False, pad_edge=False)
        for name in block.header:  # cells are text, never markup: they quote users' names and patterns
            table.add_column(Text(name), overflow="fold")
        for i, row in enumerate(block.rows, start=1):
            table.add_row(*map(Text, row), style="red" if i in block.alarm else None)
        console.print(table)


def _coloured_text(blocks: Sequence[Block]) -> str:
    """:func:`spanedge.report.to_text` with ANSI colours: bold headers, alarm rows and warnings in red."""
    lines: list[str] = []
    for block in blocks:
        if not isinstance(block, Table):
            lines.append(click.style(block, fg="red", bold=True) if _alarming(block) else block)
            continue
        header, rule, *rows = to_text([block]).split("\n")
        lines += [click.style(header, bold=True), rule]
        lines += [click.style(row, fg="red") if i in block.alarm else row for i, row in enumerate(rows, start=1)]
    return "\n".join(lines)
