"""The agent's settings, each defined once; ``spanedge agent`` builds its options from them.

:class:`AgentLaunch` holds what the command starts from (the site, the files it
reads, the log level); :class:`AgentConfig` holds how the agent runs. A field
with ``help`` in its metadata is a command-line option (``--heartbeat-interval``)
and an environment variable (``SPANEDGE_AGENT_HEARTBEAT_INTERVAL``); the others
are tunables for code and tests. :meth:`AgentLaunch.load` reads the files and
returns the :class:`AgentConfig` and the plans to run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_agent.mqtt.select import TRANSPORTS
from spanedge.client_certs import check_client_certificates
from spanedge.errors import SpanEdgeError
from spanedge.names import check_site_name
from spanedge.plan import Plan
from spanedge.runtime import check_idle_timeout
from spanedge.sites import Sites, load_sites

if TYPE_CHECKING:
    from spanedge.signing import TrustedKeys

#: Prefix of the environment variables that set agent options.
ENV_PREFIX = "SPANEDGE_AGENT_"
#: The accepted values of ``--log-level``.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _help(help: str, **limits: float) -> dict[str, Any]:
    """Field metadata that makes a field a command-line option; ``limits`` (``min``, ``max``) bound it there."""
    return {"help": help, **limits}


def _option(default: Any, help: str, **limits: float) -> Any:
    """A field with a default that is also a command-line option."""
    return field(default=default, metadata=_help(help, **limits))


def _choice(value: str, choices: Sequence[str], what: str) -> str:
    """The one of ``choices`` that ``value`` names, whatever its case; ``ValueError`` naming ``what`` otherwise."""
    chosen = next((c for c in choices if c.lower() == value.lower()), None)
    if chosen is None:
        msg = f"invalid {what} {value!r}; use one of {', '.join(choices)}"
        raise ValueError(msg)
    return chosen


def check_log_level(value: str) -> str:
    """The log level ``value`` names, in upper case.

    Raises:
        ValueError: ``value`` is not one of :data:`LOG_LEVELS`.
    """
    return _choice(value, LOG_LEVELS, "log level")


def check_transport(value: str) -> str:
    """The MQTT transport ``value`` names, in lower case.

    Raises:
        ValueError: ``value`` is not one of :data:`TRANSPORTS`.
    """
    return _choice(value, TRANSPORTS, "transport")


@dataclass
class AgentConfig:
    """How one agent runs."""

    site: str
    sites: Sites
    state_dir: Path
    heartbeat_interval: float = _option(5.0, "seconds between heartbeats")
    peer_probe_interval: float = _option(
        30.0, "seconds between latency probes to other spokes' brokers (each is a connection; with TLS, a handshake)"
    )
    outbox_max_bytes: int = _option(256 * 2**20, "bound of the on-disk outbox")
    drop_policy: str = _option("oldest", "when the outbox is full: oldest or newest")
    drain_rate: float = _option(20_000.0, "max records/s sent to the hub")
    max_future_skew: float = _option(300.0, "events further ahead of the agent clock (s) go to the DLQ")
    out_of_orderness: float = _option(1.0, "seconds the watermark stays behind")
    idle_timeout: float | None = _option(
        None,
        "seconds without records after which the watermark follows the agent clock, "
        "so the last windows close (0 or unset: off)",
        min=0.0,
    )
    checkpoint_interval: float = _option(1.0, "seconds between checkpoints")
    plan_wait: float = _option(
        10.0,
        "seconds a restarted managed agent waits for the hub's current plan before it resumes the plan it saved "
        "(0: resume at once)",
        min=0.0,
    )
    spool_keep_s: float = _option(
        900.0,
        "seconds this site keeps the messages of its streams other spokes consume, to recompute a gone spoke's part",
        min=0.0,
    )
    rollback_spool_bytes: int = _option(
        64 * 2**20,
        "bytes per app of the messages kept, after a new version changed windows here, to resume them if the "
        "site goes back to the previous version (0: keep none)",
        min=0,
    )
    metrics_port: int | None = _option(None, "serve Prometheus metrics on this port (unset: off)")
    batch_size: int = 100
    inbox_size: int = 5000
    shutdown_drain_s: float = 5.0
    late_file_max_bytes: int = 16 * 2**20
    trusted_keys: TrustedKeys | None = None  # the hub's public keys (managed mode)

    def __post_init__(self) -> None:
        """Reject a site that is not a spoke and an ``idle_timeout`` the pipelines could not use, before anything starts."""
        self.sites.spoke(self.site)
        check_idle_timeout(self.idle_timeout)


@dataclass(frozen=True)
class AgentLaunch:
    """What ``spanedge agent`` starts from: the site, the files it reads and the log level.

    Raises:
        ValueError: ``log_level`` is not one of :data:`LOG_LEVELS`.
    """

    site: str = field(metadata=_help("the site this agent serves"))
    sites: Path = field(metadata=_help("sites.yaml"))
    plan: Path | None = field(
        default=None, metadata=_help("standalone: run this plan.json; without it, take plans from the hub")
    )
    state_dir: Path | None = field(
        default=None, metadata=_help("outbox and checkpoints (default: ./.spanedge/agent-<site>)")
    )
    log_level: str = field(default="INFO", metadata=_help("DEBUG, INFO, WARNING or ERROR"))
    transport: str = field(
        default="asyncio", metadata=_help("MQTT client: asyncio (the agent's own, lean) or paho (paho-mqtt)")
    )

    def __post_init__(self) -> None:
        """Check the site name; normalise the log level and the transport, or refuse them with the accepted values."""
        check_site_name(self.site, "--site")
        object.__setattr__(self, "log_level", check_log_level(self.log_level))
        object.__setattr__(self, "transport", check_transport(self.transport))

    def load(self, **options: Any) -> tuple[AgentConfig, list[Plan] | None]:
        """Read the files: the agent's config with ``options`` (:class:`AgentConfig` fields), and its plans.

        The plans are ``None`` in managed mode (no plan file); the hub's public keys are loaded then.

        Raises:
            SpanEdgeError: a file is missing or invalid, the site is not a spoke of it, or no trusted key
                is configured (managed mode).
            ValueError: an option is out of range.
        """
        sites = load_sites(self.sites)
        sites.spoke(self.site)  # an unknown site or a hub, refused with the spokes' names before certificates
        check_client_certificates(sites, self.site)
        plans = None
        trusted = None
        if self.plan is not None:
            try:
                text = self.plan.read_text()
            except OSError as exc:
                msg = f"cannot read plan file {self.plan}: {exc.strerror}"
                raise SpanEdgeError(msg) from None
            plans = [Plan.from_json(text)]
        else:
            from spanedge import signing  # managed mode only: plans are verified

            trusted = signing.load_trusted_keys()
        state_dir = self.state_dir or Path(".spanedge") / f"agent-{self.site}"
        config = AgentConfig(self.site, sites, state_dir, trusted_keys=trusted, **options)
        return config, plans


def option_fields(settings: type[Any]) -> list[dataclasses.Field[Any]]:
    """The fields of a settings dataclass (:class:`AgentLaunch`, :class:`AgentConfig`) that are options."""
    return [f for f in dataclasses.fields(settings) if "help" in f.metadata]


def env_var(name: str) -> str:
    """The environment variable of option ``name``."""
    return ENV_PREFIX + name.upper()
