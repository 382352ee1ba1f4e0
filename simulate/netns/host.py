"""Running the ``ip`` and ``tc`` commands of a namespace run, checking the machine can, and sweeping leftovers.

Every run names its namespaces after its pid (:mod:`simulate.netns.layout`);
:func:`sweep` removes those of runs whose process is gone (a crash, a
SIGKILL): it kills what still runs inside them, then deletes them and the
simulator's ends of their lab links.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence

import psutil

from simulate.errors import SimulationError
from simulate.netns.layout import Layout, lab_dev_prefix, netem_probe_commands, parse_run, teardown_commands

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run one command, capturing its output (no check)."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)  # noqa: S603


def check_command(argv: Sequence[str], runner: Runner = run_command) -> str:
    """Run one command and return its output.

    Raises:
        SimulationError: it failed; the message has the command and what it printed.
    """
    done = runner(argv)
    if done.returncode != 0:
        msg = (
            f"{' '.join(argv)} failed with code {done.returncode}: {(done.stderr or done.stdout).strip()}; "
            "namespace runs need root and iproute2 (run as root, or use --hosts loopback)"
        )
        raise SimulationError(msg)
    return done.stdout


def unavailable(runner: Runner = run_command) -> str | None:
    """Why this machine cannot make network namespaces (not root, no ``ip`` or ``tc``, refused), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root: run as root, or simulate on loopback (--hosts loopback)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"network namespaces need iproute2's '{tool}': apt-get install iproute2"
    probe = f"spanedge-{os.getpid()}-{secrets.token_hex(2)}-r"
    done = runner(["ip", "netns", "add", probe])
    if done.returncode != 0:
        return f"'ip netns add' failed here: {done.stderr.strip()}; the kernel or container refuses namespaces"
    runner(["ip", "netns", "del", probe])
    return None


def has_netem(layout: Layout, runner: Runner = run_command) -> bool:
    """Whether the kernel has netem (a netem qdisc can be added in the run's router namespace)."""
    add, remove = netem_probe_commands(layout)
    if runner(add).returncode != 0:
        return False
    runner(remove)
    return True


def namespaces(runner: Runner = run_command) -> list[str]:
    """The names of every network namespace (``ip netns list``)."""
    done = runner(["ip", "netns", "list"])
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def lab_devs(tag: str, runner: Runner = run_command) -> list[str]:
    """The simulator's ends of the lab links of the run tagged ``tag`` still in this namespace."""
    done = runner(["ip", "-o", "link", "show"])
    names = [m[1] for m in re.finditer(r"^\d+:\s+([^:@\s]+)", done.stdout, flags=re.M)]
    return [n for n in names if n.startswith(lab_dev_prefix(tag))]


def kill_inside(namespace: str, runner: Runner = run_command) -> int:
    """SIGKILL every process in ``namespace``; return how many."""
    pids = [int(p) for p in runner(["ip", "netns", "pids", namespace]).stdout.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return len(pids)


def remove(namespaces_: Sequence[str], tag: str, runner: Runner = run_command) -> None:
    """Kill what runs in ``namespaces_``, delete them and the lab links of the run tagged ``tag``."""
    for ns in namespaces_:
        kill_inside(ns, runner)
    for argv in teardown_commands(namespaces_, lab_devs(tag, runner)):
        done = runner(argv)
        if done.returncode != 0 and "No such" not in done.stderr and "Cannot find" not in done.stderr:
            log.warning("%s failed: %s", " ".join(argv), done.stderr.strip())


def sweep(alive: Callable[[int], bool] = psutil.pid_exists, runner: Runner = run_command) -> list[str]:
    """Remove the namespaces (and lab links) of runs whose process is gone; return the namespaces removed."""
    dead: dict[str, list[str]] = {}
    for ns in namespaces(runner):
        run = parse_run(ns)
        if run is not None and not alive(run[0]):
            dead.setdefault(run[1], []).append(ns)
    for tag, names in dead.items():
        remove(names, tag, runner)
    return [ns for names in dead.values() for ns in names]


def lab_blocks_in_use(runner: Runner = run_command) -> set[int]:
    """The lab blocks (``100.<64+k>.0.0/16``) addresses of this namespace already use."""
    done = runner(["ip", "-4", "-o", "addr", "show"])
    return {int(m[1]) - 64 for m in re.finditer(r"inet 100\.(\d+)\.", done.stdout) if 64 <= int(m[1]) < 128}


def class_bytes(text: str) -> dict[str, int]:
    """Bytes sent per htb class id in the output of ``tc -s class show``."""
    out: dict[str, int] = {}
    for match in re.finditer(r"^class htb (\S+) .*?\n\s*Sent (\d+) bytes", text, flags=re.M):
        out[match[1]] = int(match[2])
    return out
