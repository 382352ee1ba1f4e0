r"""The hub's data plane as a process: MQTT ingest plus the Spark engine for one app.

Run it as::

    python -m hub.dataplane --sites sites.yaml --state-dir .spanedge \\
        --app app.py --plan plan.json [--spark-master local[2]] [--trigger '470 milliseconds'] \\
        [--stateless-trigger '230 milliseconds'] [--conf KEY=VALUE]

It prints ``dataplane ready`` once the app's queries run, restarts a query
that fails, and stops cleanly on SIGTERM or SIGINT. It locks ``--state-dir``
as the hub does (:mod:`hub.control.state_lock`) and connects its ingest as
``spanedge-hub-<hub site>-<instance>-ingest`` (:mod:`hub.control.identity`;
a state directory with an ingest log from before instance ids keeps
``spanedge-hub-ingest``), unless ``--client-id`` names another id. All its state (the ingest log, the dedupe marks, the
checkpoints) lives under ``--state-dir``, so after a crash the same command
resumes without losing or repeating results.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from hub.engine.session import DEFAULT_TRIGGER
from spanedge.errors import SpanEdgeError
from spanedge.loader import load_app
from spanedge.plan import Plan
from spanedge.sites import load_sites


def _setting(given: str) -> tuple[str, str]:
    from hub.engine.session import parse_setting

    try:
        return parse_setting(given)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(prog="python -m hub.dataplane", description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=Path, required=True, help="sites.yaml")
    parser.add_argument("--state-dir", type=Path, required=True, help="directory for the log and checkpoints")
    parser.add_argument("--app", type=Path, required=True, help="the app's Python file")
    parser.add_argument("--plan", type=Path, required=True, help="the plan as JSON")
    parser.add_argument("--spark-master", default="local[2]", help="any Spark master URL")
    parser.add_argument("--trigger", default=DEFAULT_TRIGGER, help="micro-batch interval")
    parser.add_argument(
        "--stateless-trigger",
        help="micro-batch interval of the queries that run no window (default: 230 milliseconds, or --trigger if shorter)",
    )
    parser.add_argument(
        "--conf", action="append", default=[], type=_setting, metavar="KEY=VALUE", help="a Spark setting (repeat it)"
    )
    parser.add_argument(
        "--client-id", help="MQTT client id of the ingest (default: made from the instance id in --state-dir)"
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run ingest and the engine until SIGTERM/SIGINT; return the exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        sites = load_sites(args.sites)
        app = load_app(args.app)
        plan = Plan.from_json(args.plan.read_text())
    except (SpanEdgeError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    from hub.control.identity import HubIdentity
    from hub.control.state_lock import StateDirLock
    from hub.engine.engine import Engine
    from hub.ingest.consumer import Ingest
    from hub.ingest.publishers import from_plans

    try:
        identity = HubIdentity.of(args.state_dir)
        lock = StateDirLock(args.state_dir, identity.instance).acquire()  # held until the process ends
    except SpanEdgeError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    client_id = args.client_id or identity.client_id(plan.hub, "ingest")
    if args.client_id is None and identity.legacy_ingest:
        client_id = "spanedge-hub-ingest"  # the data plane's id before instance ids: its session may hold records
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    broker = sites.site(plan.hub).mqtt()
    ingest = Ingest(
        broker,
        args.state_dir / "ingest",
        client_id=client_id,
        may_publish=from_plans(lambda name: (plan,) if name == plan.app else ()),
        max_message_bytes=sites.site(plan.hub).message_limit,
    )
    ingest.start()
    engine = Engine(
        args.state_dir,
        sites,
        spark_master=args.spark_master,
        trigger=args.trigger,
        stateless_trigger=args.stateless_trigger,
        spark_conf=dict(args.conf),
    )
    try:
        engine.deploy(app, plan)
        sys.stdout.write("dataplane ready\n")
        sys.stdout.flush()
        while not stop.wait(1.0):
            engine.recover()  # a failed query restarts from its checkpoint
    except SpanEdgeError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    finally:
        ingest.stop()
        engine.stop()
        lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
