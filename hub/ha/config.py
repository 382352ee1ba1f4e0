"""What ``spanedge hub --ha`` sets."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from hub.ha.lease import DEFAULT_TTL_S

#: How often a standby tries to take the lease.
DEFAULT_POLL_S = 1.0


@dataclass(frozen=True)
class HaConfig:
    """A hub of a high-availability group: the shared database, this hub's name in it, and the lease's timing."""

    dsn: str
    #: this hub's name in the lease (the standbys' ``/healthz`` shows the leader's)
    name: str = socket.gethostname()
    ttl_s: float = DEFAULT_TTL_S
    poll_s: float = DEFAULT_POLL_S
    #: start Spark while standing by, so a takeover does not wait for it
    warm_spark: bool = True
