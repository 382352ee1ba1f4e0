"""The ``spanedge hub`` command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spanedge.cli.errors import fail

#: The accepted values of ``spanedge hub --log-level``.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _log_level(value: str) -> str:
    """``value`` in upper case, or a usage error naming the accepted levels."""
    level = value.upper()
    if level not in LOG_LEVELS:
        msg = f"invalid log level {value!r}; use one of {', '.join(LOG_LEVELS)}"
        raise typer.BadParameter(msg)
    return level


def hub(
    sites: Annotated[Path, typer.Option(help="sites.yaml")],
    host: Annotated[str, typer.Option(help="REST API address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="REST API port")] = 8000,
    state_dir: Annotated[Path, typer.Option(help="deployed apps, ingest log, Spark checkpoints")] = Path(
        ".spanedge/hub"
    ),
    spark_master: Annotated[
        str,
        typer.Option(
            help="any Spark master URL: local[N] on this machine, spark://HOST:7077 for a standalone cluster "
            "(then --state-dir must be on storage every executor reads; see the steps above)"
        ),
    ] = "local[2]",
    token_file: Annotated[
        Path | None,
        typer.Option(help="file holding the admin API token (default: SPANEDGE_TOKEN; read-only: SPANEDGE_READ_TOKEN)"),
    ] = None,
    no_spark: Annotated[bool, typer.Option("--no-spark", help="control plane only: no ingest, no engine")] = False,
    hub_site: Annotated[str | None, typer.Option(help="which hub site of sites.yaml this is")] = None,
    down_after: Annotated[float, typer.Option(help="a site is down after this many silent seconds")] = 15.0,
    drift_threshold: Annotated[float, typer.Option(help="relative latency/rate change that triggers a re-plan")] = 0.5,
    min_replan_interval: Annotated[float, typer.Option(help="seconds between two re-plans of an app")] = 60.0,
    trigger: Annotated[str, typer.Option(help="Spark trigger interval")] = "500 milliseconds",
    log_level: Annotated[
        str,
        typer.Option(
            envvar="SPANEDGE_HUB_LOG_LEVEL",
            callback=_log_level,
            autocompletion=lambda: list(LOG_LEVELS),
            help="DEBUG, INFO, WARNING or ERROR",
        ),
    ] = "INFO",
) -> None:
    r"""Run the hub: REST API, plan distribution, ingest and Spark.

    On a Spark cluster, step by step:

    1. Start a master (spark-class org.apache.spark.deploy.master.Master --host HUB --port 7077) and, on each worker machine, a worker (spark-class org.apache.spark.deploy.worker.Worker spark://HUB:7077).

    2. Install spanedge\[hub] (with pyarrow) into the same Python path on every worker: executors run the hub's Python operators with it (Spark reads the ingest log itself).

    3. Put --state-dir on storage every executor reads at the same path (NFS; HDFS or S3 for the checkpoints of a larger cluster): the ingest log and the checkpoints live there.

    4. Run: spanedge hub --sites sites.yaml --spark-master spark://HUB:7077 --state-dir /shared/spanedge
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
            trigger=trigger,
            hub_site=hub_site,
            down_after_s=down_after,
            drift_threshold=drift_threshold,
            min_replan_interval_s=min_replan_interval,
            log_level=log_level,
        )
        Hub(parsed, config).serve()
    except SpanEdgeError as exc:
        raise fail(exc) from None
