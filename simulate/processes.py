"""Child processes of a simulation, each in its own process group, stopped on any exit."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

import psutil

_LIVE: weakref.WeakSet[Child] = weakref.WeakSet()


def spanedge_command(*args: str) -> list[str]:
    """The argv to run ``spanedge <args>`` with the running interpreter's installation."""
    script = Path(sys.executable).parent / "spanedge"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "from spanedge.cli import main; main()", *args]


class Child:
    """A child process with its log file; :meth:`stop` and :meth:`kill` hit its whole process group."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        """Prepare the process; nothing runs until :meth:`start`."""
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.env = {**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.cpu_seen: dict[int, float] = {}
        self.cpu_done = 0.0

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id (also its process group id)."""
        return None if self.proc is None else self.proc.pid

    def start(self) -> Child:
        """Start the process in a new session, appending its output to the log."""
        if self.alive:
            return self
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(  # noqa: S603 - our own commands
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        self.starts += 1
        _LIVE.add(self)
        return self

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process group."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process group and reap the process."""
        if self.proc is None:
            return
        self.sample_cpu()
        self._fold_cpu()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the process, wait, then SIGKILL what is left of its group; return the exit code.

        Only the process gets SIGTERM, as from ``docker stop`` or systemd's ``KillMode=mixed``: the hub
        stops its Spark queries and then the JVM it started, which would otherwise end first and leave
        Python tracebacks in the hub's log.
        """
        if self.proc is None:
            return None
        self.sample_cpu()
        self._fold_cpu()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._dump_stacks()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        return self.proc.returncode

    def _dump_stacks(self) -> None:
        """Ask a hung Python child for its stack traces (faulthandler, on SIGABRT) before it is killed."""
        assert self.proc is not None
        with self.log.open("ab") as out:
            out.write(f"\n=== {self.name} ignored SIGTERM; its threads (SIGABRT):\n".encode())
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=3)

    def restart(self) -> None:
        """Stop (gracefully) and start again with the same command."""
        self.stop()
        self.start()

    def sample_cpu(self) -> float:
        """CPU seconds used so far by the process and its descendants (folding in exited ones)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.cpu_done + sum(self.cpu_seen.values())
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return self.cpu_done + sum(self.cpu_seen.values())
        for p in procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                self.cpu_seen[p.pid] = t.user + t.system
        return self.cpu_done + sum(self.cpu_seen.values())

    def _fold_cpu(self) -> None:
        self.cpu_done += sum(self.cpu_seen.values())
        self.cpu_seen.clear()

    def tail(self, lines: int = 30) -> str:
        """The last lines of the log."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def stop_all() -> None:
    """Stop every child still running (registered with atexit)."""
    for child in list(_LIVE):
        with contextlib.suppress(Exception):
            child.stop(timeout=5)


atexit.register(stop_all)
