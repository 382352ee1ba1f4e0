"""The ``spanedge deploy`` command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spanedge.cli.errors import check_hub_url, fail, write_output
from spanedge.errors import SpanEdgeError


def deploy(
    app_file: Annotated[Path, typer.Argument(help="Python file that defines the App")],
    sites: Annotated[Path, typer.Option("--sites", help="sites.yaml")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="plan only; do not contact the hub")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write the plan as JSON here")] = None,
    compare: Annotated[str, typer.Option(help="baselines to show side by side: central,local-first")] = "",
    latency: Annotated[Path | None, typer.Option(help="measured latencies (CSV or JSON long table)")] = None,
    slo_ms: Annotated[float | None, typer.Option("--slo-ms", help="worst source-to-sink latency allowed")] = None,
    traffic_weight: Annotated[float, typer.Option(help="objective weight of WAN traffic")] = 1.0,
    latency_weight: Annotated[float, typer.Option(help="objective weight of path latency")] = 1.0,
    hub_url: Annotated[str, typer.Option(envvar="SPANEDGE_HUB_URL", help="hub REST API")] = "http://127.0.0.1:8000",
    token: Annotated[str | None, typer.Option(envvar="SPANEDGE_TOKEN", help="hub bearer token")] = None,
    app_name: Annotated[str | None, typer.Option(help="which App in the file, if several")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the plan as JSON")] = False,
) -> None:
    """Place an app on the sites; with --dry-run print the plan, otherwise send it to the hub."""
    from spanedge.cli.output import show
    from spanedge.report import plan_report

    try:
        baselines = [b.strip() for b in compare.split(",") if b.strip()]
        if dry_run:
            from placement import plan_app

            plan = plan_app(
                app_file,
                sites,
                latency_file=latency,
                slo_ms=slo_ms,
                traffic_weight=traffic_weight,
                latency_weight=latency_weight,
                baselines=baselines,
                app_name=app_name,
            )
        else:
            from hub.client import HubClient
            from spanedge.loader import read_app_source

            check_hub_url(hub_url)
            read_app_source(app_file)  # a file that cannot be read as an app is refused before the hub is asked
            client = HubClient(hub_url, token)
            weights = {"traffic": traffic_weight, "latency": latency_weight}
            plan = client.deploy(app_file, sites, slo_ms=slo_ms, app_name=app_name, weights=weights)
    except SpanEdgeError as exc:
        raise fail(exc) from None
    if output is not None:
        write_output(output, plan.to_json())
    if as_json:
        typer.echo(plan.to_json())
    else:
        show(plan_report(plan, baselines))
    if output is not None:
        typer.echo(f"plan written to {output}")
