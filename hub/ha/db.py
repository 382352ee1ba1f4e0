"""One connection to the shared database, used by one thread at a time, reconnected when it breaks."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from hub.ha.errors import HaStoreError

T = TypeVar("T")

#: How long a connection attempt may take.
CONNECT_TIMEOUT_S = 5
#: How long a statement may run before the server cancels it (a lease renewal must not wait longer).
STATEMENT_TIMEOUT_MS = 5000


def redacted(dsn: str) -> str:
    """``dsn`` without its password, for messages."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return "<a connection string that does not parse>"
    hidden = {k: ("***" if k == "password" else str(v)) for k, v in params.items() if v is not None}
    return make_conninfo("", **hidden)


class Database:
    """A psycopg 3 connection to ``dsn`` in autocommit mode, with a connect and a statement timeout."""

    def __init__(self, dsn: str, statement_timeout_ms: int = STATEMENT_TIMEOUT_MS) -> None:
        """Prepare the connection; nothing connects until the first :meth:`run`."""
        self.dsn = dsn
        self.statement_timeout_ms = statement_timeout_ms
        self._lock = threading.Lock()
        self._conn: Any = None

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError:
            from spanedge.errors import MissingExtra

            name = "psycopg"
            raise MissingExtra(name, "postgres") from None
        try:
            return psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                options=f"-c statement_timeout={self.statement_timeout_ms}",
                application_name="spanedge-hub",
            )
        except psycopg.Error as exc:
            msg = (
                f"cannot connect to the hub's database {redacted(self.dsn)}: {str(exc).strip()}; check --ha "
                "(postgresql://USER@HOST/DB), that the server runs and that it lets this user in"
            )
            raise HaStoreError(msg) from None

    def run(self, work: Callable[[Any], T]) -> T:
        """``work(connection)`` under this object's lock; a broken connection is opened again once.

        Raises:
            HaStoreError: the database cannot be reached, or ``work`` fails on it twice.
        """
        import psycopg

        with self._lock:
            try:
                return self._once(work)
            except psycopg.OperationalError:
                self._drop()
            try:
                return self._once(work)
            except psycopg.OperationalError as exc:
                self._drop()
                msg = f"the hub's database {redacted(self.dsn)} failed: {str(exc).strip()}; is the server up?"
                raise HaStoreError(msg) from None

    def _once(self, work: Callable[[Any], T]) -> T:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return work(self._conn)

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._drop()
