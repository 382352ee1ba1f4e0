"""A PostgreSQL server for the tests: the machine's on 127.0.0.1:5432, or one the tests start themselves.

``SPANEDGE_TEST_PG`` may name the admin connection string of a server to
use, or be ``own`` to start one even where the machine runs a server. A
server of the tests' own comes from Debian's ``postgresql`` package
(``/usr/lib/postgresql/<version>/bin/initdb`` and ``pg_ctl``), in a
temporary folder, on a free port, with trust authentication on 127.0.0.1
only. As root it runs as the package's ``postgres`` user (``initdb``
refuses root).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulate.ports import free_port

ENV = "SPANEDGE_TEST_PG"
MACHINE_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass(frozen=True)
class Server:
    """A running server: its admin connection string (database ``postgres``) and where it came from."""

    dsn: str
    origin: str

    def dsn_of(self, database: str) -> str:
        """The connection string of ``database`` on this server, as the admin user."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(self.dsn)
        params["dbname"] = database
        return make_conninfo(**params)

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A database of its own for one test, created empty and dropped after it; yields its connection string."""
        import psycopg
        from psycopg import sql

        name = f"spanedge_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield self.dsn_of(name)
        finally:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def reachable(dsn: str) -> bool:
    """True if a connection to ``dsn`` succeeds within a few seconds."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def binaries() -> Path | None:
    """The ``bin`` folder of the newest installed PostgreSQL server (Debian's layout, or ``initdb`` on the PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


class OwnServer:
    """A PostgreSQL server started from the installed binaries in a temporary folder, stopped on :meth:`close`."""

    def __init__(self, bindir: Path) -> None:
        """Use the ``initdb``, ``pg_ctl`` and ``postgres`` of ``bindir``."""
        self.bindir = bindir
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="spanedge-pg-"))
        self.data = self.folder / "data"
        self._user: Any = None
        if os.geteuid() == 0:
            self._user = pwd.getpwnam("postgres")
            os.chown(self.folder, self._user.pw_uid, self._user.pw_gid)

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self._user is not None else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            msg = f"{' '.join(command)} failed ({done.returncode}): {done.stdout}{done.stderr}"
            raise RuntimeError(msg)

    def start(self) -> Server:
        """Initialise the data folder and start the server; return it once it accepts connections."""
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.folder / "log"),
            "-w",
            "start",
        )
        return Server(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", f"started from {self.bindir}")

    def close(self) -> None:
        """Stop the server and delete its folder."""
        with contextlib.suppress(RuntimeError, OSError, subprocess.TimeoutExpired):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[Server]:
    """The server the tests use (see the module's description).

    Raises:
        LookupError: no server runs and none can be started; the message says what to install.
    """
    wanted = os.environ.get(ENV, "")
    if wanted and wanted != "own":
        yield Server(wanted, ENV)
        return
    if not wanted and reachable(MACHINE_DSN):
        yield Server(MACHINE_DSN, "the machine's")
        return
    bindir = binaries()
    if bindir is None:
        msg = "no PostgreSQL server on 127.0.0.1:5432 and none installed to start (apt-get install postgresql)"
        raise LookupError(msg)
    own = OwnServer(bindir)
    try:
        yield own.start()
    finally:
        own.close()
