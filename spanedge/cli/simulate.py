"""The ``spanedge simulate`` command."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from spanedge.cli.errors import fail
from spanedge.cli.params import PATH, Command, option

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from rich.console import Console

    from simulate.report import Report
    from simulate.runner import Outcome
    from simulate.scenario import Options
    from spanedge.report import Block


def _choices(name: str) -> Callable[[click.Context, click.Parameter, str], list[str]]:
    """Shell completion of an option from a tuple of ``simulate.scenario`` (imported only when completing)."""

    def complete(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
        from simulate import scenario

        values: tuple[str, ...] = getattr(scenario, name)
        return [v for v in values if v.startswith(incomplete)]

    return complete


@click.command(cls=Command)
@click.argument("sites", type=PATH, help="sites.yaml with a simulation: section")
@click.argument("app_file", type=PATH, help="the app")
@option("--duration", help="how long the sensors send, e.g. 60s (default: the simulation section's)")
@option(
    "--fault",
    multiple=True,
    help="partition:<site>:<dur>@<t>, kill-agent:<spoke>[:<downtime>]@<t>, restart-hub@<t>, "
    "restart-broker:<site>@<t>, latency:<site>:<ms>@<t>, overload:<spoke>[:<factor>][:<dur>]@<t>, "
    "kill-site:<spoke>@<t>, revoke:<spoke>@<t>, join:<spoke>@<t>, drift:<spoke>:<field>:<shift>@<t>; "
    "<t> is 20s, or replan+3s / switch-2s (from the first "
    "move, whose sites old-owner and new-owner name); repeat for several",
)
@option(
    "--compare",
    help="also run this baseline placement on the same data: central or local-first",
    shell_complete=_choices("BASELINES"),
)
@option(
    "--placement",
    default="ilp",
    help="ilp, greedy, central or local-first (not ilp: standalone mode)",
    shell_complete=_choices("PLACEMENTS"),
)
@option(
    "--mode",
    default="auto",
    help="managed (hub REST deploy), standalone (plan here, hub data plane) or auto",
    shell_complete=_choices("MODES"),
)
@option("--seed", type=int, help="seed of the sensor data (default: the simulation section's)")
@option(
    "--chaos",
    type=int,
    metavar="SEED",
    help="add a seeded random mix of faults (partitions, agent kills, broker restarts, latency drift, overloads, "
    "hub kills and pauses), all healed before the end; the same seed gives the same faults",
)
@option("--run-dir", type=PATH, help="where logs, state and the report go (an earlier run's there is replaced)")
@option("--broker", default="auto", help="auto, mosquitto or amqtt", shell_complete=_choices("BROKERS"))
@option("--spark-master", default="local[2]", help="Spark master URL for the hub")
@option(
    "--hosts",
    default="loopback",
    help="loopback (every site on this host) or netns (each site in its own network namespace; needs root)",
    shell_complete=_choices("HOSTS"),
)
@option(
    "--insecure-brokers",
    is_flag=True,
    help="run plain anonymous brokers (no TLS, credentials or ACLs); development only",
)
@option(
    "--ha",
    metavar="DSN",
    help="run two hubs with 'spanedge hub --ha DSN' (a PostgreSQL database they share): one leads, one stands by; "
    "kill-hub and pause-hub then hit the leader",
)
@option("--json", "as_json", is_flag=True, help="print the report as JSON")
@option("--live/--no-live", default=None, help="live progress display (default: on a terminal)")
def simulate(
    sites: Path,
    app_file: Path,
    duration: str | None,
    fault: tuple[str, ...],
    compare: str | None,
    placement: str,
    mode: str,
    seed: int | None,
    chaos: int | None,
    run_dir: Path | None,
    broker: str,
    spark_master: str,
    hosts: str,
    insecure_brokers: bool,
    ha: str | None,
    as_json: bool,
    live: bool | None,
) -> None:
    """Run an app across a simulated multi-site topology and print the report.

    Writes report.json, timeline.json and report.html (charts, readable offline) to the run directory.
    Exits with 3 when a sink lost or duplicated results (a --compare baseline that could not keep up is
    reported as such, not as a failure), 2 on invalid input, 1 when the topology failed.
    """
    import asyncio

    from simulate.faults import parse_fault
    from simulate.scenario import Options, check_options
    from spanedge.durations import parse_duration
    from spanedge.errors import MissingExtra, SpanEdgeError

    try:
        seconds = parse_duration(duration) if duration else None
        for spec in fault:
            parse_fault(spec)
        opts = Options(
            sites=sites,
            app=app_file,
            duration=seconds,
            faults=list(fault),
            placement=placement,
            mode=mode,
            seed=seed,
            chaos=chaos,
            run_dir=run_dir,
            broker=broker,
            spark_master=spark_master,
            hosts=hosts,
            ha=ha,
        )
        check_options(opts, compare)
    except (SpanEdgeError, ValueError) as exc:
        raise fail(exc) from None

    try:
        from rich.console import Console
        from rich.text import Text
    except ImportError as exc:  # the light core: the progress display and the report need the sim extra
        raise fail(MissingExtra(exc.name or "rich", "sim")) from None

    err = Console(stderr=True)
    show_live = sys.stderr.isatty() if live is None else live
    try:
        outcomes = asyncio.run(_main(opts, compare, err, show_live, insecure_brokers))
    except KeyboardInterrupt:
        err.print("[yellow]interrupted; everything started was stopped[/yellow]")
        raise click.exceptions.Exit(130) from None
    except SpanEdgeError as exc:
        err.print(Text.assemble(("error:", "red"), f" {exc}"), highlight=False, soft_wrap=True)
        raise click.exceptions.Exit(2 if isinstance(exc, ValueError) else 1) from None
    reports = [o.report for o in outcomes]
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in reports] if len(reports) > 1 else reports[0].to_dict(), indent=2))
        click.echo(f"report: {outcomes[0].html}", err=True)
    else:
        from spanedge.cli.output import show

        show(simulation_report(reports))
        label = "run directories" if len(outcomes) > 1 else "run directory"
        click.echo(f"{label}: {', '.join(str(o.run_dir) for o in outcomes)}")
        click.echo(f"report: {outcomes[0].html}")
    if any(r.failed for r in reports):  # a baseline that could not keep up is its own result
        raise click.exceptions.Exit(3)


#: Rows of the simulation report shown in red when a run's cell is not zero.
_ALARM_ROWS = ("lost records", "duplicate results", "wrong results")


def simulation_report(reports: Sequence[Report]) -> list[Block]:
    """The runs side by side as report blocks, which :func:`spanedge.cli.output.show` prints.

    The title, one table (a column per run) and what its rows count; then the events
    (``event:`` lines: re-plans, what a killed site took with it) and the problems found
    (``warning:`` lines). On a terminal the table is coloured; piped, it is plain text.
    """
    from simulate.report import summarise
    from spanedge.report import Table

    summary = summarise(reports)
    rows = tuple((name, *cells) for name, cells in summary.rows)
    alarm = frozenset(
        i
        for i, (name, cells) in enumerate(summary.rows, start=1)
        if name in _ALARM_ROWS and any(c.split(" ", 1)[0] not in ("0", "") for c in cells)
    )
    blocks: list[Block] = [summary.title, Table(("measure", *summary.columns), rows, alarm), *summary.legend]
    blocks += [f"shaped here: {line}" for line in reports[0].shaping]
    blocks += [f"event: {line}" for line in summary.events]
    blocks += [f"warning: {problem}" for problem in summary.problems]
    return blocks


async def _main(
    opts: Options, compare: str | None, err: Console, live: bool, insecure_brokers: bool = False
) -> list[Outcome]:
    import asyncio
    import contextlib
    import logging
    import signal

    from rich.live import Live

    from simulate.progress import Status, render_status
    from simulate.runner import run, run_compare

    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
    display: Live | None = None
    if live:
        display = Live(console=err, refresh_per_second=4, transient=False)

        def update(status: Status) -> None:
            assert display is not None
            display.update(render_status(status))

        opts.on_status = update
        display.start()
    else:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        logging.getLogger("simulate.sensors").setLevel(logging.WARNING)
        logging.getLogger("simulate.results").setLevel(logging.WARNING)
    try:
        if compare:
            return await run_compare(opts, compare, insecure_brokers=insecure_brokers)
        return [await run(opts, insecure_brokers=insecure_brokers)]
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    finally:
        if display is not None:
            display.stop()
