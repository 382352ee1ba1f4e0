"""The ``spanedge hub`` command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from spanedge.cli.errors import fail
from spanedge.cli.params import PATH, Command, option

#: The accepted values of ``spanedge hub --log-level``.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: hub.engine.session.DEFAULT_TRIGGER, spelled out: the hub is imported only when the command runs.
TRIGGER = "470 milliseconds"


def _log_level(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """``value`` in upper case, or a usage error naming the accepted levels."""
    level = value.upper()
    if level not in LOG_LEVELS:
        msg = f"invalid log level {value!r}; use one of {', '.join(LOG_LEVELS)}"
        raise click.BadParameter(msg)
    return level


def _spark_conf(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    """Each ``KEY=VALUE`` of ``--conf`` as a setting, or a usage error saying what a setting looks like."""
    if not value:
        return {}
    from hub.engine.session import parse_setting

    try:
        return dict(parse_setting(given) for given in value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _interval(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``value`` if it is a micro-batch interval Spark takes (or not given), else a usage error with an example."""
    from hub.engine.session import interval_seconds

    if value is not None and interval_seconds(value) is None:
        msg = f"{value!r} is not an interval; give a number and a unit, such as '470 milliseconds' or '1 second'"
        raise click.BadParameter(msg)
    return value


def _plan_ttl(_ctx: click.Context, _param: click.Parameter, value: str) -> float:
    """``value`` in seconds (a duration such as '7d' or '12h'), or a usage error with an example."""
    from spanedge.durations import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _complete_log_level(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of ``--log-level``: the levels that start with what is typed, whatever its case."""
    return [level for level in LOG_LEVELS if level.startswith(incomplete.upper())]


def _ha_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``value`` if it is an http(s) URL (or not given), else a usage error with an example."""
    if value is None:
        return None
    from hub.ha.config import checked_url

    try:
        return checked_url(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _ha_config(dsn: str | None, name: str | None, lease_s: float, url: str | None) -> Any:
    """The ``HaConfig`` of ``--ha`` (None without it)."""
    if dsn is None:
        return None
    from hub.ha.config import HaConfig

    if name is None:
        return HaConfig(dsn, ttl_s=lease_s, url=url)
    return HaConfig(dsn, name=name, ttl_s=lease_s, url=url)


@click.command(cls=Command)
@option("--sites", type=PATH, required=True, help="sites.yaml")
@option("--host", default="127.0.0.1", help="REST API address")
@option("--port", default=8000, help="REST API port")
@option(
    "--tls-cert",
    type=PATH,
    envvar="SPANEDGE_HUB_TLS_CERT",
    help="PEM certificate of the REST API (with --tls-key) [default: issued by the hub's CA in STATE_DIR/ca for "
    "--host, localhost, 127.0.0.1 and this machine's host name, into STATE_DIR/tls]",
)
@option("--tls-key", type=PATH, envvar="SPANEDGE_HUB_TLS_KEY", help="PEM private key of --tls-cert")
@option(
    "--tls-name",
    "tls_names",
    multiple=True,
    envvar="SPANEDGE_HUB_TLS_NAMES",
    show_default=False,
    help="another DNS name or address of the certificate the hub's CA issues, one clients on other machines reach "
    "the hub by (repeat it; the variable takes names separated by spaces)",
)
@option(
    "--plain-http",
    is_flag=True,
    help="serve the REST API over plain HTTP instead of HTTPS (tokens in clear): refused unless --host is a "
    "loopback address",
)
@option("--state-dir", type=PATH, default=Path(".spanedge/hub"), help="deployed apps, ingest log, Spark checkpoints")
@option(
    "--spark-master",
    default="local[2]",
    help="any Spark master URL: local[N] on this machine, spark://HOST:7077 for a standalone cluster "
    "(then --state-dir must be on storage every executor reads; see the steps above)",
)
@option(
    "--token-file",
    type=PATH,
    help="file holding the admin API token (default: SPANEDGE_TOKEN; read-only: SPANEDGE_READ_TOKEN)",
)
@option(
    "--conf",
    "spark_conf",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_spark_conf,
    show_default=False,
    help="a Spark setting for the hub's session, over the hub's own (repeat it): spark.executor.memory=2g, "
    "spark.sql.shuffle.partitions=8 on a cluster, the RocksDB state store",
)
@option("--no-spark", is_flag=True, help="control plane only: no ingest, no engine")
@option("--hub-site", help="which hub site of sites.yaml this is")
@option("--down-after", default=15.0, help="a site is down after this many silent seconds")
@option("--drift-threshold", default=0.5, help="relative latency/rate change that triggers a re-plan")
@option("--min-replan-interval", default=60.0, help="seconds between two re-plans of an app")
@option(
    "--trigger",
    default=TRIGGER,
    callback=_interval,
    help="Spark's micro-batch interval of the queries that run a window at the hub (and of all queries, if "
    "shorter than --stateless-trigger's default); Spark starts micro-batches at multiples of it, so an interval "
    "that divides a second (500 ms) starts one at every window's end, just before the record that closes the "
    "window, and each window waits a whole interval; the ingest seals the log just before each micro-batch; a "
    "shorter interval (230 milliseconds) gives results sooner and costs the hub more CPU",
)
@option(
    "--stateless-trigger",
    default=None,
    callback=_interval,
    help="micro-batch interval of the queries that run no window at the hub (record-level operators only, such "
    "as those after edge windows) [default: 230 milliseconds, or --trigger if shorter]: a record waits about half "
    "of it for its micro-batch, whatever its phase, so a shorter one brings their results sooner without changing "
    "the windows' phase, and costs the hub more CPU; give --trigger's value for one interval for every query",
)
@option(
    "--window-close",
    type=click.Choice(["next-batch", "watermark"]),
    default="watermark",
    show_default=True,
    help="when a window feeding a hub sink is written: in the micro-batch that moved the watermark past it, "
    "records later than allowed_lateness dropped as at the edge, or in the micro-batch after, which still adds "
    "records arriving in between (Spark's append mode); a query keeps the mode its checkpoint was started in",
)
@option(
    "--log-level",
    envvar="SPANEDGE_HUB_LOG_LEVEL",
    default="INFO",
    callback=_log_level,
    shell_complete=_complete_log_level,
    help="DEBUG, INFO, WARNING or ERROR",
)
@option(
    "--site-grace",
    default=180.0,
    type=click.FloatRange(min=0),
    help="a spoke silent this many seconds counts as gone: what it ran for other sites is re-planned elsewhere",
)
@option(
    "--handover-wait",
    default=30.0,
    type=click.FloatRange(min=0),
    show_default=True,
    help="after a replica leaves a spoke, the hub's windows wait at most this many seconds past the switch for "
    "the old owner's last records (it restarts or is cut off); then they come out without them, with a warning. "
    "A spoke silent for --site-grace is no longer waited for",
)
@option(
    "--overload-for",
    default=30.0,
    type=click.FloatRange(min=0),
    help="a spoke over its CPU budget in every heartbeat for this many seconds is re-planned with what it can carry",
)
@option(
    "--overload-recover",
    default=60.0,
    type=click.FloatRange(min=0),
    help="a spoke able to carry its old load again for this many seconds gets its capacity back (and a re-plan)",
)
@option(
    "--plan-ttl",
    default="7d",
    callback=_plan_ttl,
    show_default=True,
    help="a plan message expires this long after it is issued (a duration: 7d, 12h); the hub re-issues it after "
    "half of it, and an agent still running an expired plan warns and reports it in its heartbeat",
)
@option(
    "--broker-dir",
    type=PATH,
    help="directory the hub writes its brokers' ACL files and CRL into, on start and whenever a site is added or "
    "revoked (point each broker's acl_file and crlfile there)",
)
@option(
    "--broker-pid-file",
    type=PATH,
    multiple=True,
    help="pid file of a broker to reload (SIGHUP) after writing those files; repeat for several",
)
@option(
    "--broker-observer",
    multiple=True,
    help="a read-only identity the ACLs keep, as given to 'spanedge broker-config --observer'; repeat for several",
)
@option(
    "--broker-local-topic",
    multiple=True,
    help="a local sink topic the ACLs keep, as given to 'spanedge broker-config --local-topic'; repeat for several",
)
@option(
    "--join-token-ttl",
    default="1h",
    callback=_plan_ttl,
    show_default=True,
    help="how long a join token of 'spanedge site add' stays valid (a duration: 1h, 30m)",
)
@option(
    "--ha",
    "ha_dsn",
    envvar="SPANEDGE_HUB_HA",
    metavar="DSN",
    help="run as one hub of a highly available group: the PostgreSQL database (postgresql://USER@HOST/DB) that "
    "holds the leader's lease, the apps, plans, added sites and join tokens; every hub of the group shares it and "
    "--state-dir; one leads, the others stand by (see the high-availability guide)",
)
@option("--ha-name", help="this hub's name in the group, shown as 'leader' by the standbys [default: the host name]")
@option(
    "--ha-lease",
    default=10.0,
    type=click.FloatRange(min=1),
    show_default=True,
    help="seconds a leader's lease lasts after each renewal: a standby takes over this long after the leader died",
)
@option(
    "--ha-url",
    callback=_ha_url,
    envvar="SPANEDGE_HUB_HA_URL",
    help="the REST URL clients reach this hub by: while it leads, the standbys redirect writes there "
    "[default: the URL it serves on, https://HOST:PORT, with the host name for a wildcard --host]",
)
def hub(
    sites: Path,
    host: str,
    port: int,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_names: tuple[str, ...],
    plain_http: bool,
    state_dir: Path,
    spark_master: str,
    token_file: Path | None,
    spark_conf: dict[str, str],
    no_spark: bool,
    hub_site: str | None,
    down_after: float,
    drift_threshold: float,
    min_replan_interval: float,
    trigger: str,
    stateless_trigger: str | None,
    window_close: str,
    log_level: str,
    site_grace: float,
    handover_wait: float,
    overload_for: float,
    overload_recover: float,
    plan_ttl: float,
    broker_dir: Path | None,
    broker_pid_file: tuple[Path, ...],
    broker_observer: tuple[str, ...],
    broker_local_topic: tuple[str, ...],
    join_token_ttl: float,
    ha_dsn: str | None,
    ha_name: str | None,
    ha_lease: float,
    ha_url: str | None,
) -> None:
    """Run the hub: REST API, plan distribution, ingest and Spark.

    On a Spark cluster, step by step:

    1. Start a master (spark-class org.apache.spark.deploy.master.Master --host HUB --port 7077) and, on each worker machine, a worker (spark-class org.apache.spark.deploy.worker.Worker spark://HUB:7077).

    2. Install spanedge[hub] (with pyarrow) into the same Python path on every worker: executors run the hub's Python operators with it (Spark reads the ingest log itself).

    3. Put --state-dir on storage every executor and the hub mount at the same path (NFS): the ingest log (hard links, file locks) and the checkpoints (the hub reads their commit logs) live there, so not HDFS or S3.

    4. Run: spanedge hub --sites sites.yaml --spark-master spark://HUB:7077 --state-dir /shared/spanedge --conf spark.sql.shuffle.partitions=N (N: about the cluster's cores; --conf takes any Spark setting, e.g. spark.executor.memory=2g)
    """
    import logging

    from spanedge.errors import SpanEdgeError
    from spanedge.signing import load_signing_key
    from spanedge.sites import load_sites
    from spanedge.tokens import load_tokens

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(log_level)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        parsed = load_sites(sites)
        tokens = load_tokens(token_file)
        plan_key = load_signing_key()
        from hub.server import Hub, HubConfig

        config = HubConfig(
            tokens=tokens,
            plan_key=plan_key,
            state_dir=state_dir,
            host=host,
            port=port,
            spark=not no_spark,
            spark_master=spark_master,
            spark_conf=spark_conf,
            trigger=trigger,
            stateless_trigger=stateless_trigger,
            close_windows=window_close == "watermark",
            hub_site=hub_site,
            down_after_s=down_after,
            drift_threshold=drift_threshold,
            min_replan_interval_s=min_replan_interval,
            log_level=log_level,
            site_grace_s=site_grace,
            handover_wait_s=handover_wait,
            overload_for_s=overload_for,
            overload_recover_s=overload_recover,
            plan_ttl_s=plan_ttl,
            broker_dir=broker_dir,
            broker_pid_files=broker_pid_file,
            broker_observers=broker_observer,
            broker_local_topics=broker_local_topic,
            join_token_ttl_s=join_token_ttl,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_names=tls_names,
            plain_http=plain_http,
            ha=_ha_config(ha_dsn, ha_name, ha_lease, ha_url),
        )
        if config.ha is None:
            Hub(parsed, config).serve()
        else:
            from hub.ha.node import HaNode

            HaNode(parsed, config).serve()
    except SpanEdgeError as exc:
        raise fail(exc) from None
