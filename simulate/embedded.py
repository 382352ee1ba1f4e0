"""An embedded Python MQTT broker (amqtt) for machines without Mosquitto.

It runs in its own process (``python -m simulate.embedded --port N``) so that
it can be stopped and restarted like Mosquitto. It keeps no sessions across a
restart, so ``restart-broker`` faults lose what was queued for disconnected
clients; use Mosquitto for fault experiments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from simulate.broker import BrokerProcess, free_port


class EmbeddedBroker(BrokerProcess):
    """An amqtt broker on 127.0.0.1 in a child process, with the interface of :class:`~simulate.broker.Mosquitto`."""

    log_name = "amqtt.log"

    def __init__(self, port: int | None = None, workdir: Path | None = None, name: str = "broker") -> None:
        """Prepare the broker; nothing runs until :meth:`start`."""
        super().__init__(port_chosen=port is None)
        self.port = port or free_port()
        self.name = name
        self.workdir = Path(workdir) if workdir else Path.cwd() / ".spanedge" / "brokers" / name
        self.workdir.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        """``python -m simulate.embedded --port <port>``."""
        return [sys.executable, "-m", "simulate.embedded", "--port", str(self.port)]


async def serve(port: int) -> None:
    """Run an amqtt broker on ``127.0.0.1:port`` until SIGTERM or SIGINT."""
    from amqtt.broker import Broker

    config = {
        "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{port}"}},
        "plugins": {
            "amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True},
            "amqtt.plugins.sys.broker.BrokerSysPlugin": {"sys_interval": 1},
        },
    }
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    with contextlib.suppress(Exception):
        await broker.shutdown()


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m simulate.embedded``."""
    parser = argparse.ArgumentParser(description="embedded MQTT broker for spanedge simulate")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
