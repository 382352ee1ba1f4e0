"""Starting and stopping Mosquitto brokers on free ports (tests and simulations)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from spanedge.errors import SpanEdgeError

#: Per-client queue limit written into every broker config the project writes.
#: Mosquitto's default of 1000 silently drops QoS 1 messages of slow clients.
MAX_QUEUED_MESSAGES = 1_000_000


def free_port() -> int:
    """Return a TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mosquitto_path() -> str:
    """Return the mosquitto executable or raise with how to install it."""
    for candidate in (shutil.which("mosquitto"), "/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"):
        if candidate and Path(candidate).exists():
            return candidate
    msg = "mosquitto is not installed; install it with 'apt-get install mosquitto' (Debian/Ubuntu) or 'brew install mosquitto'"
    raise SpanEdgeError(msg)


class BrokerProcess:
    """An MQTT broker in a child process on 127.0.0.1, started and stopped on demand.

    Subclasses give the command line and the log file; this class starts the
    process, waits until the port accepts connections, and stops it.
    Use as a context manager, or call :meth:`start`, :meth:`stop` and
    :meth:`restart` (the port is kept).
    """

    port: int
    name: str
    workdir: Path
    log_name = "broker.log"

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The command line that runs the broker."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """``mqtt://127.0.0.1:<port>``."""
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 15.0) -> BrokerProcess:
        """Start the broker and wait until it accepts connections."""
        if self.running:
            return self
        log_path = self.workdir / self.log_name
        with log_path.open("ab") as log:
            self._proc = subprocess.Popen(self.command(), stdout=log, stderr=log)  # noqa: S603 - our own command
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                msg = f"the {self.name} broker exited with code {self._proc.returncode}; see {log_path}"
                raise SpanEdgeError(msg)
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        msg = f"the {self.name} broker did not listen on port {self.port} within {timeout}s; see {log_path}"
        raise SpanEdgeError(msg)

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 10 s)."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def restart(self) -> None:
        """Stop and start again on the same port."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the broker and release what it holds."""
        self.stop()

    def __enter__(self) -> BrokerProcess:
        """Start the broker."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the broker and clean up."""
        self.close()


class Mosquitto(BrokerProcess):
    """A Mosquitto broker on 127.0.0.1 with persistence, started and stopped on demand.

    Use as a context manager, or call :meth:`start`, :meth:`stop` and
    :meth:`restart` (the port and the persisted sessions are kept).
    """

    def __init__(
        self, port: int | None = None, workdir: Path | None = None, name: str = "broker", extra_config: str = ""
    ) -> None:
        """Prepare a broker config; nothing runs until :meth:`start`.

        ``extra_config`` lines are appended to the generated config (e.g. ``sys_interval 1``).
        """
        self.port = port or free_port()
        self.name = name
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix=f"spanedge-{name}-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = self.workdir / "mosquitto.conf"
        self.config.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence true\n"
            f"persistence_location {self.workdir}/\n"
            "autosave_interval 1\n"
            f"max_queued_messages {MAX_QUEUED_MESSAGES}\n"
            "max_queued_bytes 0\n"
            "max_inflight_messages 100\n"
            "log_dest stderr\n"
            "log_type error\n"
            "log_type warning\n" + ("user root\n" if os.geteuid() == 0 else "") + extra_config
            # as root, mosquitto switches to the 'mosquitto' user, which cannot write the
            # persistence files in our directory: sessions would not survive a restart
        )
        super().__init__()

    log_name = "mosquitto.log"

    def command(self) -> list[str]:
        """``mosquitto -c <config>``."""
        return [mosquitto_path(), "-c", str(self.config)]

    def close(self) -> None:
        """Stop the broker and remove its temporary directory."""
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Mosquitto:
        """Start the broker."""
        self.start()
        return self
