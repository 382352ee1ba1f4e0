"""The leader lease in PostgreSQL: one row, taken and renewed by single statements on the database's clock."""

from __future__ import annotations

from typing import Any

from hub.ha.db import Database
from hub.ha.lease import LeaseState

_ACQUIRE = """
INSERT INTO spanedge_lease AS l (id, holder, epoch, expires_at, acquired_at, url)
VALUES (1, %(holder)s, 1, now() + make_interval(secs => %(ttl)s), now(), %(url)s)
ON CONFLICT (id) DO UPDATE
SET holder = EXCLUDED.holder, epoch = l.epoch + 1, expires_at = EXCLUDED.expires_at, acquired_at = now(),
    url = EXCLUDED.url
WHERE l.expires_at < now()
RETURNING epoch
"""
_RENEW = """
UPDATE spanedge_lease SET expires_at = now() + make_interval(secs => %(ttl)s)
WHERE id = 1 AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at >= now()
"""
_RELEASE = """
UPDATE spanedge_lease SET expires_at = now() - interval '1 microsecond'
WHERE id = 1 AND holder = %(holder)s AND epoch = %(epoch)s
"""
_CURRENT = "SELECT holder, epoch, extract(epoch FROM expires_at - now()), url FROM spanedge_lease WHERE id = 1"


class PgLeaseStore:
    """:class:`hub.ha.lease.LeaseStore` in the ``spanedge_lease`` table of ``db`` (migrated: :mod:`hub.ha.schema`).

    The takeover is an ``UPDATE ... WHERE expires_at < now()``: of two hubs that try at once, the row lock lets
    one through and the other finds the lease live. Every fenced write of the leader takes a share lock on the
    row (:mod:`hub.ha.pg_state`), so a takeover waits for it, and no write of an old epoch commits after it.
    """

    def __init__(self, db: Database, url: str | None = None) -> None:
        """Keep the lease in ``db``; give it a connection of its own, so a renewal never waits for other work.

        ``url`` is the REST URL this hub advertises: an acquisition records it with the lease, for the standbys.
        """
        self.db = db
        self.url = url

    def acquire(self, holder: str, ttl_s: float) -> LeaseState | None:
        """See :meth:`hub.ha.lease.LeaseStore.acquire`."""

        def work(conn: Any) -> LeaseState | None:
            row = conn.execute(_ACQUIRE, {"holder": holder, "ttl": ttl_s, "url": self.url}).fetchone()
            return LeaseState(holder, int(row[0]), ttl_s, self.url) if row is not None else None

        return self.db.run(work)

    def renew(self, holder: str, epoch: int, ttl_s: float) -> bool:
        """See :meth:`hub.ha.lease.LeaseStore.renew`."""
        params = {"holder": holder, "epoch": epoch, "ttl": ttl_s}
        return self.db.run(lambda conn: bool(conn.execute(_RENEW, params).rowcount == 1))

    def release(self, holder: str, epoch: int) -> None:
        """See :meth:`hub.ha.lease.LeaseStore.release`."""
        self.db.run(lambda conn: conn.execute(_RELEASE, {"holder": holder, "epoch": epoch}))

    def current(self) -> LeaseState | None:
        """See :meth:`hub.ha.lease.LeaseStore.current`."""

        def work(conn: Any) -> LeaseState | None:
            row = conn.execute(_CURRENT).fetchone()
            if row is None:
                return None
            return LeaseState(str(row[0]), int(row[1]), float(row[2]), None if row[3] is None else str(row[3]))

        return self.db.run(work)
