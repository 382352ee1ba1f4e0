"""The ``spanedge status`` command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from spanedge.cli.errors import check_hub_url, fail
from spanedge.cli.output import show
from spanedge.cli.params import HUB_CA_HELP, PATH, Command, option
from spanedge.history import quiet
from spanedge.report import Block, Table, to_text


def _age(value: Any) -> str:
    return "never" if value is None else f"{float(value):.1f}s ago"


@click.command(cls=Command)
@option("--hub-url", envvar="SPANEDGE_HUB_URL", default="https://127.0.0.1:8000", help="hub REST API")
@option("--hub-ca", type=PATH, envvar="SPANEDGE_HUB_CA", help=HUB_CA_HELP)
@option("--token", envvar="SPANEDGE_TOKEN", help="hub bearer token")
@option("--json", "as_json", is_flag=True, help="print the raw answers as JSON")
def status(hub_url: str, hub_ca: Path | None, token: str | None, as_json: bool) -> None:
    """Show sites, apps and placements from the hub."""
    import json

    from hub.api.client import HubClient
    from spanedge.errors import SpanEdgeError

    check_hub_url(hub_url)
    client = HubClient(hub_url, token, timeout=30, ca_file=hub_ca)
    try:
        sites = client.sites()
        apps = client.apps()
        placements = {a["app"]: client.placement(a["app"]) for a in apps}
    except SpanEdgeError as exc:
        raise fail(exc) from None
    if as_json:
        click.echo(json.dumps({"sites": sites, "apps": apps, "placements": placements}, indent=2))
        return
    show(status_report(sites, apps, placements))


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _last_change(history: list[dict[str, Any]]) -> list[str]:
    """The last plan change (or rollout step) of an app's history, and how many re-plans since changed nothing."""
    if not history:
        return []
    changes = [i for i, h in enumerate(history) if not quiet(h)]
    since = len(history) - 1 - changes[-1] if changes else len(history)
    kept = f"re-planned {'once' if since == 1 else f'{since} times'}" + (" since" if changes else "")
    kept += ", placement unchanged"
    if not changes:
        return [f"  {kept}"]
    last = history[changes[-1]]
    version = f"v{last['version']} " if last.get("version") else ""  # a rollout's step is no plan version of its own
    return [f"  last change: {version}{last['reason']}" + (f"; {kept}" if since else "")]


def render_status(
    sites: list[dict[str, Any]], apps: list[dict[str, Any]], placements: dict[str, dict[str, Any]]
) -> str:
    """The text ``spanedge status`` prints when piped."""
    return to_text(status_report(sites, apps, placements))


def status_report(
    sites: list[dict[str, Any]], apps: list[dict[str, Any]], placements: dict[str, dict[str, Any]]
) -> list[Block]:
    """Sites with their liveness, backlog and latencies, then each app's placement."""
    rows: list[tuple[str, ...]] = []
    down = set()
    for s in sites:
        outbox = s.get("outbox") or {}
        backlog = f"{outbox['records']} rec" if "records" in outbox else "-"
        latency = ", ".join(
            f"{peer} {_ms(v['latency_ms'])}{'' if v.get('source') == 'measured' else '*'}"
            for peer, v in sorted((s.get("latency") or {}).items())
        )
        alive = "yes" if s.get("alive") else ("-" if s.get("tier") == "hub" else "DOWN")
        if alive == "DOWN":
            down.add(len(rows) + 1)
        rows.append((s["site"], str(s.get("tier", "")), alive, _age(s.get("last_heartbeat_age_s")), backlog, latency))
    header = ("site", "tier", "alive", "last heartbeat", "backlog", "latency (one-way ms)")
    parts: list[Block] = [Table(header, tuple(rows), frozenset(down)), "(* declared in sites.yaml, not measured)", ""]
    if not apps:
        parts.append("no apps deployed")
        return parts
    for app in apps:
        view = placements.get(app["app"], {})
        totals = app.get("totals") or {}
        parts.append(
            f"app '{app['app']}' plan v{app['version']}: {app['replicas']} replicas on {', '.join(app['sites'])}; "
            f"WAN {totals.get('wan_bytes_per_s', 0):.0f} B/s, worst latency {totals.get('worst_latency_ms', 0):.1f} ms"
        )
        by_site: dict[str, list[str]] = {}
        for r in view.get("replicas", []):
            by_site.setdefault(r["site"], []).append(r["replica"])
        for site, replicas in sorted(by_site.items()):
            parts.append(f"  {site}: {', '.join(replicas)}")
        parts += _last_change(view.get("history") or [])
        parts.append("")
    while parts and parts[-1] == "":
        parts.pop()
    return parts
