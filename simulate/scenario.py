"""What one simulation runs: the options, the sites, the app, the faults, and the plan in standalone mode.

:meth:`Scenario.load` reads and checks every input before anything starts,
so bad input fails without leaving a run directory behind. A run directory
reused from an earlier run loses that run's output first (:func:`clear_run_dir`):
its agents' outboxes and checkpoints and its hub's log would otherwise be
restored into the new run.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from simulate.chaos import chaos_faults
from simulate.config import Simulation, parse_simulation, sites_file_lines
from simulate.errors import InvalidOption, SimulationError
from simulate.faults import Fault, FaultKind, joining, parse_faults
from simulate.progress import Status
from spanedge.app import App
from spanedge.loader import load_app
from spanedge.sites import Sites, load_sites

#: Placement methods a run can use (those of :func:`placement.solve`).
PLACEMENTS = ("ilp", "greedy", "central", "local-first")
#: Baselines ``--compare`` can run next to the ILP.
BASELINES = ("central", "local-first")
MODES = ("auto", "managed", "standalone")
BROKERS = ("auto", "mosquitto", "amqtt")
#: Where the sites run: all on this host's loopback, or each in its own network namespace.
HOSTS = ("loopback", "netns")
#: What a simulation writes to its run directory (:func:`clear_run_dir` removes these, nothing else).
RUN_OUTPUT = frozenset(
    {
        *("agents", "brokers", "hub", "joins", "logs", "revocations", "sites"),
        *("deploy.json", "events.log", "netns.json", "placement.json", "plan.json", "plan-key.pem"),
        *("report.html", "report.json", "timeline.json"),
    }
)


@dataclass
class Options:
    """How to run one simulation.

    ``hub_command`` replaces the hub's program (``spanedge hub`` or ``python -m
    hub.dataplane``) and receives the same options. ``hosts`` is ``netns`` to
    run each site in its own network namespace (:mod:`simulate.netns`).
    """

    sites: Path
    app: Path
    duration: float | None = None
    faults: list[str] = field(default_factory=list)
    placement: str = "ilp"
    mode: str = "auto"
    seed: int | None = None
    chaos: int | None = None
    """The seed of a chaos run's random faults (:mod:`simulate.chaos`), added to ``faults``; None: none."""
    run_dir: Path | None = None
    broker: str = "auto"
    spark_master: str = "local[2]"
    heartbeat_interval: float = 2.0
    ready_timeout: float = 180.0
    drain_timeout: float = 90.0
    quiet: float = 4.0
    label: str = ""
    hub_command: list[str] | None = None
    hosts: str = "loopback"
    on_status: Callable[[Status], None] | None = None
    baseline: bool = False
    """A baseline run beside SpanEdge's (``--compare``): not keeping up is its result, not a failure."""
    #: a PostgreSQL connection string: run two hubs with ``--ha`` (managed mode; :mod:`hub.ha`)
    ha: str | None = None

    def resolved_mode(self) -> str:
        """``managed`` for the ILP unless told otherwise; baselines need ``standalone``."""
        if self.mode != "auto":
            return self.mode
        return "managed" if self.placement == "ilp" else "standalone"


def check_options(opts: Options, compare: str | None = None) -> None:
    """Check the options that need no file, before anything is read or started.

    ``compare`` is the baseline to run next to the ILP, if any.

    Raises:
        InvalidOption: an option has a value it cannot take; the message names it and the values it can.
    """

    def one_of(option: str, value: str | None, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            msg = f"{option} takes {', '.join(allowed[:-1])} or {allowed[-1]}, got {value!r}"
            raise InvalidOption(msg)

    check_arguments(opts.sites, opts.app)
    one_of("--placement", opts.placement, PLACEMENTS)
    one_of("--mode", opts.mode, MODES)
    one_of("--broker", opts.broker, BROKERS)
    one_of("--hosts", opts.hosts, HOSTS)
    if compare is not None:
        one_of("--compare", compare, BASELINES)
        if opts.mode == "managed":
            msg = f"--compare {compare} runs both placements in standalone mode (the hub always places with its ILP); drop --mode managed"
            raise InvalidOption(msg)
    elif opts.resolved_mode() == "managed" and opts.placement != "ilp":
        msg = f"--placement {opts.placement} needs --mode standalone (the hub always places with its ILP)"
        raise InvalidOption(msg)
    if opts.ha is not None and (compare is not None or opts.resolved_mode() != "managed"):
        msg = (
            "--ha runs two hubs with the REST API the simulation deploys through: it needs --mode managed, no --compare"
        )
        raise InvalidOption(msg)
    if opts.duration is not None and opts.duration <= 0:
        msg = f"--duration must be positive, got {opts.duration:g}s"
        raise InvalidOption(msg)
    for name in ("heartbeat_interval", "ready_timeout", "drain_timeout"):
        if getattr(opts, name) <= 0:
            msg = f"{name} must be positive, got {getattr(opts, name)!r}"
            raise InvalidOption(msg)
    if not opts.spark_master:
        msg = "--spark-master must not be empty (e.g. local[2] or spark://host:7077)"
        raise InvalidOption(msg)


def check_arguments(sites: Path, app: Path) -> None:
    """Refuse a Python file as the sites file or a YAML file as the app, saying which argument is which.

    Raises:
        InvalidOption: ``sites`` ends in ``.py`` or ``app`` in ``.yaml`` or ``.yml``.
    """
    python, is_yaml = sites.suffix == ".py", app.suffix in (".yaml", ".yml")
    which = "SITES (the first argument) is the sites file and APP_FILE (the second) the app's Python file"
    if python and is_yaml:
        msg = f"the arguments are swapped: {which}; run spanedge simulate {app} {sites}"
    elif python:
        msg = f"{which}, but SITES is the Python file {sites}; pass the sites file first, then the app"
    elif is_yaml:
        msg = f"{which}, but APP_FILE is the YAML file {app}; pass the sites file first, then the app"
    else:
        return
    raise InvalidOption(msg)


@dataclass(frozen=True)
class Scenario:
    """The checked inputs of one run and where its files go."""

    sites: Sites
    sim: Simulation
    app: App
    app_file: Path
    faults: tuple[Fault, ...]
    duration: float
    mode: str
    placement: str
    label: str
    run_dir: Path

    @classmethod
    def load(cls, opts: Options) -> Scenario:
        """Read and check the sites, simulation section, app and faults, then create the run directory.

        Raises:
            InvalidSites: the sites file or its simulation section is invalid.
            InvalidDataflow: the app cannot be loaded or reads streams no site sources.
            InvalidFault: a fault specification is malformed.
            InvalidOption: an option has a value it cannot take (see :func:`check_options`), or the run
                directory cannot be created.
        """
        check_options(opts)
        sites = load_sites(opts.sites)
        lines = sites_file_lines(opts.sites)
        sim = parse_simulation(sites, str(opts.sites), lines)
        if opts.seed is not None:
            sim = sim.replace(seed=opts.seed)
        app = load_app(opts.app)
        sites.check_app_streams(app.source_streams(), app.name, str(opts.sites), lines)
        specs = list(opts.faults)
        if opts.chaos is not None:
            try:
                specs += chaos_faults(opts.chaos, sites, opts.duration or sim.duration)
            except ValueError as exc:
                msg = f"--chaos {opts.chaos}: {exc}"
                raise InvalidOption(msg) from None
        faults = tuple(parse_faults(specs, sites))
        mode = opts.resolved_mode()
        for kind, what in ((FaultKind.REVOKE, "revokes a site"), (FaultKind.JOIN, "enrols a site")):
            named = [f.describe() for f in faults if f.kind is kind]
            if named and mode != "managed":
                msg = f"{', '.join(named)} {what} at the hub's REST API: it needs --mode managed"
                raise InvalidOption(msg)
        label = opts.label or opts.placement
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = (opts.run_dir or Path(".spanedge") / "sim" / f"{stamp}-{label}").resolve()
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = (
                f"cannot create the run directory {run_dir}: {exc.strerror or exc}; pass --run-dir in a writable place"
            )
            raise InvalidOption(msg) from None
        try:
            clear_run_dir(run_dir)
        except OSError as exc:
            msg = (
                f"cannot remove an earlier run's output from {run_dir}: {exc.strerror or exc}; "
                "pass --run-dir a new or empty directory"
            )
            raise InvalidOption(msg) from None
        duration = opts.duration or sim.duration
        return cls(sites, sim, app, opts.app.resolve(), faults, duration, mode, opts.placement, label, run_dir)

    @property
    def hub(self) -> str:
        """The hub site (the first one of ``sites.yaml``)."""
        return self.sites.hubs[0].name

    @property
    def spokes(self) -> list[str]:
        """The spoke sites, in ``sites.yaml`` order."""
        return [s.name for s in self.sites.spokes]

    @property
    def joining(self) -> dict[str, float]:
        """The spokes that join mid-run (``join`` faults), with the time of their join."""
        return joining(self.faults)

    @property
    def starting(self) -> list[str]:
        """The spokes whose agents start with the run: every spoke but those that join later."""
        return [s for s in self.spokes if s not in self.joining]

    @property
    def source_sites(self) -> list[str]:
        """The spokes that source an MQTT stream the app reads: the brokers the agents' intake subscribes on."""
        streams = self.app.source_streams()
        return [s.name for s in self.sites.spokes if streams & {n for n, b in s.streams.items() if b.url is None}]


def place(scenario: Scenario) -> tuple[Path, str]:
    """Place the app here (standalone mode), write ``plan.json`` and return its path and a one-line summary.

    Raises:
        SimulationError: the placement package cannot be imported.
    """
    try:
        from placement import solve
    except ImportError as exc:
        msg = f"the placement package cannot be imported ({exc}); standalone mode needs placement.solve"
        raise SimulationError(msg) from None
    plan = solve(scenario.app, scenario.sites, method=scenario.placement)
    if not plan.app_source:
        plan = dataclasses.replace(plan, app_file=str(scenario.app_file), app_source=scenario.app_file.read_text())
    path = scenario.run_dir / "plan.json"
    path.write_text(plan.to_json())
    by_site: dict[str, list[str]] = {}
    for a in plan.assignments:
        by_site.setdefault(a.site, []).append(a.operator)
    summary = f"placed with {scenario.placement}: " + "; ".join(
        f"{site}: {', '.join(ops)}" for site, ops in by_site.items()
    )
    return path, summary


def clear_run_dir(run_dir: Path) -> list[str]:
    """Remove an earlier simulation's output from ``run_dir`` (the :data:`RUN_OUTPUT` names); return what went.

    Anything else in the directory stays.
    """
    removed = []
    for entry in sorted(run_dir.iterdir()):
        if entry.name not in RUN_OUTPUT:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(entry.name)
    return removed
