"""What the commands share: the path type, options that show their defaults, whole summaries in command lists.

Plain click (8.5 or later, whose arguments take a help text), so that the light
core's command line needs nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: A file or directory parameter, handed to the command as a :class:`pathlib.Path` (not checked here).
PATH = click.Path(path_type=Path)

#: The help of ``--hub-ca``, which every command that calls the hub's REST API takes.
HUB_CA_HELP = (
    "CA certificate that signed the hub's HTTPS certificate (the hub's STATE_DIR/ca/ca.pem) [default: the system's CAs]"
)


def option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """:func:`click.option` that shows its default and, if it has one, its environment variable in the help."""
    attrs.setdefault("show_default", True)
    attrs.setdefault("show_envvar", "envvar" in attrs)
    return click.option(*decls, **attrs)


def _summary(text: str | None) -> str:
    """The first paragraph of a help text, on one line: what a command list shows of a command."""
    return " ".join((text or "").split("\n\n", 1)[0].split())


class Command(click.Command):
    """A command listed with the whole first paragraph of its help (click cuts it at 45 characters)."""

    def get_short_help_str(self, limit: int = 45) -> str:
        """The first paragraph of the command's help, whole."""
        return self.short_help or _summary(self.help)


class Group(click.Group):
    """A group of commands, listed in the order they were added, each with the first paragraph of its help."""

    command_class = Command

    def get_short_help_str(self, limit: int = 45) -> str:
        """The first paragraph of the group's help, whole."""
        return self.short_help or _summary(self.help)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The commands in the order they were added."""
        return list(self.commands)
