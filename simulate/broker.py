"""Starting and stopping Mosquitto brokers on free ports (tests and simulations)."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulate.ports import free_port, listenable, listens
from simulate.tls import TlsFiles
from spanedge.broker_acl import MAX_INFLIGHT_MESSAGES, MAX_QUEUED_MESSAGES, mosquitto_conf
from spanedge.errors import SpanEdgeError

__all__ = [
    "MAX_QUEUED_MESSAGES",
    "BrokerProcess",
    "BrokerSecurity",
    "ConfiguredMosquitto",
    "Login",
    "Mosquitto",
    "PortTaken",
    "free_port",
    "mosquitto_path",
]


@dataclass(frozen=True)
class BrokerSecurity:
    """What a secured broker enforces: TLS with these files, the ACL file, and the password file or certificates.

    Without a password file (``None``) every client presents a certificate of the CA, whose common name is its
    username, checked against ``crl_file``.
    """

    tls: TlsFiles
    password_file: Path | None
    acl_file: Path
    crl_file: Path | None = None


@dataclass(frozen=True)
class Login:
    """How a client of the simulator (a sensor, a watcher) logs in to a secured broker.

    With a password, as ``username``; with ``cert_file`` and ``key_file`` instead, as its certificate's name.
    """

    username: str
    password: str | None
    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None

    def aiomqtt_options(self) -> dict[str, Any]:
        """Keyword arguments of ``aiomqtt.Client``: the credentials and a TLS context that verifies the broker."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.cert_file is not None:
            context.load_cert_chain(str(self.cert_file), None if self.key_file is None else str(self.key_file))
            return {"tls_context": context}
        return {"username": self.username, "password": self.password, "tls_context": context}


def mosquitto_path() -> str:
    """Return the mosquitto executable or raise with how to install it."""
    for candidate in (shutil.which("mosquitto"), "/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"):
        if candidate and Path(candidate).exists():
            return candidate
    msg = "mosquitto is not installed; install it with 'apt-get install mosquitto' (Debian/Ubuntu) or 'brew install mosquitto'"
    raise SpanEdgeError(msg)


class PortTaken(SpanEdgeError):
    """Another process listens on the port a broker was to listen on."""


PORT_TRIES = 5
"""Ports a broker whose port was chosen for it tries before it gives up (each taken by another process)."""


class BrokerProcess:
    """An MQTT broker in a child process on 127.0.0.1, started and stopped on demand.

    Subclasses give the command line and the log file; this class starts the
    process, waits until it listens on its port, and stops it. A broker
    whose port was chosen for it (``port_chosen``) moves to another free
    port when another process took that one before its first start
    (:meth:`configure` writes the new port into its settings); after that,
    and for a port given, a taken port is an error.
    Use as a context manager, or call :meth:`start`, :meth:`stop` and
    :meth:`restart` (the port is kept).
    """

    port: int
    name: str
    workdir: Path
    log_name = "broker.log"

    def __init__(self, port_chosen: bool = False) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._movable = port_chosen

    def command(self) -> list[str]:
        """The command line that runs the broker."""
        raise NotImplementedError

    def configure(self) -> None:
        """Write the broker's settings for :attr:`port` (nothing to write by default)."""

    @property
    def url(self) -> str:
        """``mqtt://127.0.0.1:<port>``."""
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 15.0) -> BrokerProcess:
        """Start the broker and wait until it listens on its port (moving to another if allowed and taken)."""
        if self.running:
            return self
        for _ in range(PORT_TRIES - 1):
            try:
                return self._start(timeout)
            except PortTaken:
                if not self._movable:
                    raise
            self.port = free_port()
            self.configure()
        return self._start(timeout)

    def _start(self, timeout: float) -> BrokerProcess:
        log_path = self.workdir / self.log_name
        if not listenable(self.port):  # else the broker could not listen there
            msg = f"the {self.name} broker cannot listen on port {self.port}: another process listens there"
            raise PortTaken(msg)
        with log_path.open("ab") as log:
            self._proc = subprocess.Popen(self.command(), stdout=log, stderr=log)  # noqa: S603 - our own command
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                if not listenable(self.port):  # another process took the port between the check and the listen
                    msg = f"the {self.name} broker could not listen on port {self.port}: another process took it"
                    raise PortTaken(msg)
                msg = f"the {self.name} broker exited with code {self._proc.returncode}; see {log_path}"
                raise SpanEdgeError(msg)
            if self.listening():  # its own listener, not another process's on the same port
                self._movable = False
                return self
            time.sleep(0.05)
        self.stop()
        msg = f"the {self.name} broker did not listen on port {self.port} within {timeout}s; see {log_path}"
        raise SpanEdgeError(msg)

    def listening(self) -> bool:
        """Whether the broker's process listens on its port."""
        return self._proc is not None and listens(self._proc.pid, self.port)

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

    With ``security``, the only listener speaks TLS, refuses anonymous clients
    and applies the password (or requires a client certificate) and ACL files (``mqtts://``); without it, the broker
    is plain and anonymous (``mqtt://``), for tests and development only.
    Use as a context manager, or call :meth:`start`, :meth:`stop` and
    :meth:`restart` (the port and the persisted sessions are kept).
    """

    def __init__(
        self,
        port: int | None = None,
        workdir: Path | None = None,
        name: str = "broker",
        extra_config: str = "",
        security: BrokerSecurity | None = None,
    ) -> None:
        """Prepare a broker config; nothing runs until :meth:`start`.

        ``extra_config`` lines are appended to the generated config (e.g. ``sys_interval 1``).
        """
        self.security = security
        self.port = port or free_port()
        self.name = name
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix=f"spanedge-{name}-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = self.workdir / "mosquitto.conf"
        self.extra_config = extra_config
        self.bind = "127.0.0.1"  # the address it listens on; "0.0.0.0" inside a site's own network namespace
        self.command_prefix: list[str] = []  # runs the broker elsewhere, e.g. ["ip", "netns", "exec", <namespace>]
        self.reach: str | None = None  # where this process reaches a broker run elsewhere (its own namespace)
        super().__init__(port_chosen=port is None)
        self.configure()

    def configure(self) -> None:
        """Write ``mosquitto.conf`` for :attr:`port`."""
        security = self.security
        if security is None:
            listener = (
                f"listener {self.port} {self.bind}\nallow_anonymous true\n"
                f"max_queued_messages {MAX_QUEUED_MESSAGES}\nmax_queued_bytes 0\n"
                f"max_inflight_messages {MAX_INFLIGHT_MESSAGES}\n"
            )
        else:
            passwords = security.password_file
            listener = mosquitto_conf(
                port=self.port,
                bind=self.bind,
                acl_file=str(security.acl_file),
                password_file=None if passwords is None else str(passwords),
                cafile=str(security.tls.ca_file),
                certfile=str(security.tls.cert_file),
                keyfile=str(security.tls.key_file),
                crlfile=None if security.crl_file is None else str(security.crl_file),
                certificate_identity=passwords is None,
            )
        self.config.write_text(
            listener + "persistence true\n"
            f"persistence_location {self.workdir}/\n"
            f"pid_file {self.pid_file}\n"
            "autosave_interval 1\n"
            "log_dest stderr\n"
            "log_type error\n"
            "log_type warning\n" + ("user root\n" if os.geteuid() == 0 else "") + self.extra_config
            # as root, mosquitto switches to the 'mosquitto' user, which cannot write the
            # persistence files in our directory: sessions would not survive a restart
        )

    log_name = "mosquitto.log"

    @property
    def pid_file(self) -> Path:
        """Where the broker writes its pid: the hub reloads it (SIGHUP) after rewriting the ACL."""
        return self.workdir / "mosquitto.pid"

    def listening(self) -> bool:
        """Whether it listens; a broker in a namespace of its own is the only server there, so a connection tells."""
        if self.reach is None:
            return super().listening()
        try:
            socket.create_connection((self.reach, self.port), timeout=0.5).close()
        except OSError:
            return False
        return True

    @property
    def url(self) -> str:
        """``mqtts://127.0.0.1:<port>`` when secured, else ``mqtt://127.0.0.1:<port>``."""
        scheme = "mqtt" if self.security is None else "mqtts"
        return f"{scheme}://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """``mosquitto -c <config>`` (after :attr:`command_prefix`)."""
        return [*self.command_prefix, mosquitto_path(), "-c", str(self.config)]

    def close(self) -> None:
        """Stop the broker and remove its temporary directory."""
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Mosquitto:
        """Start the broker."""
        self.start()
        return self


class ConfiguredMosquitto(BrokerProcess):
    """Mosquitto run from a config written elsewhere (``spanedge broker-config``), exactly as it is.

    ``port`` is the port the config listens on; the log goes to ``workdir``.
    """

    log_name = "mosquitto.log"

    def __init__(self, config: Path, port: int, workdir: Path, name: str = "broker") -> None:
        self.config = config
        self.port = port
        self.workdir = workdir
        self.name = name
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__()

    @property
    def url(self) -> str:
        """``mqtts://127.0.0.1:<port>``: the configs of ``broker-config`` listen with TLS only."""
        return f"mqtts://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """``mosquitto -c <config>``."""
        return [mosquitto_path(), "-c", str(self.config)]

    def __enter__(self) -> ConfiguredMosquitto:
        """Start the broker."""
        self.start()
        return self
