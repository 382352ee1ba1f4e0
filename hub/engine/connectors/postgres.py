"""The PostgreSQL sink: each micro-batch in one transaction with its query and batch id (psycopg 3).

The transaction first records the batch in the marks table
(:func:`hub.engine.connectors.pgsql.mark`); when the batch was written
before (Spark replays the batch it had not committed when the hub
stopped), the mark says so and the transaction writes nothing. Then it
writes the rows, upserting on the table's key, and hands the results that
do not fit the table to the sink as dead letters, which files them before
the commit. A connection that fails (the server down, a network cut, an
ambiguous commit) is retried with a growing wait (:mod:`~hub.engine.connectors.backoff`):
the retried transaction finds its own mark if the commit had gone through.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import psycopg
from psycopg import errors

from hub.engine.connectors import pgsql
from hub.engine.connectors.backoff import RETRY_DELAYS_S, Reconnects
from spanedge.runtime.outputs import excerpt

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10
"""How long one connection attempt may take."""

RETRYABLE: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg.InterfaceError)
"""Errors of the connection or the server's state, not of the batch: the transaction is tried again."""

MISFITS: tuple[type[psycopg.Error], ...] = (psycopg.DataError, psycopg.IntegrityError, errors.DatatypeMismatch)
"""Errors of a row's values (a bad number, a null in a NOT NULL column, a type PostgreSQL cannot cast)."""

HUB_SITE = "hub"

_PARAMETER = re.compile(r"parameter \$(\d+)")


@dataclass(frozen=True)
class Result:
    """A result of the micro-batch: its fields as the sink received them, and its value as JSON text."""

    record: dict[str, Any]
    text: str | None


@dataclass
class Written:
    """What one batch did: skipped (written before), or its rows written and the letters of those that did not fit."""

    skipped: bool
    rows: int = 0
    letters: tuple[bytes, ...] = ()


def column_of(error: psycopg.Error, columns: Sequence[str]) -> str | None:
    """The column a row's error is about: the server names it, or the parameter it could not read."""
    if error.diag.column_name:
        return error.diag.column_name
    found = _PARAMETER.search(error.diag.context or "")
    if found and 0 < int(found.group(1)) <= len(columns):
        return columns[int(found.group(1)) - 1]
    return None


def results_of(table: pa.Table) -> list[Result]:
    """The results of a batch's table, each value parsed from its JSON text."""
    names = [c for c in (*pgsql.ENVELOPE, "value") if c in table.column_names]
    results = []
    for row in table.select(names).to_pylist():
        text = row.get("value")
        row["value"] = orjson.loads(text) if text is not None else None
        results.append(Result(row, text))
    return results


class PostgresWriter:
    """Writes the micro-batches of one query to one table, exactly once per batch id of a checkpoint."""

    def __init__(
        self,
        dsn: str,
        table: str,
        key: Sequence[str] | None,
        app: str,
        query: str,
        sink: str,
        where: str,
        run: Callable[[], str],
        delays: tuple[float, ...] = RETRY_DELAYS_S,
    ) -> None:
        """Write to ``table`` of the database at ``dsn`` for the query ``query`` of ``app``.

        ``sink`` is the sink's name and ``where`` describes it in messages
        (``'to_db' (app.py:12)``); ``run`` gives the id of the query's
        checkpoint (Spark's query id).
        """
        self.dsn = dsn
        self.table = pgsql.table_name(table)
        self.key = tuple(key) if key is not None else None
        self.app = app
        self.query = query
        self.sink = sink
        self.where = where
        self.run = run
        self.retry = Reconnects(f"sink {where}: PostgreSQL", delays)
        self.rejected = 0
        self.replays_skipped = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._target: pgsql.Target | None = None

    def write(self, results: Sequence[Result], batch_id: int, file_letters: Callable[[list[bytes]], None]) -> Written:
        """Write batch ``batch_id`` unless it was; ``file_letters`` gets its rejects' letters before the commit.

        Raises:
            SinkStopped: :meth:`stop` was called while the database was unreachable.
            TableProblem: the table does not suit the sink.
            psycopg.Error: any other error of the database (the query fails and restarts).
        """
        done = self.retry.call(lambda: self._attempt(results, batch_id, file_letters), RETRYABLE)
        if done.skipped:
            self.replays_skipped += 1
            log.info("sink %s: batch %d is in %s already, not written again", self.where, batch_id, self._label)
        else:
            self.rejected += len(done.letters)
        return done

    @property
    def _label(self) -> str:
        return ".".join(self.table)

    def _connect(self) -> tuple[psycopg.Connection[Any], pgsql.Target]:
        if self._conn is not None and not self._conn.closed and self._target is not None:
            return self._conn, self._target
        self.close()
        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        try:
            marks = pgsql.quoted(pgsql.marks_name(self.table))
            if conn.execute("SELECT to_regclass(%s)", (marks,)).fetchone() == (None,):  # CREATE needs the privilege
                with contextlib.suppress(errors.UniqueViolation):  # another sink created it at the same moment
                    conn.execute(pgsql.create_marks(self.table))
            try:
                columns = conn.execute(pgsql.DESCRIBE_COLUMNS, (pgsql.quoted(self.table),)).fetchall()
                unique = conn.execute(pgsql.DESCRIBE_UNIQUE, (pgsql.quoted(self.table),)).fetchall()
            except errors.UndefinedTable:
                msg = f"sink {self.where}: table {self._label} does not exist in the database; create it first"
                raise pgsql.TableProblem(msg) from None
            try:
                target = pgsql.target_of(self.table, columns, unique, self.key)
            except pgsql.TableProblem as exc:
                msg = f"sink {self.where}: {exc}"
                raise pgsql.TableProblem(msg) from None
        except BaseException:
            conn.close()
            raise
        self._conn, self._target = conn, target
        return conn, target

    def _attempt(
        self, results: Sequence[Result], batch_id: int, file_letters: Callable[[list[bytes]], None]
    ) -> Written:
        try:
            conn, target = self._connect()
            skipped = False
            with conn.transaction() as transaction:
                mark = (self.app, self.query, self.run(), batch_id, self._label)
                if conn.execute(pgsql.mark(self.table), mark).fetchone() is None:
                    skipped = True
                    raise psycopg.Rollback(transaction)
                rows, letters = self._insert(conn, target, results)
                file_letters(letters)
        except RETRYABLE:
            self.close()  # a broken connection: the next attempt connects anew
            raise
        return Written(True) if skipped else Written(False, rows, tuple(letters))

    def _insert(
        self, conn: psycopg.Connection[Any], target: pgsql.Target, results: Sequence[Result]
    ) -> tuple[int, list[bytes]]:
        """Write the rows of ``results``; the letters of those that do not fit the table."""
        letters: list[bytes] = []
        rows: list[tuple[Result, tuple[str, ...], tuple[Any, ...]]] = []
        for result in results:
            try:
                columns, params = pgsql.row_of(target, result.record)
            except pgsql.Misfit as misfit:
                letters.append(self._letter(result, misfit.column, misfit.reason, "Misfit"))
                continue
            rows.append((result, columns, params))
        written = 0
        rows.sort(key=lambda r: r[1])  # stable: each set of columns in batch order
        for columns, group in itertools.groupby(rows, key=lambda r: r[1]):
            batch = list(group)
            statement = pgsql.insert(target, columns)
            try:
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(statement, [params for _, _, params in batch])
                written += len(batch)
                continue
            except MISFITS:
                pass  # the savepoint rolled back: find the rows that do not fit, one by one
            for result, _, params in batch:
                try:
                    with conn.transaction():
                        conn.execute(statement, params)
                    written += 1
                except MISFITS as exc:
                    reason = str(exc).strip().splitlines()[0]
                    letters.append(self._letter(result, column_of(exc, columns), reason, type(exc).__name__))
        return written, letters

    def _letter(self, result: Result, column: str | None, reason: str, error: str) -> bytes:
        """The dead letter of a result that does not fit the table: why, where it came from, its value."""
        record = result.record
        cut = excerpt(result.text if result.text is not None else "null")
        return orjson.dumps(
            {
                "reason": f"sink {self.where}: table {self._label}: {reason}",
                "operator": self.sink,
                "error": error,
                "table": self._label,
                "column": column,
                "payload": cut["excerpt"],
                "size": cut["size"],
                "sha256": cut["sha256"],
                "truncated": cut["truncated"],
                "site": HUB_SITE,
                "source_site": record.get("site"),
                "stream": record.get("stream"),
                "seq": record.get("seq"),
                "event_time": record.get("event_time"),
                "key": record.get("key"),
                "ts": time.time(),
            }
        )

    def status(self) -> dict[str, Any]:
        """The sink's figures for ``/metrics``: reachable, failed attempts, rejected rows, skipped replays, last error."""
        return {
            "sink_up": self.retry.up,
            "sink_connect_failures": self.retry.failures,
            "sink_rejected_rows": self.rejected,
            "sink_replays_skipped": self.replays_skipped,
            "sink_error": self.retry.error,
        }

    def stop(self) -> None:
        """Give up waiting for the database: the query is stopping."""
        self.retry.stop()

    def close(self) -> None:
        """Close the connection, if open."""
        conn, self._conn, self._target = self._conn, None, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                log.debug("sink %s: closing the connection failed", self.where, exc_info=True)
