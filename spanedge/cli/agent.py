"""The ``spanedge agent`` command, with its options built from the agent's settings.

The options are the fields of ``AgentLaunch`` (the site, the files, the log level)
and the option fields of ``AgentConfig`` (``edge_agent.config``), with their help
text, defaults and bounds; each can also come from ``SPANEDGE_AGENT_<OPTION>``.
"""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from spanedge.cli.errors import fail
from spanedge.cli.params import PATH, Command

Check = Callable[[click.Context, click.Parameter, Any], Any]


def _checked(check: Callable[[str], str]) -> Check:
    """A click callback that turns ``check``'s ``ValueError`` into a usage error naming the option."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
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
            required = f.default is dataclasses.MISSING
            option = click.Option(
                [f"--{f.name.replace('_', '-')}", f.name],
                type=_click_type(f.name, hints[f.name], f.metadata),
                required=required,
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
    """Start the agent with the command's options, and exit with its code."""
    from edge_agent.config import AgentLaunch, option_fields
    from edge_agent.main import run_agent
    from spanedge.errors import SpanEdgeError

    launch = AgentLaunch(**{f.name: values.pop(f.name) for f in option_fields(AgentLaunch)})
    logging.basicConfig(level=launch.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        code = run_agent(launch, **values)
    except SpanEdgeError as exc:
        raise fail(exc) from None
    if code:
        raise click.exceptions.Exit(code)


agent = Command(
    "agent",
    callback=_run,
    params=_options(),
    help="Run the edge agent of a spoke site (every option can also come from SPANEDGE_AGENT_<OPTION>).",
)
