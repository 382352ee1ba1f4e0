"""The errors of hub high availability."""

from __future__ import annotations

from spanedge.errors import SpanEdgeError


class StaleEpoch(SpanEdgeError):
    """A write of a hub whose leader epoch is over: another hub leads now, or the lease ran out."""


class HaStoreError(SpanEdgeError):
    """The shared database cannot be reached, refuses the hub, or holds a schema this hub does not know."""
