"""The leader's renewal loop: renew the lease on time, and call ``on_lost`` the moment it is lost."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from hub.ha.lease import Lease
from spanedge.logsafe import escaped

log = logging.getLogger(__name__)

#: The longest the loop sleeps: a leader resumed after a pause sees its lease lost within this.
WAKE_S = 0.25


class LeaseKeeper:
    """Renews ``lease`` every :attr:`Lease.renew_every_s` in a thread; calls ``on_lost`` once if it is lost.

    A renewal the store fails (the database out of reach) is retried at the next wake until the lease
    runs out by the hub's own clock; a renewal the store refuses loses it at once.
    """

    def __init__(self, lease: Lease, on_lost: Callable[[str], None]) -> None:
        """Keep ``lease``; ``on_lost`` gets why it was lost."""
        self.lease = lease
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LeaseKeeper:
        """Start the loop (the lease must be held)."""
        self._thread = threading.Thread(target=self._run, name="spanedge-lease", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the loop without calling ``on_lost``."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def step(self, due: float) -> float | None:
        """One wake at the lease's clock: renew if ``due`` is reached; the next due time, or None once lost."""
        lease = self.lease
        if not lease.held():
            self._lost(f"the lease of epoch {lease.epoch} ran out before it was renewed (was this hub paused?)")
            return None
        if lease.clock() < due:
            return due
        try:
            renewed = lease.renew()
        except Exception as exc:  # the store's error: retried until the lease runs out
            log.warning("renewing the lease of epoch %d failed: %s; retrying", lease.epoch, escaped(exc))
            return lease.clock() + WAKE_S
        if not renewed:
            self._lost(f"the lease of epoch {lease.epoch} was not renewed: another hub leads, or it ran out")
            return None
        return lease.clock() + lease.renew_every_s

    def _run(self) -> None:
        due: float | None = self.lease.clock() + self.lease.renew_every_s
        while due is not None and not self._stop.wait(WAKE_S):
            due = self.step(due)

    def _lost(self, why: str) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self.on_lost(why)
