"""The ``spanedge hub`` and ``spanedge status`` commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def hub(
    sites: Annotated[Path, typer.Option(help="sites.yaml")],
    host: Annotated[str, typer.Option(help="REST API address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="REST API port")] = 8000,
    state_dir: Annotated[Path, typer.Option(help="deployed apps, ingest log, Spark checkpoints")] = Path(
        ".spanedge/hub"
    ),
    spark_master: Annotated[str, typer.Option(help="any Spark master URL")] = "local[2]",
    token_file: Annotated[
        Path | None, typer.Option(help="file holding the API token (default: SPANEDGE_TOKEN)")
    ] = None,
    no_spark: Annotated[bool, typer.Option("--no-spark", help="control plane only: no ingest, no engine")] = False,
    hub_site: Annotated[str | None, typer.Option(help="which hub site of sites.yaml this is")] = None,
    down_after: Annotated[float, typer.Option(help="a site is down after this many silent seconds")] = 15.0,
    drift_threshold: Annotated[float, typer.Option(help="relative latency/rate change that triggers a re-plan")] = 0.5,
    min_replan_interval: Annotated[float, typer.Option(help="seconds between two re-plans of an app")] = 60.0,
    trigger: Annotated[str, typer.Option(help="Spark trigger interval")] = "500 milliseconds",
) -> None:
    """Run the hub: REST API, plan distribution, ingest and Spark."""
    import logging

    from hub.auth import load_token
    from spanedge.cli import fail
    from spanedge.errors import SpanEdgeError
    from spanedge.signing import load_secret
    from spanedge.sites import load_sites

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        token = load_token(token_file)
        secret = load_secret()
        parsed = load_sites(sites)
        from hub.server import Hub, HubConfig

        config = HubConfig(
            token=token,
            secret=secret,
            state_dir=state_dir,
            host=host,
            port=port,
            spark=not no_spark,
            spark_master=spark_master,
            trigger=trigger,
            hub_site=hub_site,
            down_after_s=down_after,
            drift_threshold=drift_threshold,
            min_replan_interval_s=min_replan_interval,
        )
        Hub(parsed, config).serve()
    except SpanEdgeError as exc:
        raise fail(exc) from None


def _age(value: Any) -> str:
    return "never" if value is None else f"{float(value):.1f}s ago"


def status(
    hub_url: Annotated[str, typer.Option(envvar="SPANEDGE_HUB_URL", help="hub REST API")] = "http://127.0.0.1:8000",
    token: Annotated[str | None, typer.Option(envvar="SPANEDGE_TOKEN", help="hub bearer token")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the raw answers as JSON")] = False,
) -> None:
    """Show sites, apps and placements from the hub."""
    import json

    from hub.client import HubClient
    from spanedge.cli import fail
    from spanedge.errors import SpanEdgeError

    client = HubClient(hub_url, token, timeout=30)
    try:
        sites = client.sites()
        apps = client.apps()
        placements = {a["app"]: client.placement(a["app"]) for a in apps}
    except SpanEdgeError as exc:
        raise fail(exc) from None
    if as_json:
        typer.echo(json.dumps({"sites": sites, "apps": apps, "placements": placements}, indent=2))
        return
    typer.echo(render_status(sites, apps, placements))


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_status(
    sites: list[dict[str, Any]], apps: list[dict[str, Any]], placements: dict[str, dict[str, Any]]
) -> str:
    """The text ``spanedge status`` prints."""
    rows = [["site", "tier", "alive", "last heartbeat", "backlog", "latency (one-way ms)"]]
    for s in sites:
        outbox = s.get("outbox") or {}
        backlog = f"{outbox['records']} rec" if "records" in outbox else "-"
        latency = ", ".join(
            f"{peer} {_ms(v['latency_ms'])}{'' if v.get('source') == 'measured' else '*'}"
            for peer, v in sorted((s.get("latency") or {}).items())
        )
        alive = "yes" if s.get("alive") else ("-" if s.get("tier") == "hub" else "DOWN")
        rows.append([s["site"], str(s.get("tier", "")), alive, _age(s.get("last_heartbeat_age_s")), backlog, latency])
    parts = [_table(rows), "(* declared in sites.yaml, not measured)", ""]
    if not apps:
        parts.append("no apps deployed")
        return "\n".join(parts)
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
        history = view.get("history") or []
        if history:
            last = history[-1]
            parts.append(f"  last change: v{last['version']} {last['reason']}")
        parts.append("")
    return "\n".join(parts).rstrip()
