"""The ``spanedge agent`` command, with its options built from the agent's settings.

The options are the fields of ``AgentLaunch`` (the site, the files, the log level)
and the option fields of ``AgentConfig`` (``edge_agent.config``), with their help
text, defaults and bounds; each can also come from ``SPANEDGE_AGENT_<OPTION>``.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from spanedge.cli.errors import fail


def _checked(check: Callable[[str], str]) -> Callable[[str], str]:
    """A typer callback that turns ``check``'s ``ValueError`` into a usage error naming the option."""

    def callback(value: str) -> str:
        try:
            return check(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    return callback


def _parameters() -> list[inspect.Parameter]:
    """The command's options: every option field of ``AgentLaunch``, then of ``AgentConfig``."""
    from edge_agent.config import AgentConfig, AgentLaunch, check_log_level, check_transport, env_var, option_fields

    checks = {"log_level": _checked(check_log_level), "transport": _checked(check_transport)}
    params: list[inspect.Parameter] = []
    for settings in (AgentLaunch, AgentConfig):
        # trusted_keys is no option: its type is not resolved, so the signature library is not loaded
        hints = typing.get_type_hints(settings, localns={"TrustedKeys": object})
        for f in option_fields(settings):
            if any(p.name == f.name for p in params):
                continue
            extra: dict[str, Any] = {k: f.metadata[k] for k in ("min", "max") if k in f.metadata}
            if f.name in checks:
                extra["callback"] = checks[f.name]
            option = typer.Option(help=f.metadata["help"], envvar=env_var(f.name), **extra)
            default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
            kind = inspect.Parameter.KEYWORD_ONLY
            params.append(inspect.Parameter(f.name, kind, default=default, annotation=Annotated[hints[f.name], option]))
    return params


def agent(**values: Any) -> None:
    """Run the edge agent of a spoke site (every option can also come from SPANEDGE_AGENT_<OPTION>)."""
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
        raise typer.Exit(code)


agent.__signature__ = inspect.Signature(_parameters())  # type: ignore[attr-defined]
