"""The ``spanedge deploy`` command."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from spanedge.cli.errors import check_hub_url, fail, write_output
from spanedge.cli.params import HUB_CA_HELP, PATH, Command, option
from spanedge.errors import InvalidSettings, SpanEdgeError
from spanedge.placement_settings import check_slo_ms, check_weight


def _setting(check: Callable[[Any, str], float | None]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that checks a placement setting by ``check``'s rule, naming the option in its error."""

    def callback(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        try:
            return check(value, param.opts[0])
        except InvalidSettings as exc:
            raise click.UsageError(str(exc), ctx) from None

    return callback


@click.command(cls=Command)
@click.argument("app_file", type=PATH, help="Python file that defines the App")
@option("--sites", type=PATH, required=True, help="sites.yaml")
@option("--dry-run", is_flag=True, help="plan only; do not contact the hub")
@option("--output", "-o", type=PATH, help="write the plan as JSON here")
@option("--compare", default="", help="baselines to show side by side: central,local-first")
@option("--latency", type=PATH, help="measured latencies (CSV or JSON long table)")
@option("--slo-ms", type=float, callback=_setting(check_slo_ms), help="worst source-to-sink latency allowed (ms)")
@option("--traffic-weight", default=1.0, callback=_setting(check_weight), help="objective weight of WAN traffic")
@option("--latency-weight", default=1.0, callback=_setting(check_weight), help="objective weight of path latency")
@option("--hub-url", envvar="SPANEDGE_HUB_URL", default="https://127.0.0.1:8000", help="hub REST API")
@option("--hub-ca", type=PATH, envvar="SPANEDGE_HUB_CA", help=HUB_CA_HELP)
@option("--token", envvar="SPANEDGE_TOKEN", help="hub bearer token")
@option("--app-name", help="which App in the file, if several")
@option("--rollout", help='roll the new version out in stages by site label: "kind=truck:1, kind=truck:25%, *"')
@option("--gate", help='health gates each stage is checked against: "dead_letter_rate<0.01, cpu<0.8, watermark_lag<5s"')
@option("--hold", help="how long each stage runs before its gates are checked (2m; 5m if left out)")
@option("--all-at-once", is_flag=True, help="deploy to every site at once, even if the versions cannot mix")
@option("--json", "as_json", is_flag=True, help="print the plan as JSON")
def deploy(
    app_file: Path,
    sites: Path,
    dry_run: bool,
    output: Path | None,
    compare: str,
    latency: Path | None,
    slo_ms: float | None,
    traffic_weight: float,
    latency_weight: float,
    hub_url: str,
    hub_ca: Path | None,
    token: str | None,
    app_name: str | None,
    rollout: str | None,
    gate: str | None,
    hold: str | None,
    all_at_once: bool,
    as_json: bool,
) -> None:
    """Place an app on the sites; with --dry-run print the plan, otherwise send it to the hub.

    With --rollout the hub brings the new version to the sites stage by stage,
    checks each stage's heartbeats against the --gate limits after --hold, and
    gives the previous version back to every changed site if one fails
    (follow it with spanedge rollout status APP).
    """
    from spanedge.cli.output import show
    from spanedge.report import plan_report

    staged = _staged(rollout, gate, hold, all_at_once, dry_run)
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
            from hub.api.client import HubClient
            from spanedge.loader import read_app_source

            check_hub_url(hub_url)
            read_app_source(app_file)  # a file that cannot be read as an app is refused before the hub is asked
            client = HubClient(hub_url, token, ca_file=hub_ca)
            weights = {"traffic": traffic_weight, "latency": latency_weight}
            plan = client.deploy(app_file, sites, slo_ms=slo_ms, app_name=app_name, weights=weights, rollout=staged)
    except SpanEdgeError as exc:
        raise fail(exc) from None
    if output is not None:
        write_output(output, plan.to_json())
    if as_json:
        click.echo(plan.to_json())
    else:
        show(plan_report(plan, baselines))
    if output is not None:
        click.echo(f"plan written to {output}")
    if staged and not all_at_once and not as_json:
        click.echo(f"rollout started; follow it with: spanedge rollout status {plan.app}")


def _staged(
    rollout: str | None, gate: str | None, hold: str | None, all_at_once: bool, dry_run: bool
) -> dict[str, Any]:
    """The deploy body's rollout fields; --gate and --hold without --rollout are usage errors."""
    if rollout is None and (gate is not None or hold is not None):
        msg = "--gate and --hold set a staged rollout's checks; give --rollout too (e.g. --rollout '*')"
        raise click.UsageError(msg)
    if rollout is not None and dry_run:
        msg = "--rollout is run by the hub; leave out --dry-run"
        raise click.UsageError(msg)
    if rollout is None:
        return {"all_at_once": True} if all_at_once else {}
    return {"rollout": rollout, "gates": gate, "hold": hold, "all_at_once": all_at_once}
