"""Files and directories only their owner may read: directories 0700, files 0600, whatever the umask.

The edge agent keeps everything under its state directory private (the outbox, checkpoints, the spool,
the saved plan with the apps' source, late records), and so do the commands that write keys and
credentials. A path made by an older version with wider modes is narrowed when it is opened again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Make ``path`` and its missing parents as directories of mode 0700, and set ``path`` itself to 0700.

    Parents that exist already keep their mode.

    Raises:
        OSError: a directory cannot be made or its mode cannot be set.
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=DIR_MODE, exist_ok=True)
        directory.chmod(DIR_MODE)
    path.chmod(DIR_MODE)
    return path


def create_private(path: Path) -> Path:
    """Make sure the file ``path`` exists with mode 0600 (empty if new), e.g. before SQLite opens it.

    SQLite gives a database's ``-wal``, ``-shm`` and ``-journal`` files the mode of the database file,
    so a database created here stays private with all its companions.

    Raises:
        OSError: the file cannot be made or its mode cannot be set.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return path


def open_private(path: Path, mode: str = "a") -> IO[str]:
    """Open the text file ``path`` for writing (``"a"`` to append, ``"w"`` to truncate) with mode 0600.

    Raises:
        ValueError: ``mode`` is not ``"a"`` or ``"w"``.
        OSError: the file cannot be opened or its mode cannot be set.
    """
    flags = {"a": os.O_APPEND, "w": os.O_TRUNC}
    if mode not in flags:
        msg = f"open_private opens files to write ('a' or 'w'), got mode {mode!r}"
        raise ValueError(msg)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags[mode], FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, mode, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600, atomically (a temporary file beside it, then a rename).

    Raises:
        OSError: the file cannot be written.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
