"""The ``spanedge preview`` command."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from spanedge.cli.errors import fail
from spanedge.cli.params import PATH, Command, option

if TYPE_CHECKING:
    from spanedge.cli.preview.records import Line
    from spanedge.cli.preview.run import Preview


class _PastDeadline(BaseException):
    """Raised when the preview runs past ``--timeout``; not an ``Exception``, so an app catching those lets it through."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`_PastDeadline` in this thread after ``seconds`` (and every second after), where signals allow.

    A timer set before (a test runner's) is put back afterwards, less the time spent.
    """
    import signal
    import threading
    import time

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise _PastDeadline

    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expire)
    before, interval = signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if before > 0:
            signal.setitimer(signal.ITIMER_REAL, max(before - (time.monotonic() - started), 0.001), interval)


@click.command(cls=Command)
@click.argument("app_file", type=PATH, help="the app to preview")
@option("--input", "-i", "input_file", type=PATH, required=True, help="JSON Lines file of records (-: stdin)")
@option("--compare", type=PATH, help="another version of the app to run on the same records, side by side")
@option("--site", default="edge", help="the site of the records whose line names none")
@option("--stream", help="read every line as a plain record of this source stream")
@option(
    "--limit",
    type=click.IntRange(min=0),
    default=20,
    help="rows shown per table of results, dead letters or late records (0: all)",
)
@option("--json", "as_json", is_flag=True, help="print one JSON document")
@option("--out-of-orderness", type=click.FloatRange(min=0), default=1.0, help="seconds the watermark stays behind")
@option("--max-mb", type=click.IntRange(min=1), default=100, help="the largest input accepted, in MB")
@option("--max-lines", type=click.IntRange(min=1), default=1_000_000, help="the most records accepted")
@option("--timeout", default="300s", help="how long the preview may take, e.g. 30s or 5m")
@option("--app-name", help="which App in each file, if several")
def preview(
    app_file: Path,
    input_file: Path,
    compare: Path | None,
    site: str,
    stream: str | None,
    limit: int,
    as_json: bool,
    out_of_orderness: float,
    max_mb: int,
    max_lines: int,
    timeout: str,
    app_name: str | None,
) -> None:
    """Run an app over a file of records, offline, and print what each operator did and what each sink got.

    Each line of the input is a record object, or {"stream": ..., "site": ..., "value": {...}}.
    The edge part runs per site as an agent would, the hub part once over every site's output.
    Exits with 2 on invalid input.
    """
    from spanedge.durations import parse_duration
    from spanedge.errors import SpanEdgeError
    from spanedge.names import name_problem

    problem = name_problem(site, "site")
    if problem is not None:
        msg = f"--site: {problem}"
        raise fail(msg)
    try:
        seconds = parse_duration(timeout)
    except ValueError as exc:
        msg = f"--timeout: {exc}"
        raise fail(msg) from None
    doing = [f"reading {input_file}"]
    try:
        with _deadline(seconds):
            from spanedge.cli.preview.records import Limits, read_lines

            lines = read_lines(input_file, Limits(max_mb * 1_000_000, max_lines), stream)
            apps = [compare, app_file] if compare is not None else [app_file]
            runs = [_run(path, lines, input_file, site, stream, app_name, out_of_orderness, doing) for path in apps]
    except _PastDeadline:
        msg = f"the preview did not finish within --timeout {timeout} ({doing[-1]}); pass a longer --timeout or fewer records"
        raise fail(msg) from None
    except SpanEdgeError as exc:
        raise fail(exc) from None
    _print(runs, apps, input_file, limit, as_json)


def _run(
    path: Path,
    lines: list[Line],
    input_file: Path,
    site: str,
    stream: str | None,
    app_name: str | None,
    out_of_orderness: float,
    doing: list[str],
) -> Preview:
    """Load the app at ``path`` and run it over ``lines``; ``doing`` gets what is under way, for a timeout."""
    from spanedge.cli.preview.records import by_site
    from spanedge.cli.preview.run import run
    from spanedge.errors import InvalidRecords
    from spanedge.loader import load_app

    doing.append(f"loading {path}")
    app = load_app(path, app_name)
    streams = app.source_streams()
    named = f"{app.name} ({path})"
    if stream is not None and stream not in streams:
        msg = f"--stream {stream!r} is not a source stream of app {named}; its streams: {', '.join(sorted(streams))}"
        raise InvalidRecords(msg)
    records = by_site(lines, input_file, named, streams, site)
    doing.append(f"running {path} over {input_file}")
    return run(app, records, out_of_orderness)


def _labels(apps: list[Path]) -> list[str]:
    """How the report names each app file: its path alone, or of two, their names (paths if the names are the same)."""
    if len(apps) == 1:
        return [str(apps[0])]
    for labels in ([p.name for p in apps], [str(p) for p in apps]):
        if len(set(labels)) == len(labels):
            return labels
    return ["baseline", "candidate"]


def _print(runs: list[Preview], apps: list[Path], input_file: Path, limit: int, as_json: bool) -> None:
    import orjson

    from spanedge.cli.output import show
    from spanedge.cli.preview.report import Shown, comparison, comparison_json, report, to_json

    shown = [Shown(p, label, str(input_file)) for p, label in zip(runs, _labels(apps), strict=True)]
    if as_json:
        doc = to_json(shown[0], limit) if len(shown) == 1 else comparison_json(shown[0], shown[1], limit)
        click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode())
    else:
        show(report(shown[0], limit) if len(shown) == 1 else comparison(shown[0], shown[1], limit))
