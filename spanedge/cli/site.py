"""The ``spanedge site`` commands: add a site and print its join token, revoke a site.

Both talk to the hub's REST API with an admin token, like ``spanedge deploy``.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import click

from spanedge.cli.errors import check_hub_url, fail
from spanedge.cli.params import HUB_CA_HELP, PATH, Group, option
from spanedge.errors import SpanEdgeError

site = Group(
    "site", help="Add sites to the hub's fleet with a one-time join token, and revoke them.", no_args_is_help=True
)

_HUB_URL = {"envvar": "SPANEDGE_HUB_URL", "default": "https://127.0.0.1:8000", "help": "hub REST API"}
_HUB_CA = {"type": PATH, "envvar": "SPANEDGE_HUB_CA", "help": HUB_CA_HELP}
_TOKEN = {"envvar": "SPANEDGE_TOKEN", "help": "hub admin token"}


def _labels(_ctx: click.Context, _param: click.Parameter, value: str) -> dict[str, str]:
    """``fleet=north,kind=truck`` as a mapping, each pair checked, or a usage error with an example."""
    from spanedge.names import label_problem

    labels: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in value.split(","))):
        key, sep, val = pair.partition("=")
        problem = label_problem(key.strip(), val.strip()) if sep else f"{pair!r} has no '='"
        if problem is not None:
            msg = f"{problem}; give labels as KEY=VALUE pairs separated by commas, e.g. fleet=north,kind=truck"
            raise click.BadParameter(msg)
        labels[key.strip()] = val.strip()
    return labels


_STREAM_EXAMPLE = (
    "give each stream as NAME=TOPIC, e.g. --stream readings=trucks/13/+/temp, or as sites.yaml writes it, e.g. "
    "--stream 'readings={topic: trucks/13/+/temp, rate: 50}'"
)


def _streams(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    """Each ``--stream`` as its ``sites.yaml`` entry, checked as ``sites.yaml`` is, or a usage error with an example."""
    import msgspec

    from spanedge.sites import parse_stream

    streams: dict[str, Any] = {}
    for text in values:
        try:
            name, binding = parse_stream(text)
        except SpanEdgeError as exc:
            msg = f"{exc}\n{_STREAM_EXAMPLE}"
            raise click.BadParameter(msg) from None
        if name in streams:
            msg = f"stream {name!r} is given twice; {_STREAM_EXAMPLE}"
            raise click.BadParameter(msg)
        streams[name] = msgspec.to_builtins(binding)
    return streams


def _duration(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    from spanedge.durations import parse_duration

    try:
        return None if value is None else parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@site.command("add")
@click.argument("name", help="the new site's name")
@option("--labels", default="", callback=_labels, help="labels as KEY=VALUE,KEY=VALUE (fleet=north,kind=truck)")
@option("--broker", help="the broker URL the site uses [default: the hub's broker]")
@option("--cpu", default=1.0, type=click.FloatRange(min=0, min_open=True), help="CPU cores available at the site")
@option(
    "--stream",
    "streams",
    multiple=True,
    callback=_streams,
    metavar="NAME=TOPIC",
    help="a stream the site sources, with the MQTT topic filter of its sensors (1 record/s declared until its agent "
    "measures it), or NAME={topic: ..., rate: ..., record_bytes: ..., qos: ...} as in sites.yaml; repeat for several. "
    "The apps that read it take the site in at its agent's first heartbeat",
)
@option("--ttl", callback=_duration, help="how long the join token stays valid [default: the hub's --join-token-ttl]")
@option("--hub-url", **_HUB_URL)
@option("--hub-ca", **_HUB_CA)
@option("--token", **_TOKEN)
def add(
    name: str,
    labels: dict[str, str],
    broker: str | None,
    cpu: float,
    streams: dict[str, Any],
    ttl: float | None,
    hub_url: str,
    hub_ca: Path | None,
    token: str | None,
) -> None:
    """Add a spoke to the hub's fleet and print its one-time join token, for 'spanedge agent join' on the gateway."""
    from hub.api.client import HubClient

    check_hub_url(hub_url)
    try:
        answer = HubClient(hub_url, token, ca_file=hub_ca).add_site(
            name, broker=broker, labels=labels, cpu=cpu, streams=streams, ttl_s=ttl
        )
    except SpanEdgeError as exc:
        raise fail(exc) from None
    expires = datetime.datetime.fromtimestamp(answer["expires_at"], datetime.UTC).isoformat(timespec="seconds")
    click.echo(
        f"site {answer['site']} added (broker {answer['broker']}); its join token, single use, expires {expires}:",
        err=True,
    )
    click.echo(answer["token"])
    for stream, binding in answer.get("streams", {}).items():
        click.echo(
            f"it sources {stream} ({binding['topic']}); the apps that read it take it in once it joins", err=True
        )
    click.echo(f"on the gateway run: spanedge agent join {hub_url} <token>", err=True)


@site.command("revoke")
@click.argument("name", help="the site to revoke")
@option("--hub-url", **_HUB_URL)
@option("--hub-ca", **_HUB_CA)
@option("--token", **_TOKEN)
def revoke(name: str, hub_url: str, hub_ca: Path | None, token: str | None) -> None:
    """Revoke a site: its certificate at every broker, its broker rules, its messages and its replicas (moved away)."""
    from hub.api.client import HubClient

    check_hub_url(hub_url)
    try:
        answer = HubClient(hub_url, token, ca_file=hub_ca).revoke_site(name)
    except SpanEdgeError as exc:
        raise fail(exc) from None
    click.echo(f"site {name} revoked: certificates {', '.join(answer['serials']) or 'none'}")
    for line in answer["brokers_reloaded"]:
        click.echo(f"broker {line}")
    click.echo(f"apps re-planned without it: {', '.join(answer['replanned']) or 'none'}")
