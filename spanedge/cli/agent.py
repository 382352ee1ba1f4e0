"""The ``spanedge agent`` command, with its options built from the agent's settings.

The options are the fields of ``AgentLaunch`` (the site, the files, the log level)
and the option fields of ``AgentConfig`` (``edge_agent.config``), with their help
text, defaults and bounds; each can also come from ``SPANEDGE_AGENT_<OPTION>``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from spanedge.cli.join import join
from spanedge.cli.params import PATH, Group

Check = Callable[[click.Context, click.Parameter, Any], Any]


def _checked(check: Callable[[str], str]) -> Check:
    """A click callback that turns ``check``'s ``ValueError`` into a usage error naming the option."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None  # a missing --site is refused when the agent starts (agent join needs none)
        try:
            return check(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


def _click_type(name: str, hint: Any, metadata: typing.Mapping[str, Any]) -> click.ParamType[Any, Any]:
    """The click type of a settings field: its annotation without ``None``, bounded by ``min``/``max``."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kinds = [t for t in typing.get_args(hint) if t is not type(None)] if union else [hint]
    kind = kinds[0] if len(kinds) == 1 else None
    bounds = {k: metadata[k] for k in ("min", "max") if k in metadata}
    if kind is Path and not bounds:
        return PATH
    if kind is str and not bounds:
        return click.STRING
    if kind is int:
        return click.IntRange(**bounds) if bounds else click.INT
    if kind is float:
        return click.FloatRange(**bounds) if bounds else click.FLOAT
    msg = f"agent option {name!r} has type {hint}, which the command line cannot read; use str, Path, int or float"
    raise TypeError(msg)


def _options() -> list[click.Parameter]:
    """The command's options: every option field of ``AgentLaunch``, then of ``AgentConfig``."""
    from edge_agent.config import AgentConfig, AgentLaunch, check_log_level, check_transport, env_var, option_fields
    from spanedge.names import check_site_name

    checks = {
        "site": _checked(lambda site: check_site_name(site, "--site")),
        "log_level": _checked(check_log_level),
        "transport": _checked(check_transport),
    }
    options: list[click.Parameter] = []
    for settings in (AgentLaunch, AgentConfig):
        # trusted_keys is no option: its type is not resolved, so the signature library is not loaded
        hints = typing.get_type_hints(settings, localns={"TrustedKeys": object})
        for f in option_fields(settings):
            if any(o.name == f.name for o in options):
                continue
            required = f.default is dataclasses.MISSING  # checked by _run: 'agent join' needs neither
            option = click.Option(
                [f"--{f.name.replace('_', '-')}", f.name],
                type=_click_type(f.name, hints[f.name], f.metadata),
                default=None if required else f.default,
                callback=checks.get(f.name),
                envvar=env_var(f.name),
                help=f.metadata["help"],
                show_default=True,
                show_envvar=True,
            )
            options.append(option)
    return options


def _run(**values: Any) -> None:
    """Start the agent with the command's options, and exit with its code (unless a subcommand runs)."""
    from edge_agent.config import AgentLaunch, option_fields

    ctx = click.get_current_context()
    if ctx.invoked_subcommand is not None:
        return
    for param in ctx.command.params:
        if param.name in ("site", "sites") and values.get(param.name) is None:
            raise click.MissingParameter(ctx=ctx, param=param)
    launch = AgentLaunch(**{f.name: values.pop(f.name) for f in option_fields(AgentLaunch)})
    from spanedge.cli.launch import start

    start(launch, **values)


agent = Group(
    "agent",
    callback=_run,
    params=_options(),
    invoke_without_command=True,
    help="Run the edge agent of a spoke site (every option can also come from SPANEDGE_AGENT_<OPTION>); "
    "--site and --sites are required to run it.",
)
agent.add_command(join)
