"""Private files and directories: 0700 and 0600 whatever the umask, and narrowed when made wider before."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from spanedge.private_files import create_private, open_private, private_dir, write_private


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """The widest umask: every mode below comes from the helpers, not from the process's umask."""
    old = os.umask(0)
    yield
    os.umask(old)


def test_private_dir_makes_every_missing_parent_0700_and_keeps_existing_ones(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    made = private_dir(tmp_path / "a" / "b" / "c")
    assert made == tmp_path / "a" / "b" / "c"
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", made)] == [0o700] * 3
    assert mode(tmp_path) == 0o755


def test_private_dir_narrows_a_directory_made_wider_before(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir(mode=0o777)
    private_dir(tmp_path / "state")
    assert mode(tmp_path / "state") == 0o700


def test_write_private_replaces_the_file_whole_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "plan.signed"
    path.write_bytes(b"old")
    path.chmod(0o644)
    write_private(path, b"new plan")
    assert path.read_bytes() == b"new plan"
    assert mode(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.signed"]  # no temporary file left


def test_open_private_appends_and_narrows_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "late-app.jsonl"
    path.write_text("first\n")
    path.chmod(0o666)
    with open_private(path) as handle:
        handle.write("second\n")
    assert path.read_text() == "first\nsecond\n"
    assert mode(path) == 0o600
    with open_private(path, "w") as handle:
        handle.write("only\n")
    assert path.read_text() == "only\n"
    with pytest.raises(ValueError, match="'a' or 'w'"):
        open_private(path, "r")


def test_a_database_created_private_keeps_its_wal_and_shm_files_private(tmp_path: Path) -> None:
    path = create_private(tmp_path / "agent.db")
    assert path.stat().st_size == 0
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (1)")
    db.commit()
    files = sorted(tmp_path.iterdir())
    assert {p.name for p in files} >= {"agent.db", "agent.db-wal", "agent.db-shm"}
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    db.close()


def test_create_private_keeps_what_the_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "spool.db"
    path.write_bytes(b"data")
    path.chmod(0o644)
    create_private(path)
    assert path.read_bytes() == b"data"
    assert mode(path) == 0o600
