"""The ``spanedge rollout`` commands: where an app's staged rollout is, and rolling it back by hand."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import click

from spanedge.cli.errors import check_hub_url, fail
from spanedge.cli.params import HUB_CA_HELP, PATH, Command, Group, option


@click.group(cls=Group)
def rollout() -> None:
    """Follow or roll back an app's staged rollout (started with spanedge deploy --rollout)."""


def _hub_options(command: Any) -> Any:
    command = option("--json", "as_json", is_flag=True, help="print the hub's answer as JSON")(command)
    command = option("--token", envvar="SPANEDGE_TOKEN", help="hub bearer token")(command)
    command = option("--hub-ca", type=PATH, envvar="SPANEDGE_HUB_CA", help=HUB_CA_HELP)(command)
    return option("--hub-url", envvar="SPANEDGE_HUB_URL", default="https://127.0.0.1:8000", help="hub REST API")(
        command
    )


@rollout.command(cls=Command)
@click.argument("app", help="the app's name")
@_hub_options
def status(app: str, hub_url: str, hub_ca: Path | None, token: str | None, as_json: bool) -> None:
    """Show an app's rollout: its stage, the sites on each version, the gate values and why it stopped."""
    _run(lambda client: client.rollout(app), hub_url, hub_ca, token, as_json)


@rollout.command(cls=Command)
@click.argument("app", help="the app's name")
@_hub_options
def rollback(app: str, hub_url: str, hub_ca: Path | None, token: str | None, as_json: bool) -> None:
    """Roll an app's rollout back, at any stage: every site it changed gets the previous version back."""
    _run(lambda client: client.roll_back(app), hub_url, hub_ca, token, as_json)


def _run(call: Any, hub_url: str, hub_ca: Path | None, token: str | None, as_json: bool) -> None:
    from hub.api.client import HubClient
    from spanedge.errors import SpanEdgeError

    check_hub_url(hub_url)
    try:
        answer = call(HubClient(hub_url, token, timeout=30, ca_file=hub_ca))
    except SpanEdgeError as exc:
        raise fail(exc) from None
    click.echo(json.dumps(answer, indent=2) if as_json else rollout_text(answer))


def rollout_text(view: dict[str, Any]) -> str:
    """An answer of ``GET /apps/{name}/rollout`` for people."""
    stages = view["stages"]
    n, i = len(stages), int(view["stage"])
    lines = [
        f"app {view['app']}: {view['status']} at stage {i + 1}/{n} {stages[i]['spec']}",
        f"  version {view['to_version'][:12]} ({view['filename']}) over {view['from_version'][:12]}",
        f"  gates: {view['gates'] or 'none'}; hold {view['hold_s']:g} s",
    ]
    for version, sites in view["versions"].items():
        shown = ", ".join(sites) if len(sites) <= 10 else f"{', '.join(sites[:10])} and {len(sites) - 10} more"
        lines.append(
            f"  on {version[:12]}: {len(sites)} site{'s' if len(sites) != 1 else ''}{': ' if sites else ''}{shown}"
        )
    lines.append(f"  {view['reason']}")
    lines.append("steps:")
    for step in view["steps"]:
        at = datetime.datetime.fromtimestamp(step["at"], datetime.UTC).strftime("%H:%M:%S")
        lines.append(f"  {at} stage {step['stage'] + 1} {step['status']}: {step['reason']}")
    return "\n".join(lines)
