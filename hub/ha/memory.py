"""A lease store in memory, for hubs in one process: the same rules as :mod:`hub.ha.pg_lease`, on a given clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from hub.ha.lease import LeaseState


class MemoryLeaseStore:
    """One lease in memory, on ``clock`` (seconds) as the store's clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """An empty store: nobody held the lease yet."""
        self.clock = clock
        self._lock = threading.Lock()
        self._holder: str | None = None
        self._epoch = 0
        self._expires_at = float("-inf")

    def acquire(self, holder: str, ttl_s: float) -> LeaseState | None:
        """See :meth:`hub.ha.lease.LeaseStore.acquire`."""
        with self._lock:
            now = self.clock()
            if self._holder is not None and self._expires_at >= now:
                return None
            self._holder, self._epoch, self._expires_at = holder, self._epoch + 1, now + ttl_s
            return LeaseState(holder, self._epoch, ttl_s)

    def renew(self, holder: str, epoch: int, ttl_s: float) -> bool:
        """See :meth:`hub.ha.lease.LeaseStore.renew`."""
        with self._lock:
            now = self.clock()
            if (self._holder, self._epoch) != (holder, epoch) or self._expires_at < now:
                return False
            self._expires_at = now + ttl_s
            return True

    def release(self, holder: str, epoch: int) -> None:
        """See :meth:`hub.ha.lease.LeaseStore.release`."""
        with self._lock:
            if (self._holder, self._epoch) == (holder, epoch):
                self._expires_at = float("-inf")

    def current(self) -> LeaseState | None:
        """See :meth:`hub.ha.lease.LeaseStore.current`."""
        with self._lock:
            if self._holder is None:
                return None
            return LeaseState(self._holder, self._epoch, self._expires_at - self.clock())
