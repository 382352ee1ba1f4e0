"""The ``spanedge preview`` command."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from spanedge.cli.errors import fail
from spanedge.cli.params import HUB_CA_HELP, PATH, Command, option

if TYPE_CHECKING:
    from spanedge.app import App
    from spanedge.cli.preview.records import Line
    from spanedge.cli.preview.run import Preview
    from spanedge.cli.preview.to_hub import LiveRead


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
@option("--input", "-i", "input_file", type=PATH, help="JSON Lines file of records (-: stdin)")
@option("--compare", type=PATH, help="another version of the app to run on the same records, side by side")
@option(
    "--site",
    help="with --input: the site of the records whose line names none [default: edge]; "
    "with --for: the site of sites.yaml whose live input to read",
)
@option("--for", "duration", help="read the site's live MQTT input for this long (at most 10m), e.g. 60s")
@option("--sites", "sites_file", type=PATH, help="sites.yaml, for --for: the site's broker and topics")
@option("--save", type=PATH, help="with --for: write the records read to this file, in the --input format")
@option("--hub-url", "--hub", envvar="SPANEDGE_HUB_URL", help="compare against the version this hub runs")
@option("--hub-ca", type=PATH, envvar="SPANEDGE_HUB_CA", help=HUB_CA_HELP)
@option("--token", envvar="SPANEDGE_TOKEN", help="hub bearer token, for --hub-url")
@option("--stream", help="read every line as a plain record of this source stream")
@option(
    "--limit",
    type=click.IntRange(min=0),
    default=20,
    help="rows shown per table of results, dead letters or late records (0: all)",
)
@option("--json", "as_json", is_flag=True, help="print one JSON document")
@option("--out-of-orderness", type=click.FloatRange(min=0), default=1.0, help="seconds the watermark stays behind")
@option("--max-mb", type=click.IntRange(min=1), default=100, help="the largest input accepted (read), in MB")
@option("--max-lines", type=click.IntRange(min=1), default=1_000_000, help="the most records accepted (read)")
@option("--timeout", default="300s", help="how long running the preview may take, e.g. 30s or 5m")
@option("--app-name", help="which App in each file, if several")
def preview(app_file: Path, input_file: Path | None, **options: Any) -> None:
    """Run an app over a file of records, or a site's live input, and print what each operator did.

    Each line of the input is a record object, or {"stream": ..., "site": ..., "value": {...}}.
    With --site SITE --for DURATION --sites sites.yaml, the records are read from the site's
    MQTT broker instead, subscribing only, and the app runs over them once the time is up.
    The edge part runs per site as an agent would, the hub part once over every site's output.
    A live preview with --hub-url and --token gives the hub its summary to keep (a warning if it
    does not take it). Exits with 2 on invalid input.
    """
    from spanedge.errors import SpanEdgeError

    o = _Options(**options)
    live = _mode(input_file, o)
    seconds = _seconds(o.timeout, "--timeout")
    doing = [f"reading {input_file}"]
    read: LiveRead | None = None
    try:
        with _deadline(seconds):
            candidate = _Version(app_file, _load(app_file, o.app_name, doing))
            baseline = _baseline(candidate, o, doing)
        if live:
            lines, source, read = _live(candidate, o)
        else:
            assert input_file is not None
            lines, source = _read(input_file, o), str(input_file)
        versions = [baseline, candidate] if baseline is not None else [candidate]
        with _deadline(seconds):
            runs = [_run(v, lines, source, o, doing) for v in versions]
    except _PastDeadline:
        msg = (
            f"the preview did not finish within --timeout {o.timeout} ({doing[-1]}); "
            "pass a longer --timeout or fewer records"
        )
        raise fail(msg) from None
    except SpanEdgeError as exc:
        raise fail(exc) from None
    _print(runs, [v.where for v in versions], source, o.limit, o.as_json)
    # no baseline with a hub: the hub does not run the app, so it keeps no previews of it
    if read is not None and o.hub_url and o.token and baseline is not None:
        _send(app_file, candidate.app.name, read, runs, baseline, o)


def _send(
    app_file: Path, app: str, read: LiveRead, runs: list[Preview], baseline: _Version | None, o: _Options
) -> None:
    """Give the hub the live preview's summary to keep; say whether it did (a failure is a warning, not an error)."""
    from spanedge.cli.preview.to_hub import post, summary

    assert o.hub_url is not None
    assert o.token is not None
    try:
        source = app_file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        click.echo(f"warning: the preview's summary was not sent to the hub: cannot read {app_file}: {exc}", err=True)
        return
    live = None
    if baseline is not None:
        where = baseline.where
        live = (runs[0], where.name if isinstance(where, Path) else where)
    body = summary(read, app_file, source, runs[-1], live)
    click.echo(post(o.hub_url, o.token, o.hub_ca, app, body), err=True)


@dataclass(frozen=True)
class _Options:
    """The options of ``spanedge preview`` besides the app and the input file."""

    compare: Path | None
    site: str | None
    duration: str | None
    sites_file: Path | None
    save: Path | None
    hub_url: str | None
    hub_ca: Path | None
    token: str | None
    stream: str | None
    limit: int
    as_json: bool
    out_of_orderness: float
    max_mb: int
    max_lines: int
    timeout: str
    app_name: str | None


@dataclass(frozen=True)
class _Version:
    """A version of the app: where it came from (a file, or the hub's label for it) and the app itself."""

    where: Path | str
    app: App


def _mode(input_file: Path | None, o: _Options) -> bool:
    """Whether the preview reads live input; exits if the options mix the two modes or leave out what one needs."""
    from spanedge.names import name_problem

    if o.site is not None and (problem := name_problem(o.site, "site")) is not None:
        msg = f"--site: {problem}"
        raise fail(msg)
    live = [name for name, given in (("--for", o.duration), ("--sites", o.sites_file), ("--save", o.save)) if given]
    if input_file is not None:
        if live:
            msg = (
                f"--input reads records from a file, {' and '.join(live)} read a site's live input; "
                "pass --input FILE or --site SITE --for DURATION --sites sites.yaml, not both"
            )
            raise fail(msg)
        return False
    if not live:
        msg = "no input: pass --input FILE of records, or --site SITE --for DURATION --sites sites.yaml to read live"
        raise fail(msg)
    missing = [f"{name} {what}" for name, what, given in _LIVE_NEEDS if getattr(o, given) is None]
    if missing:
        msg = f"a live preview needs {', '.join(missing)}; pass {'them' if len(missing) > 1 else 'it'}"
        raise fail(msg)
    if o.stream is not None:
        msg = "--stream applies to --input only: a live preview knows each record's stream from its topic"
        raise fail(msg)
    assert o.duration is not None
    from spanedge.cli.preview.live import check_duration
    from spanedge.errors import InvalidRecords

    try:
        check_duration(_seconds(o.duration, "--for"), o.duration)
    except InvalidRecords as exc:
        raise fail(exc) from None
    return True


#: What a live preview needs: each option, what it names, and its field in :class:`_Options`.
_LIVE_NEEDS = (
    ("--site", "SITE", "site"),
    ("--for", "DURATION", "duration"),
    ("--sites", "sites.yaml", "sites_file"),
)


def _seconds(value: str, name: str) -> float:
    from spanedge.durations import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        msg = f"{name}: {exc}"
        raise fail(msg) from None


def _load(path: Path, app_name: str | None, doing: list[str]) -> App:
    from spanedge.loader import load_app

    doing.append(f"loading {path}")
    return load_app(path, app_name)


def _baseline(candidate: _Version, o: _Options, doing: list[str]) -> _Version | None:
    """The version to compare against: ``--compare``, else the hub's if ``--hub-url`` and a token are given."""
    if o.compare is not None:
        return _Version(o.compare, _load(o.compare, o.app_name, doing))
    if not o.hub_url or not o.token:
        return None
    from spanedge.cli.preview.deployed import fetch
    from spanedge.loader import load_app_source

    name = candidate.app.name
    doing.append(f"fetching app {name} from the hub {o.hub_url}")
    deployed = fetch(o.hub_url, o.token, o.hub_ca, name)
    if deployed is None:
        click.echo(
            f"note: app {name} is not deployed at the hub {o.hub_url}; previewing it without a comparison", err=True
        )
        return None
    return _Version(deployed.label, load_app_source(deployed.source, deployed.filename, o.app_name))


def _read(input_file: Path, o: _Options) -> list[Line]:
    from spanedge.cli.preview.records import Limits, read_lines

    return read_lines(input_file, Limits(o.max_mb * 1_000_000, o.max_lines), o.stream)


def _live(candidate: _Version, o: _Options) -> tuple[list[Line], str, LiveRead]:
    """Read the site's live input the candidate takes; say what was left out, ``--save`` it; its lines, label, read."""
    import time

    from spanedge.cli.preview import live
    from spanedge.cli.preview.records import Limits
    from spanedge.cli.preview.to_hub import LiveRead
    from spanedge.sites import load_sites

    assert o.site is not None
    assert o.duration is not None
    assert o.sites_file is not None
    sites = load_sites(o.sites_file)
    streams = candidate.app.source_streams()
    taps, notes = live.taps(sites, str(o.sites_file), o.site, streams, candidate.app.name)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    seconds = _seconds(o.duration, "--for")
    topics = ", ".join(f"{t.stream} ({t.topic})" for t in taps)
    limits = Limits(o.max_mb * 1_000_000, o.max_lines)
    broker = sites.site(o.site).mqtt()
    said = f"reading site {o.site} at {broker.url} for {o.duration}: {topics}"
    began: list[float] = []

    def ready() -> None:
        began.append(time.time())
        click.echo(said, err=True)

    captured = live.capture(broker, o.site, taps, seconds, limits, ready)
    for note in live.summary(captured, o.site, seconds):
        click.echo(f"note: {note}", err=True)
    if o.save is not None:
        live.save(o.save, captured)
    source = f"site {o.site} (live, {captured.seconds:.1f}s)"
    started = began[0] if began else time.time() - captured.seconds
    read = LiveRead(o.site, seconds, started, started + captured.seconds, captured.stopped)
    return captured.lines, source, read


def _run(version: _Version, lines: list[Line], source: str, o: _Options, doing: list[str]) -> Preview:
    """Run ``version`` over ``lines``; ``doing`` gets what is under way, for a timeout."""
    from spanedge.cli.preview.records import by_site
    from spanedge.cli.preview.run import run
    from spanedge.errors import InvalidRecords

    app = version.app
    streams = app.source_streams()
    named = f"{app.name} ({version.where})"
    if o.stream is not None and o.stream not in streams:
        msg = f"--stream {o.stream!r} is not a source stream of app {named}; its streams: {', '.join(sorted(streams))}"
        raise InvalidRecords(msg)
    records = by_site(lines, Path(source), named, streams, o.site or "edge")
    doing.append(f"running {version.where} over {source}")
    return run(app, records, o.out_of_orderness)


def _labels(apps: list[Path | str]) -> list[str]:
    """How the report names each version: its path alone, or of two, their names (paths if the names are the same).

    A version the hub runs is named by its label (``hub v3``) throughout.
    """
    if len(apps) == 1:
        return [str(apps[0])]
    for labels in ([p.name if isinstance(p, Path) else p for p in apps], [str(p) for p in apps]):
        if len(set(labels)) == len(labels):
            return labels
    return ["baseline", "candidate"]


def _print(runs: list[Preview], apps: list[Path | str], source: str, limit: int, as_json: bool) -> None:
    import orjson

    from spanedge.cli.output import show
    from spanedge.cli.preview.report import Shown, comparison, comparison_json, report, to_json

    shown = [Shown(p, label, source) for p, label in zip(runs, _labels(apps), strict=True)]
    if as_json:
        doc = to_json(shown[0], limit) if len(shown) == 1 else comparison_json(shown[0], shown[1], limit)
        click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode())
    else:
        show(report(shown[0], limit) if len(shown) == 1 else comparison(shown[0], shown[1], limit))
