"""The leader lease: one hub leads at a time, under an epoch that grows with every change of leader.

A :class:`LeaseStore` keeps one lease: its holder, its epoch and when it
expires, by the store's own clock. :meth:`LeaseStore.acquire` takes it when
it is free or has expired, and bumps the epoch; :meth:`LeaseStore.renew`
extends it only for the holder of the current epoch.

:class:`Lease` is one hub's side of it. It notes its own (monotonic) clock
*before* each request to the store, so the store's expiry is never earlier
than ``renewed_at + ttl_s`` by the hub's clock, and counts the lease as held
only while ``now <= renewed_at + ttl_s - margin_s``. A leader that is paused,
or cut off from the store, so finds its lease lost ``margin_s`` before any
other hub can take it, and :meth:`Lease.check` (the fence every write of the
leader passes) refuses from then on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from hub.ha.errors import StaleEpoch

#: How long a lease lasts after its last renewal unless given (``spanedge hub --ha-lease``).
DEFAULT_TTL_S = 10.0


@dataclass(frozen=True)
class LeaseState:
    """The lease as the store holds it: who, under which epoch, and how long it has left by the store's clock."""

    holder: str
    epoch: int
    remaining_s: float
    #: the REST URL the holder advertises (``spanedge hub --ha-url``), if the store keeps it
    url: str | None = None

    @property
    def live(self) -> bool:
        """True if the lease has not expired."""
        return self.remaining_s > 0


class LeaseStore(Protocol):
    """Where the lease lives; every method is atomic."""

    def acquire(self, holder: str, ttl_s: float) -> LeaseState | None:
        """Take the lease for ``ttl_s`` if it is free or expired, under the next epoch; None if another holds it."""
        ...

    def renew(self, holder: str, epoch: int, ttl_s: float) -> bool:
        """Extend the lease by ``ttl_s`` from now if ``holder`` holds it under ``epoch``; False otherwise."""
        ...

    def release(self, holder: str, epoch: int) -> None:
        """Let the lease expire now if ``holder`` holds it under ``epoch``."""
        ...

    def current(self) -> LeaseState | None:
        """The lease, or None if nobody ever held it."""
        ...


class Lease:
    """One hub's hold on the lease of ``store``: acquire, renew, check.

    Args:
        store: where the lease lives.
        holder: this hub's name in it (``/healthz`` of the standbys shows it as ``leader``).
        ttl_s: how long a renewal holds the lease.
        margin_s: how long before the store's expiry this hub stops counting the lease as its own
            (None: a fifth of ``ttl_s``); it covers clock rates that differ and the time to stop.
        clock: a monotonic clock in seconds.
    """

    def __init__(
        self,
        store: LeaseStore,
        holder: str,
        ttl_s: float = DEFAULT_TTL_S,
        margin_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        margin = ttl_s / 5 if margin_s is None else margin_s
        if not 0 <= margin < ttl_s:
            msg = f"the lease margin {margin} s must be at least 0 and shorter than its TTL {ttl_s} s; raise the TTL"
            raise ValueError(msg)
        self.store = store
        self.holder = holder
        self.ttl_s = ttl_s
        self.margin_s = margin
        self.clock = clock
        self.epoch = 0
        self.renewed_at: float | None = None

    @property
    def renew_every_s(self) -> float:
        """How often the leader renews: three times within what the margin leaves of the TTL."""
        return (self.ttl_s - self.margin_s) / 3

    def valid_until(self) -> float | None:
        """The clock reading after which this hub no longer holds the lease, or None if it does not hold it."""
        if self.renewed_at is None:
            return None
        return self.renewed_at + self.ttl_s - self.margin_s

    def held(self, now: float | None = None) -> bool:
        """True while the last acquisition or renewal still covers ``now`` (default: the clock)."""
        until = self.valid_until()
        return until is not None and (self.clock() if now is None else now) <= until

    def try_acquire(self) -> bool:
        """Take the lease if it is free or expired; True if this hub leads now (under a new :attr:`epoch`)."""
        asked_at = self.clock()
        state = self.store.acquire(self.holder, self.ttl_s)
        if state is None:
            return False
        self.epoch = state.epoch
        self.renewed_at = asked_at
        return True

    def renew(self) -> bool:
        """Extend the lease; False, and the lease dropped, if it was lost (another hub took it, or it ran out)."""
        if not self.held():
            self.renewed_at = None
            return False
        asked_at = self.clock()
        if not self.store.renew(self.holder, self.epoch, self.ttl_s):
            self.renewed_at = None
            return False
        self.renewed_at = asked_at
        return True

    def check(self, what: str = "write") -> None:
        """The fence: pass while this hub holds the lease, raise otherwise.

        Raises:
            StaleEpoch: the lease ran out by this hub's clock, or was lost; the message names the epoch.
        """
        if self.held():
            return
        msg = (
            f"refused to {what}: this hub's leader epoch {self.epoch} is over (its lease of {self.ttl_s:g} s was not "
            "renewed in time, or another hub took it); this hub stops, and restarts as a standby"
        )
        raise StaleEpoch(msg)

    def release(self) -> None:
        """Give the lease up at once (a hub that stops cleanly), so a standby need not wait for it to expire."""
        if self.renewed_at is not None:
            self.renewed_at = None
            self.store.release(self.holder, self.epoch)
