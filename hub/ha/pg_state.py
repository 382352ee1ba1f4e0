"""The hub's control state in the shared database, every write fenced by the leader's epoch.

:class:`PgStateStore` is a :class:`hub.control.state.StateStore` whose apps
(each with its plan, the plan it replaced and its plan history) and plan
versions live in ``spanedge_apps`` and ``spanedge_plan_versions``, and
whose other documents (``save_document``) in ``spanedge_documents``.

A write runs in one transaction that first takes a share lock on the lease
row, for this hub's holder and epoch and a lease not yet expired; a hub
whose epoch is over finds no row and the write raises
:class:`hub.ha.errors.StaleEpoch`. A takeover updates the lease row, so it
waits for the writes that passed the check, and none passes after it. The
hub checks its own clock first (:meth:`hub.ha.lease.Lease.check`), so a
paused leader does not even ask.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hub.control.state import AppRecord, StateStore
from hub.ha.db import Database
from hub.ha.errors import HaStoreError, StaleEpoch
from hub.ha.lease import Lease
from spanedge.errors import SpanEdgeError

log = logging.getLogger(__name__)

#: The largest record the hub reads back (an app's record holds its plan and history).
MAX_RECORD_BYTES = 64 * 1024 * 1024

_FENCE = """
SELECT epoch FROM spanedge_lease
WHERE id = 1 AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at >= now()
FOR SHARE
"""
_SAVE_APP = """
INSERT INTO spanedge_apps AS a (name, record, epoch) VALUES (%(name)s, %(record)s, %(epoch)s)
ON CONFLICT (name) DO UPDATE SET record = EXCLUDED.record, epoch = EXCLUDED.epoch, updated_at = now()
WHERE a.epoch <= EXCLUDED.epoch
"""
_SAVE_VERSION = """
INSERT INTO spanedge_plan_versions AS v (site, version, epoch) VALUES (%s, %s, %s)
ON CONFLICT (site) DO UPDATE SET version = greatest(v.version, EXCLUDED.version), epoch = EXCLUDED.epoch
"""
_SAVE_DOCUMENT = """
INSERT INTO spanedge_documents AS d (name, body, epoch) VALUES (%(name)s, %(body)s, %(epoch)s)
ON CONFLICT (name) DO UPDATE SET body = EXCLUDED.body, epoch = EXCLUDED.epoch, updated_at = now()
WHERE d.epoch <= EXCLUDED.epoch
"""


_LOAD_APPS = (
    "SELECT name, octet_length(record::text), CASE WHEN octet_length(record::text) <= %(max)s "
    "THEN record::text END FROM spanedge_apps WHERE %(name)s::text IS NULL OR name = %(name)s ORDER BY name"
)


def stored_apps(db: Database, name: str | None = None) -> list[AppRecord]:
    """The apps stored in ``db`` by name (only ``name``'s, if given); reading needs no lease.

    Raises:
        SpanEdgeError: a record is too large or cannot be parsed; the message names the app.
        HaStoreError: the database cannot be reached.
    """
    rows = db.run(lambda conn: conn.execute(_LOAD_APPS, {"max": MAX_RECORD_BYTES, "name": name}).fetchall())
    records = []
    for app, size, text in rows:
        if text is None:
            msg = (
                f"the record of app {app!r} in the hub's database has {size} bytes, over {MAX_RECORD_BYTES}; "
                "delete the app and deploy it again"
            )
            raise SpanEdgeError(msg)
        try:
            records.append(AppRecord.from_dict(json.loads(text)))
        except (ValueError, KeyError, TypeError) as exc:
            msg = f"cannot read the record of app {app!r} in the hub's database: {exc}; delete and redeploy it"
            raise SpanEdgeError(msg) from None
    return records


class PgStateStore(StateStore):
    """The apps, plan history and plan versions in ``db``, written only while ``lease`` leads.

    ``root`` is the state directory the other parts of the hub keep using (the ingest log, checkpoints).
    """

    def __init__(self, root: Path, db: Database, lease: Lease) -> None:
        """Keep the control state in ``db`` (migrated: :func:`hub.ha.schema.migrate`), fenced by ``lease``."""
        super().__init__(root)
        self.db = db
        self.lease = lease

    def _fenced(self, what: str, work: Callable[[Any], None]) -> None:
        """Run ``work(conn)`` in a transaction that holds the lease row of this hub's epoch, or raise."""
        self.lease.check(what)
        params = {"holder": self.lease.holder, "epoch": self.lease.epoch}

        def run(conn: Any) -> None:
            with conn.transaction():
                if conn.execute(_FENCE, params).fetchone() is None:
                    msg = (
                        f"refused to {what}: the shared database says this hub ({self.lease.holder}) no longer "
                        f"leads under epoch {self.lease.epoch}; another hub took over, and this one stops"
                    )
                    raise StaleEpoch(msg)
                work(conn)

        self.db.run(run)

    # -- apps and their plan history ------------------------------------------------------------

    def save_app(self, record: AppRecord) -> None:
        """Persist ``record``, replacing any earlier one of the same app (fenced)."""
        params = {"name": record.name, "record": json.dumps(record.to_dict()), "epoch": self.lease.epoch}
        self._fenced(f"save app {record.name!r}", lambda conn: conn.execute(_SAVE_APP, params))

    def delete_app(self, name: str) -> None:
        """Forget app ``name`` (fenced; no error if it is not stored)."""
        self._fenced(
            f"delete app {name!r}", lambda conn: conn.execute("DELETE FROM spanedge_apps WHERE name = %s", (name,))
        )

    def load_apps(self) -> list[AppRecord]:
        """Every stored app, by name; with none in the database, those of the state directory's files, copied in.

        The copy (a hub that ran without ``--ha`` on this state directory) needs the lease.

        Raises:
            SpanEdgeError: a record is too large or cannot be parsed; the message names the app.
        """
        records = self._load_apps()
        if records:
            return records
        records = super().load_apps()
        for record in records:
            self.save_app(record)
        if records:
            log.info("copied %d apps from %s into the hub's database", len(records), self.apps_dir)
        return records

    def _load_apps(self) -> list[AppRecord]:
        return stored_apps(self.db)

    # -- plan versions --------------------------------------------------------------------------

    def load_versions(self) -> dict[str, int]:
        """The last plan-message version published per site (with none in the database, the state directory's)."""
        rows = self.db.run(lambda conn: conn.execute("SELECT site, version FROM spanedge_plan_versions").fetchall())
        return {str(site): int(version) for site, version in rows} or super().load_versions()

    def save_versions(self, versions: dict[str, int]) -> None:
        """Persist the last plan-message version published per site (fenced; versions never go back)."""
        rows = [(site, version, self.lease.epoch) for site, version in sorted(versions.items())]
        self._fenced("save the plan versions", lambda conn: conn.cursor().executemany(_SAVE_VERSION, rows))

    # -- other documents ------------------------------------------------------------------------

    def save_document(self, name: str, body: Any) -> None:
        """Persist the JSON document ``name`` (fenced)."""
        params = {"name": name, "body": json.dumps(body), "epoch": self.lease.epoch}
        self._fenced(f"save {name}", lambda conn: conn.execute(_SAVE_DOCUMENT, params))

    def load_document(self, name: str) -> Any:
        """The JSON document ``name``, or None if none is stored.

        Raises:
            HaStoreError: it is larger than :data:`MAX_RECORD_BYTES`.
        """
        row = self.db.run(
            lambda conn: conn.execute(
                "SELECT octet_length(body::text), CASE WHEN octet_length(body::text) <= %s THEN body::text END "
                "FROM spanedge_documents WHERE name = %s",
                (MAX_RECORD_BYTES, name),
            ).fetchone()
        )
        if row is None:
            return None
        if row[1] is None:
            msg = f"the document {name!r} in the hub's database has {row[0]} bytes, over {MAX_RECORD_BYTES}; delete it"
            raise HaStoreError(msg)
        return json.loads(row[1])
