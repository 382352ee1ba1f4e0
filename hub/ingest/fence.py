"""The process's fence: what the ingest log and the hub's sinks ask before each write.

Without high availability nothing is installed and :func:`check` passes. A
leader installs its lease's check (:meth:`hub.ha.lease.Lease.check`) before
it starts its data plane; from the moment the lease is over by the hub's
own clock, every write raises :class:`hub.ha.errors.StaleEpoch`.
"""

from __future__ import annotations

from collections.abc import Callable

_installed: Callable[[str], None] | None = None


def install(fence: Callable[[str], None] | None) -> None:
    """Make ``fence(what)`` the check of every write of this process (None: none)."""
    global _installed  # one fence per process, as there is one lease per hub process
    _installed = fence


def check(what: str) -> None:
    """Pass, or raise what the installed fence raises for the write ``what``."""
    fence = _installed
    if fence is not None:
        fence(what)
