"""The shared database's tables, and the migrations that bring a database to this hub's schema.

``spanedge_schema`` lists the versions applied. :func:`migrate` applies the
missing ones, each in its own transaction, under an advisory lock so hubs
started at once do not both apply one; a database newer than this hub is
refused.
"""

from __future__ import annotations

from typing import Any

from hub.ha.errors import HaStoreError

#: The advisory lock key hubs take while they migrate.
MIGRATION_LOCK = 0x5350414E  # "SPAN"

MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "the lease, the apps with their plan history, plan versions, documents",
        (
            """CREATE TABLE spanedge_lease (
                id integer PRIMARY KEY CHECK (id = 1),
                holder text NOT NULL,
                epoch bigint NOT NULL,
                expires_at timestamptz NOT NULL,
                acquired_at timestamptz NOT NULL
            )""",
            """CREATE TABLE spanedge_apps (
                name text PRIMARY KEY,
                record jsonb NOT NULL,
                epoch bigint NOT NULL,
                updated_at timestamptz NOT NULL DEFAULT now()
            )""",
            """CREATE TABLE spanedge_plan_versions (
                site text PRIMARY KEY,
                version bigint NOT NULL,
                epoch bigint NOT NULL
            )""",
            """CREATE TABLE spanedge_documents (
                name text PRIMARY KEY,
                body jsonb NOT NULL,
                epoch bigint NOT NULL,
                updated_at timestamptz NOT NULL DEFAULT now()
            )""",
        ),
    ),
    (
        2,
        "the REST URL of the lease's holder, that standbys redirect writes to",
        ("ALTER TABLE spanedge_lease ADD COLUMN url text",),
    ),
)
#: The schema version this hub reads and writes.
SCHEMA_VERSION = MIGRATIONS[-1][0]


def applied_version(conn: Any) -> int:
    """The newest schema version applied to the database of ``conn`` (0: none)."""
    row = conn.execute("SELECT coalesce(max(version), 0) FROM spanedge_schema").fetchone()
    return int(row[0])


def migrate(conn: Any) -> int:
    """Bring the database of ``conn`` (autocommit) to :data:`SCHEMA_VERSION`; return the versions applied now.

    Raises:
        HaStoreError: the database's schema is newer than this hub's.
    """
    done = 0
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))  # first: hubs that start at once wait
        conn.execute(
            "CREATE TABLE IF NOT EXISTS spanedge_schema ("
            "version integer PRIMARY KEY, description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        have = applied_version(conn)
        if have > SCHEMA_VERSION:
            msg = (
                f"the hub's database has schema version {have}, newer than the {SCHEMA_VERSION} this hub knows; "
                "upgrade spanedge on this host to the version the other hubs run"
            )
            raise HaStoreError(msg)
        for version, description, statements in MIGRATIONS:
            if version <= have:
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO spanedge_schema (version, description) VALUES (%s, %s)", (version, description))
            done += 1
    return done
